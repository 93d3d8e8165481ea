#include "timing/phase_recorder.h"

#include <algorithm>

#include "compat/torch_compat.h"
#include "timing/trace.h"

#if DDPBENCH_HAVE_NVTX
#include <nvtx3/nvToolsExt.h>
#endif

namespace ddpbench {

const char* phase_name(Phase phase) {
  switch (phase) {
    case Phase::Data: return "data";
    case Phase::Replicate: return "replicate";
    case Phase::Scatter: return "scatter";
    case Phase::Forward: return "forward";
    case Phase::GatherLoss: return "gather_loss";
    case Phase::Backward: return "backward";
    case Phase::Recompute: return "recompute";
    case Phase::Reduce: return "reduce";
    case Phase::CommExposed: return "comm_exposed";
    case Phase::ReduceScatterExposed: return "reduce_scatter_exposed";
    case Phase::AllGatherExposed: return "all_gather_exposed";
    case Phase::WorkerWait: return "worker_wait";
    case Phase::PipelineWait: return "pipeline_wait";
    case Phase::Optimizer: return "optimizer";
    case Phase::Checkpoint: return "checkpoint";
    case Phase::kCount: break;
  }
  return "unknown";
}

namespace {

#if DDPBENCH_HAVE_NVTX
// Without a tool attached these calls return at once; NVTX initialises on first use.
nvtxDomainHandle_t nvtx_domain() {
  static nvtxDomainHandle_t domain = nvtxDomainCreateA("ddpbench");
  return domain;
}
void nvtx_push(const char* name) {
  nvtxEventAttributes_t attributes{};
  attributes.version = NVTX_VERSION;
  attributes.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  attributes.messageType = NVTX_MESSAGE_TYPE_ASCII;
  attributes.message.ascii = name;
  nvtxDomainRangePushEx(nvtx_domain(), &attributes);
}
void nvtx_pop() { nvtxDomainRangePop(nvtx_domain()); }
std::uint64_t nvtx_start(const char* name) {
  nvtxEventAttributes_t attributes{};
  attributes.version = NVTX_VERSION;
  attributes.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  attributes.messageType = NVTX_MESSAGE_TYPE_ASCII;
  attributes.message.ascii = name;
  return nvtxDomainRangeStartEx(nvtx_domain(), &attributes);
}
void nvtx_end(std::uint64_t id) { nvtxDomainRangeEnd(nvtx_domain(), id); }
#else
void nvtx_push(const char*) {}
void nvtx_pop() {}
std::uint64_t nvtx_start(const char*) { return 0; }
void nvtx_end(std::uint64_t) {}
#endif
}  // namespace

PhaseRecorder::Scope::Scope(PhaseRecorder& recorder, Phase phase) : Scope(recorder, phase, std::string()) {}

PhaseRecorder::Scope::Scope(PhaseRecorder& recorder, Phase phase, const std::string& detail)
    : recorder_(recorder), phase_(phase), parent_(recorder.open_) {
  if (phase_ == recorder_.observed_phase_ && recorder_.observer_) recorder_.observer_(true);
  start_ = std::chrono::steady_clock::now();
  if (recorder_.cuda_device_ >= 0) start_event_ = compat::cuda_record_event(recorder_.cuda_device_);
  // NVTX copies the message at the push, so a name built here may go with the scope's constructor.
  nvtx_push(detail.empty() ? phase_name(phase) : (std::string(phase_name(phase)) + " " + detail).c_str());
  recorder_.open_ = this;
}

PhaseRecorder::Scope::~Scope() {
  nvtx_pop();
  recorder_.open_ = parent_;
  const auto end = std::chrono::steady_clock::now();
  const int i = static_cast<int>(phase_);
  if (recorder_.trace_) recorder_.trace_->record(phase_name(phase_), start_, end, recorder_.step_index_);
  recorder_.used_[i] = true;
  std::shared_ptr<void> end_event;
  if (start_event_) {
    try {
      end_event = compat::cuda_record_event(recorder_.cuda_device_);
    } catch (const std::exception&) {
      // A destructor must not throw: the host's time stands in, and the error shows at the sync.
    }
  }
  if (end_event) {
    recorder_.pending_.push_back({phase_, start_event_, std::move(end_event), std::move(nested_events_)});
    if (parent_) parent_->nested_events_.push_back(recorder_.pending_.size() - 1);
  } else {
    const double seconds = std::chrono::duration<double>(end - start_).count();
    recorder_.step_[i] += seconds - nested_seconds_;
    if (parent_) parent_->nested_seconds_ += seconds;
  }
  if (phase_ == recorder_.observed_phase_ && recorder_.observer_) {
    try {
      recorder_.observer_(false);
    } catch (const std::exception&) {
      // A destructor must not throw; the observer's figure for this scope is lost, nothing else.
    }
  }
}

PhaseRecorder::AsyncRange PhaseRecorder::begin_async(const char* name) const {
  AsyncRange range;
  range.active = true;
  range.name = name;
  range.trace = trace_;
  range.step = step_index_;
  range.start = std::chrono::steady_clock::now();
  range.nvtx_id = nvtx_start(name);
  return range;
}

void PhaseRecorder::end_async(const AsyncRange& range) {
  if (!range.active) return;
  nvtx_end(range.nvtx_id);
  if (range.trace) range.trace->record_async(range.name, range.start, std::chrono::steady_clock::now(), range.step);
}

void PhaseRecorder::add_measured(Phase phase, double seconds) {
  step_[static_cast<int>(phase)] += seconds;
  used_[static_cast<int>(phase)] = true;
}

void PhaseRecorder::move_measured(Phase from, Phase to, double seconds) {
  std::lock_guard<std::mutex> lock(*moves_mutex_);
  moves_.push_back({from, to, seconds});
}

void PhaseRecorder::begin_step() {
  step_.fill(0.0);
  pending_.clear();
  {
    std::lock_guard<std::mutex> lock(*moves_mutex_);
    moves_.clear();
  }
  step_start_ = std::chrono::steady_clock::now();
  nvtx_push("step");
}

void PhaseRecorder::end_step() {
  std::vector<double> elapsed;
  for (const auto& p : pending_) elapsed.push_back(compat::cuda_elapsed_seconds(p.start, p.end));
  for (std::size_t k = 0; k < pending_.size(); ++k) {
    double own = elapsed[k];
    for (auto child : pending_[k].nested) own -= elapsed[child];
    step_[static_cast<int>(pending_[k].phase)] += own;
  }
  pending_.clear();
  {
    std::lock_guard<std::mutex> lock(*moves_mutex_);
    for (const auto& m : moves_) {
      const double moved = std::min(m.seconds, step_[static_cast<int>(m.from)]);
      if (moved <= 0) continue;
      step_[static_cast<int>(m.from)] -= moved;
      step_[static_cast<int>(m.to)] += moved;
      used_[static_cast<int>(m.to)] = true;
    }
    moves_.clear();
  }
  nvtx_pop();
  if (trace_) trace_->record("step", step_start_, std::chrono::steady_clock::now(), step_index_);
}

}  // namespace ddpbench
