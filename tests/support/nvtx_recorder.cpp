// An NVTX injection library for the tests: NVTX loads the library named by NVTX_INJECTION64_PATH
// and calls InitializeInjectionNvtx2, which replaces the domain push/pop and start/end entries with
// functions that append lines to the file named by DDPBENCH_NVTX_LOG:
//   push <domain> <pid>:<thread> <name>      pop <domain> <pid>:<thread>
//   start <domain> <pid>:<thread> <pid>:<id> <name>      end <domain> <pid>:<thread> <pid>:<id>
// This is how a tool like Nsight Systems sees the ranges, without the tool. Every process of a run
// (ddpbench and the ranks it starts) appends to the same file, a whole line per write.
#include <nvtx3/nvToolsExt.h>
#include <pthread.h>
#include <unistd.h>

#include <atomic>

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>

namespace {

std::mutex g_mutex;
FILE* g_log = nullptr;

struct Domain {
  std::string name;
};

nvtxDomainHandle_t domain_create(const char* name) {
  return reinterpret_cast<nvtxDomainHandle_t>(new Domain{name ? name : ""});
}

const char* domain_name(nvtxDomainHandle_t domain) {
  return domain ? reinterpret_cast<Domain*>(domain)->name.c_str() : "(default)";
}

const char* message_of(const nvtxEventAttributes_t* attributes) {
  return attributes && attributes->messageType == NVTX_MESSAGE_TYPE_ASCII ? attributes->message.ascii : "?";
}

unsigned long thread_id() { return static_cast<unsigned long>(pthread_self()); }

int push(nvtxDomainHandle_t domain, const nvtxEventAttributes_t* attributes) {
  std::lock_guard<std::mutex> lock(g_mutex);
  std::fprintf(g_log, "push %s %d:%lu %s\n", domain_name(domain), getpid(), thread_id(), message_of(attributes));
  return 0;
}

int pop(nvtxDomainHandle_t domain) {
  std::lock_guard<std::mutex> lock(g_mutex);
  std::fprintf(g_log, "pop %s %d:%lu\n", domain_name(domain), getpid(), thread_id());
  return 0;
}

std::atomic<nvtxRangeId_t> g_next_id{1};

nvtxRangeId_t start(nvtxDomainHandle_t domain, const nvtxEventAttributes_t* attributes) {
  const nvtxRangeId_t id = g_next_id++;
  std::lock_guard<std::mutex> lock(g_mutex);
  std::fprintf(g_log, "start %s %d:%lu %d:%llu %s\n", domain_name(domain), getpid(), thread_id(), getpid(),
               static_cast<unsigned long long>(id), message_of(attributes));
  return id;
}

void end(nvtxDomainHandle_t domain, nvtxRangeId_t id) {
  std::lock_guard<std::mutex> lock(g_mutex);
  std::fprintf(g_log, "end %s %d:%lu %d:%llu\n", domain_name(domain), getpid(), thread_id(), getpid(),
               static_cast<unsigned long long>(id));
}

void flush_log() {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_log) std::fflush(g_log);
}

}  // namespace

extern "C" __attribute__((visibility("default"))) int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get_table) {
  const char* path = std::getenv("DDPBENCH_NVTX_LOG");
  if (!path || !(g_log = std::fopen(path, "a"))) return 0;
  std::setvbuf(g_log, nullptr, _IOLBF, 0);  // a whole line per write: the processes share the file
  std::atexit(flush_log);
  auto* callbacks = static_cast<const NvtxExportTableCallbacks*>(get_table(NVTX_ETID_CALLBACKS));
  NvtxFunctionTable table = nullptr;
  unsigned int size = 0;
  if (!callbacks || !callbacks->GetModuleFunctionTable(NVTX_CB_MODULE_CORE2, &table, &size) ||
      size <= NVTX_CBID_CORE2_DomainCreateA) {
    return 0;
  }
  *table[NVTX_CBID_CORE2_DomainCreateA] = reinterpret_cast<NvtxFunctionPointer>(&domain_create);
  *table[NVTX_CBID_CORE2_DomainRangePushEx] = reinterpret_cast<NvtxFunctionPointer>(&push);
  *table[NVTX_CBID_CORE2_DomainRangePop] = reinterpret_cast<NvtxFunctionPointer>(&pop);
  *table[NVTX_CBID_CORE2_DomainRangeStartEx] = reinterpret_cast<NvtxFunctionPointer>(&start);
  *table[NVTX_CBID_CORE2_DomainRangeEnd] = reinterpret_cast<NvtxFunctionPointer>(&end);
  return 1;
}
