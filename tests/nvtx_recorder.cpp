// An NVTX injection library for the tests: NVTX loads the library named by NVTX_INJECTION64_PATH
// and calls InitializeInjectionNvtx2, which replaces the domain push/pop entries with functions
// that append "push <domain> <thread> <name>" / "pop <domain> <thread>" lines to the file named by
// DDPBENCH_NVTX_LOG. This is how a tool like Nsight Systems sees the ranges, without the tool.
#include <nvtx3/nvToolsExt.h>
#include <pthread.h>

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

int push(nvtxDomainHandle_t domain, const nvtxEventAttributes_t* attributes) {
  const char* message = attributes && attributes->messageType == NVTX_MESSAGE_TYPE_ASCII ? attributes->message.ascii : "?";
  std::lock_guard<std::mutex> lock(g_mutex);
  std::fprintf(g_log, "push %s %lu %s\n", domain_name(domain), static_cast<unsigned long>(pthread_self()), message);
  return 0;
}

int pop(nvtxDomainHandle_t domain) {
  std::lock_guard<std::mutex> lock(g_mutex);
  std::fprintf(g_log, "pop %s %lu\n", domain_name(domain), static_cast<unsigned long>(pthread_self()));
  return 0;
}

void flush_log() {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_log) std::fflush(g_log);
}

}  // namespace

extern "C" __attribute__((visibility("default"))) int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get_table) {
  const char* path = std::getenv("DDPBENCH_NVTX_LOG");
  if (!path || !(g_log = std::fopen(path, "w"))) return 0;
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
  return 1;
}
