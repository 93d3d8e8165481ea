#include "strategies/hogwild_processes.h"

#include <algorithm>
#include <ATen/Parallel.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <new>
#include <thread>

#include "base/child_process.h"
#include "compat/cuda_ipc.h"
#include "compat/torch_compat.h"
#include "devices/device_set.h"
#include "base/errors.h"
#include "timing/trace.h"
#include "models/workload_sources.h"
#include "strategies/hogwild_worker.h"

namespace ddpbench {
namespace {

using Clock = std::chrono::steady_clock;

constexpr std::uint64_t kMagic = 0x646470626877676bULL;  // "ddpbhwgk"
constexpr int kMaxTensors = 1024;
constexpr int kMaxBatchDims = 8;
// The descriptors a worker finds its command pipe, reply pipe and shared memory at.
constexpr int kCommandFd = 3, kReplyFd = 4, kSharedFd = 5;
constexpr const char* kWorkerVariable = "DDPBENCH_HOGWILD_WORKER";
constexpr const char* kParentVariable = "DDPBENCH_HOGWILD_PARENT";

std::size_t align64(std::size_t n) { return (n + 63) / 64 * 64; }

// The batch buffer holds this many global batches: the parent may copy in the next step's while the
// workers still read this one's (a step sent ahead, HogwildProcesses::send).
constexpr std::int64_t kBatchSlots = 2;

}  // namespace

// Outside the anonymous namespace because ControlBlock (declared in the header) holds two.
struct BatchSlot {
  std::int64_t offset = 0;
  std::int32_t dtype = 0;  // c10::ScalarType
  std::int32_t dims = 0;
  std::int64_t sizes[kMaxBatchDims] = {};  // sizes[0] is the global batch
};

// The head of the shared object. The tensors and the batch buffer follow it at the recorded offsets
// (counted from the object's start) on the CPU; on CUDA they are at those offsets in the device
// allocation whose IPC handle this block carries.
struct ControlBlock {
  std::uint64_t magic;
  std::atomic<std::uint64_t> updates;  // the shared update counter (staleness is read off it)
  char workload[64];
  std::int32_t workers, devices, sync_every, threads_per_worker, parity_optimizer;
  std::int32_t precision;  // Precision
  std::int32_t checkpoint_kind, checkpoint_every;  // CheckpointPolicy (--activation-checkpointing)
  std::int32_t grad_accum;                         // --grad-accum
  // The parent's WorkloadSettings (--seq-len, --gpt2-size, --gpt2-loss), which shape the model: a
  // worker that built gpt2 small under a --gpt2-size run would not match the parent's tensors.
  std::int32_t settings_cuda, settings_plain_loss;
  std::int64_t settings_sequence_length;  // -1: the workload's default
  char settings_gpt2_size[64];
  std::int32_t cuda_device;  // -1: the CPU
  compat::CudaIpcHandle cuda_buffer;
  std::int32_t parameter_count, buffer_count;
  std::int64_t tensor_offset[kMaxTensors];  // parameters, then buffers, in module order
  std::int64_t tensor_bytes[kMaxTensors];
  BatchSlot inputs, targets;
};

namespace {

// Parent to worker: train on rows [row_begin, row_begin + rows) of the batch buffer.
struct Command {
  std::int64_t step;
  std::int64_t row_begin;
  std::int64_t rows;
  std::int64_t trace_step;  // record this update's ranges as trace events, under this step number; -1: do not
};

// Worker to parent; smaller than PIPE_BUF, so each write arrives whole.
struct Reply {
  enum Kind : std::int32_t { Ready, Update, Error };
  Kind kind;
  std::int32_t wrote;  // the update wrote into the shared parameters (staleness is valid)
  std::int64_t staleness;
  double loss;
  double forward_seconds, backward_seconds, optimizer_seconds;
  std::int64_t peak_rss_bytes;
  char message[512];
  char trace[2048];  // the update's trace events (TraceRecorder::encode), when asked for
};
static_assert(sizeof(Reply) < PIPE_BUF, "a reply must be written atomically");

bool read_exactly(int fd, void* data, std::size_t size) {
  auto* p = static_cast<char*>(data);
  while (size > 0) {
    const ssize_t n = ::read(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    size -= static_cast<std::size_t>(n);
  }
  return true;
}

bool write_exactly(int fd, const void* data, std::size_t size) {
  const auto* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    size -= static_cast<std::size_t>(n);
  }
  return true;
}

std::int64_t peak_rss_bytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<std::int64_t>(usage.ru_maxrss) * 1024;
}

// A view of the shared data at `offset`: host shared memory, or the CUDA IPC allocation on `device`.
torch::Tensor tensor_at(void* base, std::int64_t offset, c10::IntArrayRef sizes, c10::ScalarType dtype,
                        torch::Device device) {
  return torch::from_blob(static_cast<char*>(base) + offset, sizes, torch::TensorOptions().dtype(dtype).device(device));
}

torch::Tensor batch_at(void* base, const BatchSlot& slot, torch::Device device) {
  return tensor_at(base, slot.offset, c10::IntArrayRef(slot.sizes, static_cast<std::size_t>(slot.dims)),
                   static_cast<c10::ScalarType>(slot.dtype), device);
}

torch::Device data_device(const ControlBlock& control) {
  return control.cuda_device >= 0 ? torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(control.cuda_device))
                                  : torch::Device(torch::kCPU);
}

BatchSlot batch_slot(const torch::Tensor& sample, std::int64_t global_batch, std::size_t& offset) {
  if (sample.dim() > kMaxBatchDims) throw CaseFailure("hogwild: a batch tensor has more than 8 dimensions");
  BatchSlot slot;
  slot.offset = static_cast<std::int64_t>(offset);
  slot.dtype = static_cast<std::int32_t>(sample.scalar_type());
  slot.dims = static_cast<std::int32_t>(sample.dim());
  slot.sizes[0] = global_batch;
  for (int d = 1; d < sample.dim(); ++d) slot.sizes[d] = sample.size(d);
  offset += align64(static_cast<std::size_t>(sample.numel() / std::max<std::int64_t>(1, sample.size(0)) * global_batch) *
                    sample.element_size());
  return slot;
}

// The shared tensors, over the worker's own model's shapes (checked against the parent's bytes).
void shared_tensors(void* base, const ControlBlock& control, WorkloadModel& model, std::vector<torch::Tensor>& parameters,
                    std::vector<torch::Tensor>& buffers) {
  const torch::Device device = data_device(control);
  const auto own_parameters = model.distinct_parameters();
  const auto own_buffers = model.distinct_buffers();
  if (static_cast<int>(own_parameters.size()) != control.parameter_count ||
      static_cast<int>(own_buffers.size()) != control.buffer_count) {
    throw std::runtime_error("the worker's model does not match the parent's");
  }
  int i = 0;
  auto place = [&](const torch::Tensor& like) {
    if (static_cast<std::int64_t>(like.numel() * like.element_size()) != control.tensor_bytes[i]) {
      throw std::runtime_error("the worker's model does not match the parent's");
    }
    return tensor_at(base, control.tensor_offset[i++], like.sizes(), like.scalar_type(), device);
  };
  for (const auto& p : own_parameters) parameters.push_back(place(p));
  for (const auto& b : own_buffers) buffers.push_back(place(b));
}

// DDPBENCH_FAULT_WORKER=<index>:kill or <index>:hang, for the tests: that worker SIGKILLs itself, or
// stops replying, when told to do its third update; <index>:hang-start: it never says it is ready.
std::string worker_fault(int index) {
  const char* spec = std::getenv("DDPBENCH_FAULT_WORKER");
  if (spec == nullptr) return {};
  const std::string s = spec;
  const auto colon = s.find(':');
  if (colon == std::string::npos || s.substr(0, colon) != std::to_string(index)) return {};
  return s.substr(colon + 1);
}

}  // namespace

HogwildProcesses::HogwildProcesses(HogwildProcessesConfig config, WorkloadModel& model)
    : config_(std::move(config)), oom_kills_before_(oom_kill_count()) {
  // A write to a dead worker's command pipe must fail with EPIPE (and name the worker), not end
  // this process with SIGPIPE.
  ::signal(SIGPIPE, SIG_IGN);
  const auto parameters = model.distinct_parameters();
  const auto buffers = model.distinct_buffers();
  if (parameters.size() + buffers.size() > static_cast<std::size_t>(kMaxTensors)) {
    throw CaseFailure("hogwild processes mode: the model has more than " + std::to_string(kMaxTensors) + " tensors");
  }
  if (config_.workload->name().size() >= sizeof(ControlBlock::workload)) {
    throw CaseFailure("hogwild processes mode: workload name too long");
  }
  if (workload_settings().gpt2_size.size() >= sizeof(ControlBlock::settings_gpt2_size)) {
    throw CaseFailure("hogwild processes mode: --gpt2-size too long");
  }
  // Where everything goes: the control block, each tensor, the batch buffer. On CUDA the control
  // block is alone in shared memory and the rest is in the device allocation, from its start.
  const bool cuda = config_.cuda_device >= 0;
  if (cuda) data_device_ = torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(config_.cuda_device));
  std::size_t offset = cuda ? 0 : align64(sizeof(ControlBlock));
  std::vector<std::int64_t> tensor_offsets;
  for (const auto* list : {&parameters, &buffers}) {
    for (const auto& t : *list) {
      tensor_offsets.push_back(static_cast<std::int64_t>(offset));
      offset += align64(static_cast<std::size_t>(t.numel() * t.element_size()));
    }
  }
  const Dataset sample = config_.workload->make_dataset(1, config_.seed);
  const BatchSlot inputs = batch_slot(sample.inputs, kBatchSlots * config_.global_batch, offset);
  const BatchSlot targets = batch_slot(sample.targets, kBatchSlots * config_.global_batch, offset);

  compat::CudaIpcHandle cuda_buffer{};
  try {
    region_ = SharedMemoryRegion::create(cuda ? align64(sizeof(ControlBlock)) : offset, "ddpbench-hogwild");
  } catch (const std::runtime_error& e) {
    throw CaseFailure(std::string("hogwild processes mode: ") + e.what() + "; --hogwild-mode threads needs none");
  }
  if (cuda) {
    try {
      device_buffer_ = compat::cuda_ipc_allocate(config_.cuda_device, offset, cuda_buffer);
    } catch (const std::runtime_error& e) {
      throw CaseFailure(std::string("hogwild processes mode on CUDA: ") + e.what());
    }
  }
  data_ = cuda ? device_buffer_.get() : region_.data();
  control_ = new (region_.data()) ControlBlock{};
  control_->magic = kMagic;
  control_->updates.store(0);
  std::strncpy(control_->workload, config_.workload->name().c_str(), sizeof(control_->workload) - 1);
  control_->workers = config_.workers;
  control_->devices = std::max(1, config_.devices);
  control_->sync_every = config_.sync_every;
  control_->checkpoint_kind = static_cast<std::int32_t>(config_.activation_checkpointing.kind);
  control_->checkpoint_every = config_.activation_checkpointing.every;
  control_->grad_accum = config_.grad_accum;
  const WorkloadSettings& settings = workload_settings();
  control_->settings_cuda = settings.cuda ? 1 : 0;
  control_->settings_plain_loss = settings.gpt2_plain_loss ? 1 : 0;
  control_->settings_sequence_length = settings.sequence_length.value_or(-1);
  std::strncpy(control_->settings_gpt2_size, settings.gpt2_size.c_str(), sizeof(control_->settings_gpt2_size) - 1);
  control_->threads_per_worker = config_.threads_per_worker;
  control_->parity_optimizer = config_.parity_optimizer ? 1 : 0;
  control_->precision = static_cast<std::int32_t>(config_.precision);
  control_->cuda_device = cuda ? config_.cuda_device : -1;
  control_->cuda_buffer = cuda_buffer;
  control_->parameter_count = static_cast<std::int32_t>(parameters.size());
  control_->buffer_count = static_cast<std::int32_t>(buffers.size());
  control_->inputs = inputs;
  control_->targets = targets;

  // The parent's model moves into the shared object: its values are copied there once, and from
  // then on its tensors are views of it (no per-step copies into shared memory).
  {
    torch::NoGradGuard no_grad;
    int i = 0;
    for (const auto* list : {&parameters, &buffers}) {
      for (auto t : *list) {
        control_->tensor_offset[i] = tensor_offsets[static_cast<std::size_t>(i)];
        control_->tensor_bytes[i] = t.numel() * static_cast<std::int64_t>(t.element_size());
        auto shared = shared_view(tensor_offsets[static_cast<std::size_t>(i)], t.sizes(), t.scalar_type());
        shared.copy_(t);
        t.set_data(shared);
        ++i;
      }
    }
  }

  if (cuda) compat::cuda_synchronize(config_.cuda_device);  // the values are in before a worker reads them
  workers_.resize(static_cast<std::size_t>(config_.workers));
  try {
    for (int w = 0; w < config_.workers; ++w) spawn(w);
    collect("start", [](int, const Reply&) {});
  } catch (...) {
    stop_all(/*kill_now=*/true);
    throw;
  }
}

HogwildProcesses::~HogwildProcesses() { stop_all(/*kill_now=*/false); }

torch::Tensor HogwildProcesses::shared_view(std::int64_t offset, c10::IntArrayRef sizes, c10::ScalarType dtype) const {
  if (!device_buffer_) return tensor_at(data_, offset, sizes, dtype, data_device_);
  return torch::from_blob(static_cast<char*>(data_) + offset, sizes, [keep = device_buffer_](void*) {},
                          torch::TensorOptions().dtype(dtype).device(data_device_));
}

std::vector<pid_t> HogwildProcesses::worker_pids() const {
  std::vector<pid_t> pids;
  for (const auto& w : workers_) pids.push_back(w.pid);
  return pids;
}

void HogwildProcesses::spawn(int index) {
  auto& w = workers_[static_cast<std::size_t>(index)];
  int command[2], reply[2];
  if (::pipe2(command, O_CLOEXEC) != 0) throw CaseFailure(std::string("hogwild: pipe: ") + std::strerror(errno));
  if (::pipe2(reply, O_CLOEXEC) != 0) {
    ::close(command[0]);
    ::close(command[1]);
    throw CaseFailure(std::string("hogwild: pipe: ") + std::strerror(errno));
  }
  // The child's ends are moved above the fixed numbers first, so that no dup2 onto 3, 4 or 5
  // closes a source still to be duplicated.
  const int child_command = ::fcntl(command[0], F_DUPFD_CLOEXEC, 10);
  const int child_reply = ::fcntl(reply[1], F_DUPFD_CLOEXEC, 10);
  const int child_shared = ::fcntl(region_.fd(), F_DUPFD_CLOEXEC, 10);
  ::close(command[0]);
  ::close(reply[1]);
  w.command_fd = command[1];
  w.reply_fd = reply[0];

  // Its own process group, so a terminal's Ctrl-C reaches the parent, which ends the workers at a
  // step boundary instead of killing them mid-update.
  ChildSpawn spawn{config_.executable, {}, inherited_environment([](const std::string& entry) {
                     return entry.rfind(std::string(kWorkerVariable) + "=", 0) == 0 ||
                            entry.rfind(std::string(kParentVariable) + "=", 0) == 0 ||
                            entry.rfind(std::string(kWorkloadSourcesVariable) + "=", 0) == 0;
                   }),
                   0, {{child_command, kCommandFd}, {child_reply, kReplyFd}, {child_shared, kSharedFd}}};
  spawn.environment.push_back(std::string(kWorkerVariable) + "=" + std::to_string(index));
  spawn.environment.push_back(std::string(kParentVariable) + "=" + std::to_string(::getpid()));
  // The models and plug-in libraries this process loaded: the worker loads them before it looks
  // the workload up.
  if (!installed_workload_sources().empty()) {
    spawn.environment.push_back(std::string(kWorkloadSourcesVariable) + "=" + installed_workload_sources().to_json());
  }
  pid_t pid = -1;
  std::string error;
  try {
    pid = spawn_child(spawn);
  } catch (const std::exception& e) {
    error = e.what();
  }
  ::close(child_command);
  ::close(child_reply);
  ::close(child_shared);
  if (pid < 0) throw CaseFailure("hogwild: cannot start worker " + std::to_string(index) + " (" + config_.executable + "): " + error);
  w.pid = pid;
  w.running = true;
}

template <typename OnReply>
void HogwildProcesses::collect(const char* what, OnReply on_reply) {
  std::vector<bool> pending(workers_.size(), true);
  std::size_t left = workers_.size();
  const auto deadline = Clock::now() + config_.timeout;
  while (left > 0) {
    std::vector<pollfd> fds;
    std::vector<int> index;
    for (std::size_t i = 0; i < workers_.size(); ++i) {
      if (!pending[i]) continue;
      fds.push_back({workers_[i].reply_fd, POLLIN, 0});
      index.push_back(static_cast<int>(i));
    }
    const auto remaining = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (config_.stop_requested()) {
      stop_all(/*kill_now=*/true);
      throw RunInterrupted();
    }
    if (remaining <= 0) {
      fail(index.front(), std::string("hung: no reply to '") + what + "' within " +
                              std::to_string(config_.timeout.count() / 1000.0).substr(0, 5) + " s (--timeout)");
    }
    // Slices of 100 ms: a signal is answered within one, whichever thread it was delivered to.
    const int n = ::poll(fds.data(), fds.size(), static_cast<int>(std::min<long long>(remaining, 100)));
    if (n < 0 && errno != EINTR) fail(index.front(), std::string("poll failed: ") + std::strerror(errno));
    for (std::size_t k = 0; n > 0 && k < fds.size(); ++k) {
      if (fds[k].revents == 0) continue;
      const int i = index[k];
      Reply reply{};
      if (!read_exactly(workers_[static_cast<std::size_t>(i)].reply_fd, &reply, sizeof(reply))) {
        // End of file: the worker is gone. Its exit status says how.
        int status = 0;
        auto& w = workers_[static_cast<std::size_t>(i)];
        ::waitpid(w.pid, &status, 0);
        w.running = false;
        fail(i, exit_text(status, oom_kills_before_, oom_kill_count()));
      }
      if (reply.kind == Reply::Error) {
        reply.message[sizeof(reply.message) - 1] = '\0';
        fail(i, std::string("failed: ") + reply.message);
      }
      on_reply(i, reply);
      pending[static_cast<std::size_t>(i)] = false;
      --left;
    }
  }
}

void HogwildProcesses::fail(int index, const std::string& reason) {
  stop_all(/*kill_now=*/true);
  throw CaseFailure("hogwild worker " + std::to_string(index) + " " + reason);
}

void HogwildProcesses::stop_all(bool kill_now) {
  for (auto& w : workers_) {
    if (w.command_fd >= 0) ::close(w.command_fd);  // end of file: a healthy worker exits
    w.command_fd = -1;
    if (kill_now && w.running) ::kill(w.pid, SIGKILL);
  }
  const auto grace = Clock::now() + std::chrono::seconds(5);
  for (auto& w : workers_) {
    while (w.running) {
      int status = 0;
      const pid_t r = ::waitpid(w.pid, &status, WNOHANG);
      if (r == w.pid || (r < 0 && errno == ECHILD)) {
        w.running = false;
      } else if (Clock::now() >= grace) {
        ::kill(w.pid, SIGKILL);
        ::waitpid(w.pid, &status, 0);
        w.running = false;
      } else {
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
      }
    }
    if (w.reply_fd >= 0) ::close(w.reply_fd);
    w.reply_fd = -1;
  }
}

void HogwildProcesses::send(const Batch& batch, std::optional<std::int64_t> trace_step) {
  const std::int64_t rows = batch.inputs.size(0);
  if (rows > config_.global_batch || batch.targets.size(0) != rows) {
    throw CaseFailure("hogwild processes mode: a batch larger than the global batch");
  }
  // Every step in flight has a slot of its own: the one this step takes was last read by a step
  // whose replies are all in.
  if (in_flight_.size() >= static_cast<std::size_t>(kBatchSlots)) {
    throw std::logic_error("hogwild processes mode: a step sent while " + std::to_string(kBatchSlots) +
                           " wait for their replies");
  }
  const std::int64_t slot_begin = (next_step_ % kBatchSlots) * config_.global_batch;
  {
    torch::NoGradGuard no_grad;
    batch_at(data_, control_->inputs, data_device_).narrow(0, slot_begin, rows).copy_(batch.inputs);
    batch_at(data_, control_->targets, data_device_).narrow(0, slot_begin, rows).copy_(batch.targets);
  }
  // On CUDA the copies run on this process's stream, which the workers' streams cannot wait on:
  // the rows are on the device before any worker is told to read them.
  if (data_device_.is_cuda()) compat::cuda_synchronize(data_device_.index());
  // Even shards, the first rows % workers one row larger (as torch.chunk would not: no empty shard).
  const std::int64_t n = static_cast<std::int64_t>(workers_.size());
  InFlight step;
  step.rows = rows;
  step.shard_rows.assign(workers_.size(), 0);
  std::int64_t begin = slot_begin;
  for (std::int64_t i = 0; i < n; ++i) {
    step.shard_rows[static_cast<std::size_t>(i)] = rows / n + (i < rows % n ? 1 : 0);
    const Command command{next_step_, begin, step.shard_rows[static_cast<std::size_t>(i)], trace_step.value_or(-1)};
    begin += command.rows;
    if (!write_exactly(workers_[static_cast<std::size_t>(i)].command_fd, &command, sizeof(command))) {
      int status = 0;
      auto& w = workers_[static_cast<std::size_t>(i)];
      ::waitpid(w.pid, &status, 0);
      w.running = false;
      fail(static_cast<int>(i), exit_text(status, oom_kills_before_, oom_kill_count()));
    }
  }
  in_flight_.push_back(std::move(step));
  ++next_step_;
}

HogwildProcessesStep HogwildProcesses::wait() {
  if (in_flight_.empty()) throw std::logic_error("hogwild processes mode: waiting for a step never sent");
  // Each worker answers its commands in order, so the next reply of each is the oldest step's.
  const InFlight step = std::move(in_flight_.front());
  in_flight_.pop_front();
  HogwildProcessesStep out;
  out.peak_rss_bytes.resize(workers_.size());
  out.worker_traces.resize(workers_.size());
  double weighted_loss = 0;
  collect("update", [&](int i, const Reply& reply) {
    weighted_loss += reply.loss * static_cast<double>(step.shard_rows[static_cast<std::size_t>(i)]);
    if (reply.wrote) out.staleness.push_back(reply.staleness);
    out.peak_rss_bytes[static_cast<std::size_t>(i)] = reply.peak_rss_bytes;
    out.worker_traces[static_cast<std::size_t>(i)].assign(reply.trace, strnlen(reply.trace, sizeof(reply.trace)));
    if (i == 0) {
      out.worker0_phases[static_cast<int>(Phase::Forward)] = reply.forward_seconds;
      out.worker0_phases[static_cast<int>(Phase::Backward)] = reply.backward_seconds;
      out.worker0_phases[static_cast<int>(Phase::Optimizer)] = reply.optimizer_seconds;
    }
  });
  out.loss = weighted_loss / static_cast<double>(step.rows);
  return out;
}

bool is_hogwild_worker_process() { return std::getenv(kWorkerVariable) != nullptr; }

int hogwild_worker_main() {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive the parent
  const char* parent = std::getenv(kParentVariable);
  if (parent == nullptr || std::to_string(::getppid()) != parent) return 1;  // the parent is gone already
  const int index = std::atoi(std::getenv(kWorkerVariable));
  ::fcntl(kCommandFd, F_SETFD, FD_CLOEXEC);
  ::fcntl(kReplyFd, F_SETFD, FD_CLOEXEC);
  auto send_error = [&](const std::string& message) {
    Reply reply{};
    reply.kind = Reply::Error;
    std::strncpy(reply.message, message.substr(0, message.find('\n')).c_str(), sizeof(reply.message) - 1);
    write_exactly(kReplyFd, &reply, sizeof(reply));
  };
  try {
    SharedMemoryRegion region = SharedMemoryRegion::attach(kSharedFd);
    auto& control = *static_cast<ControlBlock*>(region.data());
    if (region.size() < sizeof(ControlBlock) || control.magic != kMagic) throw std::runtime_error("not a hogwild control block");
    if (const char* sources = std::getenv(kWorkloadSourcesVariable)) {
      install_workload_sources(WorkloadSources::from_json(sources));
    }
    WorkloadSettings settings;
    settings.cuda = control.settings_cuda != 0;
    settings.gpt2_plain_loss = control.settings_plain_loss != 0;
    if (control.settings_sequence_length >= 0) settings.sequence_length = control.settings_sequence_length;
    settings.gpt2_size = std::string(control.settings_gpt2_size, strnlen(control.settings_gpt2_size, sizeof(control.settings_gpt2_size)));
    configure_workloads(settings);
    const Workload& workload = WorkloadRegistry::instance().get(control.workload);
    // CUDA: the parent's device allocation, mapped here; the tensors below are views of it, so it is
    // declared first and unmapped last.
    std::shared_ptr<void> device_buffer;
    if (control.cuda_device >= 0) device_buffer = compat::cuda_ipc_open(control.cuda_device, control.cuda_buffer);
    void* data = device_buffer ? device_buffer.get() : region.data();
    const torch::Device device = data_device(control);
    // Its device's cores, as ranks have (the OpenMP team it starts inherits them); the workers of
    // one virtual device share them.
    pin_to_core_slice(index % control.devices, control.devices, control.threads_per_worker);
    at::set_num_threads(control.threads_per_worker);
    ModelPtr model = workload.make_model();
    model->to(device);
    if (control.checkpoint_kind != static_cast<std::int32_t>(CheckpointPolicy::Kind::None)) {
      // Untimed here: the recomputation stays inside the backward seconds this worker reports.
      auto checkpointing = std::make_shared<ActivationCheckpointing>();
      checkpointing->policy.kind = static_cast<CheckpointPolicy::Kind>(control.checkpoint_kind);
      checkpointing->policy.every = control.checkpoint_every;
      model->set_activation_checkpointing(std::move(checkpointing));
    }
    std::vector<torch::Tensor> parameters, buffers;
    shared_tensors(data, control, *model, parameters, buffers);
    const OptimizerFactory optimizer = control.parity_optimizer ? parity_optimizer(workload) : training_optimizer(workload);
    HogwildWorker worker(model, parameters, buffers, workload, optimizer, control.sync_every, control.updates,
                         static_cast<Precision>(control.precision), index, control.workers);
    worker.set_grad_accum(control.grad_accum);
    const torch::Tensor inputs = batch_at(data, control.inputs, device);
    const torch::Tensor targets = batch_at(data, control.targets, device);
    const std::string fault = worker_fault(index);

    while (fault == "hang-start") std::this_thread::sleep_for(std::chrono::seconds(1));  // injected fault
    Reply ready{};
    ready.kind = Reply::Ready;
    if (!write_exactly(kReplyFd, &ready, sizeof(ready))) return 1;
    PhaseRecorder phases;
    TraceRecorder trace(0, 1);  // the parent merges the events into its own file
    Command command{};
    while (read_exactly(kCommandFd, &command, sizeof(command))) {  // end of file: the run is over
      if (command.step == 2 && fault == "kill") ::raise(SIGKILL);                               // injected fault
      while (command.step == 2 && fault == "hang") std::this_thread::sleep_for(std::chrono::seconds(1));  // injected
      phases.set_trace(command.trace_step >= 0 ? &trace : nullptr);
      phases.set_step(command.trace_step);
      phases.begin_step();
      const HogwildUpdate update =
          worker.step(inputs.narrow(0, command.row_begin, command.rows), targets.narrow(0, command.row_begin, command.rows), phases);
      phases.end_step();
      Reply reply{};
      reply.kind = Reply::Update;
      reply.loss = update.loss;
      reply.wrote = update.staleness.has_value() ? 1 : 0;
      reply.staleness = update.staleness.value_or(0);
      reply.forward_seconds = phases.step_seconds()[static_cast<int>(Phase::Forward)];
      reply.backward_seconds = phases.step_seconds()[static_cast<int>(Phase::Backward)];
      reply.optimizer_seconds = phases.step_seconds()[static_cast<int>(Phase::Optimizer)];
      reply.peak_rss_bytes = peak_rss_bytes();
      if (command.trace_step >= 0) {
        const std::string events = trace.encode();
        trace.clear();
        // Whole events only: a step's few ranges fit, but never write a partial line.
        const std::size_t fits = events.size() < sizeof(reply.trace) ? events.size()
                                                                      : events.rfind('\n', sizeof(reply.trace) - 2) + 1;
        std::memcpy(reply.trace, events.data(), fits);
      }
      if (!write_exactly(kReplyFd, &reply, sizeof(reply))) return 1;
    }
    return 0;
  } catch (const std::exception& e) {
    send_error(e.what());
    return 1;
  }
}

}  // namespace ddpbench
