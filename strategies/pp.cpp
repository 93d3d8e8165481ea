// `pp`: pipeline parallelism, the layers on different devices. Ranks as processes exactly as ddp;
// rank r holds stage r of p (under interleaved-1f1b, stages r, r + p, ... of p V): a contiguous run
// of the workload's chain units (WorkloadModel::chain_length, the units fsdp wraps), the first stage
// also the chain's head and the last its tail and the loss. Each step splits the batch into m
// micro-batches and runs pipeline::rank_actions' list for this rank: a forward receives its input
// from the stage before and sends its output on; a backward receives its output's gradient from the
// stage after and sends its input's back (Gloo or NCCL send/recv). A micro-batch's loss enters
// with weight (its samples / the batch), so the step's gradients are single's on the whole batch.
// A weight both ends use (gpt2's token embedding, also its output projection) lives on the first
// and the last stage and its gradient is summed between them each step, as Megatron does.
//
// Time a rank waits for a neighbour (the bubble, and transfers nothing hid) is pipeline_wait.
// --grad-accum K runs the schedule K times a step, each round on 1/K of the batch, the gradients
// summing until the step's sums and the optimizer after the last.
//
// On a mesh (--mesh dp=D,pp=P; distributed/mesh.h) each group of P ranks along pp is a pipeline of
// its own, on its dp group's share of the batch (micro-batches of that share), and the D pipelines
// are cut alike (the stage plan is agreed over the world). After its schedule a rank all-reduces
// the gradients of what it trains, and the step's loss, over its dp group, in one flat buffer after
// the last backward (not overlapped with it, as torch.distributed.pipelining's DDP over a stage
// is). Micro-batch losses enter weighted by their share of the global batch, so the sum is single's.
// On --mesh fsdp=F,pp=P the F pipelines shard instead what each stage holds over their fsdp group,
// as one FSDP unit a stage (collectives/sharded_units.h): gathered as the step begins and kept for
// its micro-batches (FSDP2 under pipelining: reshard_after_forward off), the gradients accumulated
// over them and reduce-scattered once after the schedule into the chunks the optimizer steps.
// docs/pipeline.md says what is measured and what is not built yet.
#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "base/errors.h"
#include "collectives/sharded_units.h"
#include "compat/c10d_compat.h"
#include "distributed/mesh.h"
#include "distributed/process_group.h"
#include "pipeline/schedule.h"
#include "strategies/pp_stages.h"
#include "strategies/rank_state.h"
#include "strategies/strategy.h"

namespace ddpbench {
namespace {

using pipeline::Action;
using pipeline::PipelineShape;
using pipeline::ScheduleKind;

// The ranks of one pipeline and of the data parallelism over the pipelines: the mesh's pp and dp
// (or fsdp) sizes, or the world and 1. pp 0: the mesh has no pp dimension.
struct PipelineRanks {
  int pp = 1, dp = 1;
  std::string data_dimension = "dp";  // the mesh's name for the pipelines' dimension: dp or fsdp
};
PipelineRanks pipeline_ranks(const CaseSpec& spec, const StrategyOptions& options) {
  if (options.mesh.empty()) return {spec.world_size, 1};
  const Mesh mesh = Mesh::parse(options.mesh, mesh_dimension_names(), spec.world_size);
  const auto pp = mesh.find("pp"), dp = mesh.find("dp") ? mesh.find("dp") : mesh.find("fsdp");
  return {pp ? mesh.dimensions()[*pp].size : 0, dp ? mesh.dimensions()[*dp].size : 1,
          dp ? mesh.dimensions()[*dp].name : "dp"};
}

// A pipeline's batch for one round of the schedule: its dp group's share of the global batch, over
// --grad-accum (each of the K rounds a step runs the whole schedule on 1/K of it).
std::int64_t round_batch(const CaseSpec& spec, const StrategyOptions& options, const PipelineRanks& ranks) {
  return spec.global_batch / ranks.dp / std::max(1, options.levers.grad_accum);
}

// The shape a case runs: p = a pipeline's ranks, V from --stages-per-rank (2 under interleaved-1f1b
// unless given), m from --microbatches or, by default, the most up to 2 p V that divides a
// pipeline's batch of a round (a multiple of p under interleaved-1f1b, as Megatron's schedule
// needs). Naive is one batch.
PipelineShape shape_for(const CaseSpec& spec, const StrategyOptions& options) {
  const PipelineOptions& o = options.pipeline;
  const PipelineRanks ranks = pipeline_ranks(spec, options);
  const std::int64_t batch = round_batch(spec, options, ranks);
  PipelineShape s;
  s.ranks = ranks.pp;
  s.chunks_per_rank = o.stages_per_rank > 0 ? o.stages_per_rank : (o.schedule == ScheduleKind::Interleaved1F1B ? 2 : 1);
  if (o.schedule == ScheduleKind::Naive) {
    s.microbatches = o.microbatches > 0 ? o.microbatches : 1;
  } else if (o.microbatches > 0) {
    s.microbatches = o.microbatches;
  } else {
    const int step = o.schedule == ScheduleKind::Interleaved1F1B ? s.ranks : 1;
    s.microbatches = 0;
    for (int m = 2 * s.stages(); m >= step && s.microbatches == 0; --m) {
      if (m % step == 0 && batch % m == 0) s.microbatches = m;
    }
  }
  return s;
}

// The NVTX name of a micro-batch's forward or backward on a stage ("forward mb3 stage1"), so that
// Nsight's timeline shows the schedule itself, not only which phase a rank is in.
std::string microbatch_label(int microbatch, int stage) {
  return "mb" + std::to_string(microbatch) + " stage" + std::to_string(stage);
}

// A message's tag: micro-batch, the boundary after stage `stage`, and what travels (an
// activation's shape, the activation, its gradient), distinct within a step.
enum class Carries { Shape = 0, Activation = 1, Gradient = 2 };
int tag_of(int microbatch, int stage, Carries what) { return (microbatch * 4096 + stage) * 3 + static_cast<int>(what); }

// An activation's shape and dtype, sent once per boundary before its first activation: every
// micro-batch of a run has the same size, so the receiver allocates from it ever after.
constexpr int kMaxDims = 8;

class PipelineStrategy final : public Strategy {
 protected:
  std::optional<std::string> do_unsupported_reason(const CaseSpec& spec, const DeviceSet& devices,
                                                   const StrategyOptions& options) const override {
    if (devices.is_cuda() && !compat::have_nccl()) return "this LibTorch has no NCCL, which pp needs on CUDA";
    const auto& workload = WorkloadRegistry::instance().get(spec.workload);
    const WorkloadFacts facts = workload.facts();
    if (facts.chain_length == 0) return "pp cuts the model between its units, and " + facts.chain_refusal;
    const auto& o = options.pipeline;
    const PipelineRanks ranks = pipeline_ranks(spec, options);
    if (ranks.pp == 0) return "pp runs on a mesh with a pp dimension, and " + options.mesh + " has none";
    if (spec.global_batch % ranks.dp != 0) {
      return "the batch of " + std::to_string(spec.global_batch) + " does not divide among the " + std::to_string(ranks.dp) +
             " pipelines (--mesh's " + ranks.data_dimension + ")";
    }
    const int rounds = std::max(1, options.levers.grad_accum);
    if ((spec.global_batch / ranks.dp) % rounds != 0) {
      return "--grad-accum " + std::to_string(rounds) + " does not divide " + (ranks.dp > 1 ? "a pipeline's" : "the") +
             " batch of " + std::to_string(spec.global_batch / ranks.dp);
    }
    const std::int64_t batch = round_batch(spec, options, ranks);
    const std::string whose = std::string(ranks.dp > 1 ? "a pipeline's batch" : "the batch") +
                              (rounds > 1 ? " of a --grad-accum round, " : " of ");
    const PipelineShape shape = shape_for(spec, options);
    if (shape.microbatches == 0) {
      return "no micro-batch count up to " + std::to_string(2 * shape.stages()) + (o.schedule == ScheduleKind::Interleaved1F1B ? " (a multiple of the ranks)" : "") +
             " divides " + whose + std::to_string(batch) + ": give --microbatches or --batch";
    }
    if (auto why = pipeline::invalid_shape(o.schedule, shape)) return *why;
    if (batch % shape.microbatches != 0) {
      return "--microbatches " + std::to_string(shape.microbatches) + " does not divide " + whose + std::to_string(batch) +
             " (every micro-batch the same size)";
    }
    if (static_cast<std::size_t>(shape.stages()) > facts.chain_length) {
      return std::to_string(shape.stages()) + " stages (" + std::to_string(shape.ranks) + " ranks x " +
             std::to_string(shape.chunks_per_rank) + " a rank) need a unit each, and " + spec.workload + " has " +
             std::to_string(facts.chain_length) + ": fewer ranks (--world-size) or --stages-per-rank";
    }
    if (!o.split.empty()) {
      const auto cut = pipeline::split_at(o.split, facts.chain_length, shape.stages());
      if (!cut.why.empty()) return cut.why + " (" + spec.workload + ")";
    }
    return std::nullopt;
  }

  // Every rank of a pipeline reads its dp group's share of the batch (all of it without a mesh):
  // the first stage its inputs, the last its targets.
  DataShard do_data_shard() const override {
    return data_group_ ? DataShard{data_group_->rank(), data_group_->size()} : DataShard{0, 1};
  }
  std::optional<c10::Device> do_batch_device() const override { return device_; }

  void do_setup(const StrategySetup& setup) override {
    auto placed = place_model_on_rank(setup, "pp");
    ProcessGroupContext& world = *placed.group;
    world_ = placed.group;
    group_ = placed.group;
    if (!setup.options.mesh.empty()) join_mesh(Mesh::parse(setup.options.mesh, mesh_dimension_names(), world.size()));
    device_ = placed.device;
    model_ = placed.model;
    workload_ = &setup.workload;
    global_batch_ = setup.spec.global_batch;
    schedule_ = setup.options.pipeline.schedule;
    shape_ = shape_for(setup.spec, setup.options);
    rounds_ = std::max(1, setup.options.levers.grad_accum);
    if (auto why = pipeline::invalid_shape(schedule_, shape_)) throw CaseFailure("pp: " + *why);
    actions_ = pipeline::rank_actions(schedule_, shape_, group_->rank());
    precision_ = setup.precision;
    scaler_ = LossScaler(precision_);
    // Cut while every rank still holds the whole model: profiling runs every unit. Agreed over the
    // world, so that every pipeline of a mesh is cut alike.
    plan_ = plan_stages(*model_, *workload_, setup.options.pipeline, shape_.stages(),
                        global_batch_ / pipelines() / rounds_ / shape_.microbatches, device_, precision_, world);
    spans_ = plan_.spans;
    assign_parameters();
    if (fsdp_group_) shard_stage(setup);
    optimizer_ = setup.make_optimizer(sharded_ ? sharded_->optimizer_parameters() : trained_here_);
    if (dp_group_) allocate_data_parallel_gradients();
  }

  torch::Tensor do_step(const Batch& batch, PhaseRecorder& phases) override {
    {  // the last step's gradients, kept until now: zero_grad, optimizer work (strategy.h)
      auto scope = phases.scope(Phase::Optimizer);
      if (dp_group_) {
        zero_data_parallel_gradients();
      } else if (sharded_) {
        sharded_->free_gradients();
      } else {
        for (auto& p : trained_here_) p.mutable_grad() = torch::Tensor();
      }
    }
    // Micro-batch losses enter already weighted by their share of the global batch: the chunks'
    // gradients are the sums over the fsdp group as they are.
    if (sharded_) sharded_->begin_step(1.0, &phases);
    const int m = shape_.microbatches, p = shape_.ranks, rank = group_->rank(), last = shape_.stages() - 1;
    // --grad-accum K: K rounds of the schedule, each on 1/K of the batch, their gradients summed in
    // place before the one optimizer step (the dp sum and fsdp's reduce-scatter after the last:
    // DDP's no_sync). Micro-batch n of round r is micro-batch r m + n of the step: its rows, its
    // tags and its NVTX name.
    const std::int64_t rows = batch.inputs.size(0) / (m * rounds_);
    const double share = static_cast<double>(rows) / static_cast<double>(global_batch_);
    torch::Tensor inputs, targets;
    {
      auto scope = phases.scope(Phase::Data);
      if (holds_stage(0)) inputs = batch.inputs.to(device_, /*non_blocking=*/true);
      if (holds_stage(last)) targets = batch.targets.to(device_, /*non_blocking=*/true);
    }
    // What a micro-batch leaves on a chunk between its forward and backward.
    struct InFlight {
      torch::Tensor input, output, loss;
    };
    std::map<std::pair<int, int>, InFlight> in_flight;  // (micro-batch, chunk)
    auto loss_sum = torch::zeros({1}, torch::TensorOptions().device(device_).dtype(torch::kDouble));
    for (int round = 0; round < rounds_; ++round) {
      for (Action a : actions_) {
        a.microbatch += round * m;
        release_finished_sends();
        const int stage = a.stage(rank, p);
        const auto [begin, end] = spans_[static_cast<std::size_t>(stage)];
        if (a.kind == Action::Kind::Forward) {
          InFlight f;
          f.input = stage == 0 ? inputs.narrow(0, a.microbatch * rows, rows)
                               : receive_activation(a.microbatch, stage - 1, phases);
          if (stage > 0 && f.input.is_floating_point()) f.input.requires_grad_(true);
          {
            auto scope = phases.scope(Phase::Forward, microbatch_label(a.microbatch, stage));
            AutocastScope autocast(precision_, device_);
            f.output = model_->forward_range(f.input, begin, end);
            if (stage == last) {
              f.loss = workload_->loss(f.output, targets.narrow(0, a.microbatch * rows, rows)) * share;
              loss_sum += f.loss.detach().to(torch::kDouble);
            }
          }
          if (stage != last) send(f.output.detach(), (stage + 1) % p, tag_of(a.microbatch, stage, Carries::Activation), stage, phases);
          in_flight[{a.microbatch, a.chunk}] = std::move(f);
        } else {
          auto node = in_flight.extract({a.microbatch, a.chunk});
          if (node.empty()) throw std::logic_error("pp: a backward before its forward in the schedule");
          InFlight& f = node.mapped();
          if (stage == last) {
            auto scope = phases.scope(Phase::Backward, microbatch_label(a.microbatch, stage));
            scaler_.scale(f.loss).backward();
          } else {
            auto gradient = torch::empty(f.output.sizes(), f.output.options());
            receive(gradient, (stage + 1) % p, tag_of(a.microbatch, stage, Carries::Gradient), phases);
            // Its gradient came back, so the next stage has the activation: the send is over, and
            // the activation goes with its graph after this backward, not at the step's end.
            finish_send(tag_of(a.microbatch, stage, Carries::Activation), phases);
            auto scope = phases.scope(Phase::Backward, microbatch_label(a.microbatch, stage));
            f.output.backward(gradient);
          }
          if (stage > 0 && f.input.requires_grad()) {
            send(f.input.grad(), (stage - 1 + p) % p, tag_of(a.microbatch, stage - 1, Carries::Gradient), stage, phases);
          }
        }
      }
    }
    {
      auto scope = phases.scope(Phase::PipelineWait);
      for (auto& send : pending_sends_) group_->wait(send.work, "pp: a send to the next or previous stage");
      pending_sends_.clear();
    }
    {
      // The step's loss from the last stage to every rank, in float64. Each rank arrives when its
      // own schedule is over and leaves when the last one's is: the wait is the pipeline's drain
      // (the bubble at the step's end), so it is pipeline_wait and not communication.
      auto scope = phases.scope(Phase::PipelineWait);
      group_->allreduce(loss_sum, "pp: the step's loss from the last stage");
      traffic_.allreduce_bytes += loss_sum.numel() * static_cast<std::int64_t>(loss_sum.element_size());
      ++traffic_.pipeline_collectives;
    }
    // Over the dp group, then the tied weights over pp (both are sums, so the order does not matter).
    if (dp_group_) reduce_over_pipelines(loss_sum, phases);
    if (!tied_.empty()) {
      // The tied weights' gradients summed between the stages that use them (the others add zeros),
      // in one all-reduce in their own type.
      auto scope = phases.scope(Phase::Reduce);
      std::vector<torch::Tensor> parts;
      for (const auto& tie : tied_) {
        const auto& t = all_parameters_[tie.index];
        parts.push_back(tie.here && t.grad().defined() ? t.grad().reshape({-1})
                                                        : torch::zeros({numels_[tie.index]}, tie_options_));
      }
      auto flat = torch::cat(parts);
      group_->allreduce(flat, "pp: the tied weights' gradients");
      traffic_.allreduce_bytes += flat.numel() * static_cast<std::int64_t>(flat.element_size());
      ++traffic_.pipeline_collectives;
      std::int64_t offset = 0;
      for (const auto& tie : tied_) {
        auto& t = all_parameters_[tie.index];
        const auto numel = numels_[tie.index];
        // In place where it has one: it may be a view of a buffer that a collective reads next (the
        // dp sum's or the fsdp unit's).
        if (tie.here) {
          auto summed = flat.narrow(0, offset, numel).view(t.sizes());
          if (t.grad().defined()) {
            t.mutable_grad().copy_(summed);
          } else {
            t.mutable_grad() = summed;
          }
        }
        offset += numel;
      }
    }
    if (sharded_) {
      // The stage's gradients reduce-scattered over the fsdp group, and the loss summed over it.
      sharded_->set_loss(loss_sum);
      loss_sum = sharded_->finish_backward().to(torch::kDouble);
    } else if (fsdp_group_) {
      fsdp_group_->allreduce(loss_sum, "pp: the step's loss over the fsdp group");  // a stage that trains nothing
    }
    {
      auto scope = phases.scope(Phase::Optimizer);
      // Sharded, each rank's chunks are its own: every rank of the world must agree.
      if (scaler_.enabled()) {
        agree_on_overflow(sharded_ ? sharded_->optimizer_parameters() : trained_here_, device_, sharded_ ? *world_ : *group_);
      }
      scaler_.step(*optimizer_);
    }
    ++traffic_.steps;
    return loss_sum.reshape({});
  }

  // Every parameter as one model holds it: each rank gives the ones it trains (a tied one from its
  // first stage's rank only) and zeros for the rest, summed over the ranks.
  std::vector<torch::Tensor> do_trained_parameters() override {
    torch::NoGradGuard no_grad;
    // Sharded, what this rank trains is gathered over its fsdp group first (between steps its
    // parameters' full buffer is freed).
    std::unordered_map<const void*, torch::Tensor> gathered;
    if (sharded_) {
      const auto full = sharded_->gather_full_parameters();
      for (std::size_t k = 0; k < trained_here_.size(); ++k) gathered[trained_here_[k].unsafeGetTensorImpl()] = full[k];
    }
    std::vector<torch::Tensor> out;
    for (std::size_t i = 0; i < all_parameters_.size(); ++i) {
      const auto found = gathered.find(all_parameters_[i].unsafeGetTensorImpl());
      const torch::Tensor& mine = found != gathered.end() ? found->second : all_parameters_[i];
      auto whole = owner_[i] == group_->rank() ? mine.detach().clone()
                                               : torch::zeros(shapes_[i], all_parameters_[i].options());
      group_->allreduce(whole, "pp: gathering the trained parameters");
      out.push_back(whole);
    }
    return out;
  }
  std::vector<torch::Tensor> do_held_parameters() override { return held_here_; }

  std::optional<CommSummary> do_comm_summary() const override {
    if (traffic_.steps == 0) return std::nullopt;
    CommSummary c;
    c.backend = group_->backend_name();
    c.world_size = group_->size();
    c.bytes_per_step = traffic_.allreduce_bytes / traffic_.steps;
    c.point_to_point_bytes_per_step = traffic_.sent_bytes / traffic_.steps;
    CommSummary::Pipeline line;
    line.schedule = pipeline::to_string(schedule_);
    line.stages = shape_.stages();
    line.microbatches = shape_.microbatches;
    line.chunks_per_rank = shape_.chunks_per_rank;
    for (const auto& [begin, end] : spans_) line.stage_units.emplace_back(begin, end);
    line.expected_bubble = pipeline::expected_bubble(schedule_, shape_);
    line.balance = plan_.balance;
    line.stage_parameters = plan_.stage_parameters;
    line.stage_profile_seconds = plan_.stage_profile_seconds;
    line.unit_parameters = plan_.unit_parameters;
    line.unit_profile_seconds = plan_.unit_profile_seconds;
    c.pipeline = line;
    if (mesh_) {
      // Each dimension's traffic apart: pp's sends and its loss and tied-weight sums, dp's gradients.
      for (const auto& dim : mesh_->dimensions()) {
        CommSummary::MeshTraffic d{dim.name, dim.size};
        if (dim.name == "pp") {
          d.bytes_per_step = c.bytes_per_step + c.point_to_point_bytes_per_step;
          d.collectives_per_step = static_cast<int>(traffic_.pipeline_collectives / traffic_.steps);
        } else if (dim.name == "dp") {
          d.bytes_per_step = traffic_.data_parallel_bytes / traffic_.steps;
          d.collectives_per_step = static_cast<int>(traffic_.data_parallel_collectives / traffic_.steps);
        } else if (dim.name == "fsdp" && sharded_ && sharded_->traffic().steps > 0) {
          const auto& u = sharded_->traffic();
          d.bytes_per_step = (u.all_gather_bytes + u.reduce_scatter_bytes + u.allreduce_bytes) / u.steps;
          d.collectives_per_step = static_cast<int>(u.collectives / u.steps);
        }
        c.mesh.push_back(d);
      }
    }
    return c;
  }
  void do_reset_measured_stats() override {
    traffic_ = {};
    if (sharded_) sharded_->reset_traffic();
  }

 private:
  bool holds_stage(int stage) const { return stage % shape_.ranks == group_->rank(); }
  int pipelines() const { return data_group_ ? data_group_->size() : 1; }

  // This rank's groups on the mesh: its pp group becomes the pipeline's (sends, receives, the loss
  // and the tied weights), its dp group the one its gradients are summed over, or its fsdp group
  // the one what its stage holds is sharded over.
  void join_mesh(const Mesh& mesh) {
    mesh_groups_ = mesh_groups(*group_, mesh);
    group_ = mesh_groups_[*mesh.find("pp")].get();
    if (const auto dp = mesh.find("dp")) data_group_ = dp_group_ = mesh_groups_[*dp].get();
    if (const auto fsdp = mesh.find("fsdp")) data_group_ = fsdp_group_ = mesh_groups_[*fsdp].get();
    mesh_ = mesh;
  }

  // Both meshes keep what a stage trains in one flat buffer: of one dtype, or refused saying why.
  void require_one_dtype(const std::string& because) const {
    for (const auto& p : trained_here_) {
      if (p.scalar_type() != trained_here_.front().scalar_type()) {
        throw CaseFailure("pp: the parameters a stage trains are of different types, and " + because);
      }
    }
  }

  // What this rank's stage trains, sharded over its fsdp group as one unit (the root of
  // ShardedUnits: gathered for the whole step), its gradients taken after the last micro-batch.
  void shard_stage(const StrategySetup& setup) {
    if (trained_here_.empty()) return;
    require_one_dtype("fsdp shards them as one unit");
    ShardedUnitOptions options;
    options.overlap = setup.options.ddp.overlap;
    options.gradients_at_finish = true;
    sharded_ = std::make_unique<ShardedUnits>(trained_here_, std::vector<std::vector<std::size_t>>{}, *fsdp_group_, options);
  }

  // On a mesh the gradients of what this rank trains live in one flat buffer (every trained
  // parameter's .grad a view of it, as ddp's --grad-as-bucket-view), so that the sum over the dp
  // group is one all-reduce in place: no copy in and out, and no second copy of them at the peak.
  void allocate_data_parallel_gradients() {
    require_one_dtype("their gradients are summed over dp in one buffer");
    std::int64_t numel = 0;
    for (const auto& p : trained_here_) numel += p.numel();
    if (numel > 0) dp_gradients_ = torch::zeros({numel}, trained_here_.front().options());
  }
  // The buffer zeroed and every trained parameter's .grad a view of it again (the optimizer step or a
  // checkpoint load may have dropped one): backward accumulates into it in place, micro-batch by
  // micro-batch.
  void zero_data_parallel_gradients() {
    if (!dp_gradients_.defined()) return;
    dp_gradients_.zero_();
    std::int64_t offset = 0;
    for (auto& p : trained_here_) {
      p.mutable_grad() = dp_gradients_.narrow(0, offset, p.numel()).view(p.sizes());
      offset += p.numel();
    }
  }

  // The gradients of what this rank trains, and the step's loss, summed over its dp group: each
  // pipeline's micro-batch losses were weighted by their share of the global batch, so the sums are
  // the global batch's. The gradients in their buffer, in place; the loss (float64) on its own.
  void reduce_over_pipelines(torch::Tensor& loss_sum, PhaseRecorder& phases) {
    auto scope = phases.scope(Phase::CommExposed);
    if (dp_gradients_.defined()) {
      dp_group_->allreduce(dp_gradients_, "pp: the gradients over the dp group");
      traffic_.data_parallel_bytes += dp_gradients_.numel() * static_cast<std::int64_t>(dp_gradients_.element_size());
      ++traffic_.data_parallel_collectives;
    }
    dp_group_->allreduce(loss_sum, "pp: the step's loss over the dp group");
    traffic_.data_parallel_bytes += loss_sum.numel() * static_cast<std::int64_t>(loss_sum.element_size());
    ++traffic_.data_parallel_collectives;
  }

  // Which ranks' stages use each parameter: those hold it (and train it), the others free it. One
  // that several ranks use (a tied weight) has its gradient summed between them each step. A
  // parameter no stage uses would silently stay untrained: refused.
  void assign_parameters() {
    all_parameters_ = model_->distinct_parameters();
    const int p = shape_.ranks, stages = shape_.stages();
    std::unordered_map<const void*, std::set<int>> stages_of;
    const auto note = [&](const torch::Tensor& t, int stage) { stages_of[t.unsafeGetTensorImpl()].insert(stage); };
    const auto units = model_->wrap_units();
    for (int stage = 0; stage < stages; ++stage) {
      const auto [begin, end] = spans_[static_cast<std::size_t>(stage)];
      for (std::size_t u = begin; u < end; ++u) {
        for (const auto& t : units.at(u).parameters) note(t, stage);
      }
    }
    for (const auto& t : model_->chain_head_parameters()) note(t, 0);
    for (const auto& t : model_->chain_tail_parameters()) note(t, stages - 1);
    torch::NoGradGuard no_grad;
    const auto names = model_->distinct_parameter_names();
    for (std::size_t i = 0; i < all_parameters_.size(); ++i) {
      auto& t = all_parameters_[i];
      const auto found = stages_of.find(t.unsafeGetTensorImpl());
      if (found == stages_of.end()) {
        throw CaseFailure("pp: parameter '" + names.at(i) + "' is in no chain unit and neither the chain's head nor its "
                          "tail, so no stage would train it");
      }
      std::set<int> ranks;
      for (int stage : found->second) ranks.insert(stage % p);
      owner_.push_back(*ranks.begin());
      shapes_.push_back(t.sizes().vec());
      numels_.push_back(t.numel());
      const bool here = ranks.count(group_->rank()) > 0;
      // Every rank lists the tied ones in the same order, for the one all-reduce of the step.
      if (ranks.size() > 1 && t.requires_grad()) {
        if (!tied_.empty() && t.scalar_type() != tie_options_.dtype().toScalarType()) {
          throw CaseFailure("pp: weights that several stages share are of different types, and their gradients go in one all-reduce");
        }
        tie_options_ = t.options();
        tied_.push_back({i, here});
      }
      if (here) {
        held_here_.push_back(t);
        if (t.requires_grad()) trained_here_.push_back(t);
      } else {
        t.set_data(torch::empty({0}, torch::TensorOptions().dtype(t.dtype()).device(t.device())));  // another rank's
      }
    }
  }

  torch::Tensor receive_activation(int microbatch, int stage_before, PhaseRecorder& phases) {
    const int from = stage_before % shape_.ranks;
    auto known = boundary_.find(stage_before);
    if (known == boundary_.end()) {
      auto header = torch::zeros({kMaxDims + 2}, torch::TensorOptions().dtype(torch::kLong).device(device_));
      receive(header, from, tag_of(microbatch, stage_before, Carries::Shape), phases);
      const auto h = header.cpu();
      const auto dims = h[0].item<std::int64_t>();
      std::vector<std::int64_t> sizes;
      for (std::int64_t d = 0; d < dims; ++d) sizes.push_back(h[2 + d].item<std::int64_t>());
      known = boundary_.emplace(stage_before, std::make_pair(sizes, static_cast<c10::ScalarType>(h[1].item<std::int64_t>()))).first;
    }
    auto x = torch::empty(known->second.first, torch::TensorOptions().dtype(known->second.second).device(device_));
    receive(x, from, tag_of(microbatch, stage_before, Carries::Activation), phases);
    return x;
  }

  void receive(torch::Tensor& into, int from, int tag, PhaseRecorder& phases) {
    auto scope = phases.scope(Phase::PipelineWait);
    group_->wait(group_->recv_async(into, from, tag), "pp: a receive from stage rank " + std::to_string(from));
  }

  // Posts a send; the tensor is kept until the step's end waits for it.
  void send(const torch::Tensor& t, int to, int tag, int stage, PhaseRecorder& phases) {
    auto scope = phases.scope(Phase::PipelineWait);
    auto flat = t.contiguous();
    if (!sent_shape_.count(stage) && tag % 3 == static_cast<int>(Carries::Activation)) {
      sent_shape_.insert(stage);
      auto header = torch::zeros({kMaxDims + 2}, torch::TensorOptions().dtype(torch::kLong));
      if (flat.dim() > kMaxDims) throw CaseFailure("pp: an activation of more than 8 dimensions between stages");
      header[0] = flat.dim();
      header[1] = static_cast<std::int64_t>(flat.scalar_type());
      for (std::int64_t d = 0; d < flat.dim(); ++d) header[2 + d] = flat.size(d);
      header = header.to(device_);
      const int header_tag = tag - static_cast<int>(Carries::Activation);
      pending_sends_.push_back({header_tag, group_->send_async(header, to, header_tag), header});
    }
    traffic_.sent_bytes += flat.numel() * static_cast<std::int64_t>(flat.element_size());
    pending_sends_.push_back({tag, group_->send_async(flat, to, tag), flat});
  }

  // Sends are kept (with their tensors) until known complete: an activation held to the step's end
  // would hold every micro-batch's, and 1F1B would keep what GPipe keeps. A completed one is still
  // waited on, which returns at once, so that a send that failed says so here.
  void release_finished_sends() {
    pending_sends_.erase(std::remove_if(pending_sends_.begin(), pending_sends_.end(),
                                        [this](const PendingSend& s) {
                                          if (!s.work->isCompleted()) return false;
                                          group_->wait(s.work, "pp: a send to the next or previous stage");
                                          return true;
                                        }),
                         pending_sends_.end());
  }
  void finish_send(int tag, PhaseRecorder& phases) {
    const auto found = std::find_if(pending_sends_.begin(), pending_sends_.end(), [&](const PendingSend& s) { return s.tag == tag; });
    if (found == pending_sends_.end()) return;
    {
      auto scope = phases.scope(Phase::PipelineWait);
      group_->wait(found->work, "pp: a send to the next stage");
    }
    pending_sends_.erase(found);
  }

  struct Traffic {
    std::int64_t steps = 0, allreduce_bytes = 0, sent_bytes = 0, pipeline_collectives = 0;
    std::int64_t data_parallel_bytes = 0, data_parallel_collectives = 0;  // over the mesh's dp group
  };

  ProcessGroupContext* group_ = nullptr;  // the pipeline's: the world's, or the mesh's pp dimension's
  std::optional<Mesh> mesh_;
  std::vector<std::unique_ptr<ProcessGroupContext>> mesh_groups_;  // this rank's, one per dimension
  ProcessGroupContext* world_ = nullptr;                            // every rank's
  ProcessGroupContext* dp_group_ = nullptr;                         // the mesh's dp dimension's, if any
  ProcessGroupContext* fsdp_group_ = nullptr;                       // the mesh's fsdp dimension's, if any
  ProcessGroupContext* data_group_ = nullptr;                       // whichever of the two the mesh has
  std::unique_ptr<ShardedUnits> sharded_;                           // fsdp: this stage's parameters, sharded
  const Workload* workload_ = nullptr;
  std::int64_t global_batch_ = 1;
  c10::Device device_{c10::kCPU};
  ModelPtr model_;
  ScheduleKind schedule_ = ScheduleKind::OneFOneB;
  PipelineShape shape_;
  int rounds_ = 1;  // --grad-accum: rounds of the schedule a step
  std::vector<Action> actions_;
  StagePlan plan_;
  pipeline::StageSpans spans_;  // chain units of each stage (plan_'s)
  std::vector<torch::Tensor> all_parameters_;               // distinct, model order
  std::vector<int> owner_;                                  // the rank that gives each to trained_parameters
  std::vector<std::vector<std::int64_t>> shapes_;
  std::vector<std::int64_t> numels_;
  std::vector<torch::Tensor> held_here_, trained_here_;
  torch::Tensor dp_gradients_;  // on a mesh: every trained parameter's gradient, flat (their .grad views of it)
  struct Tie {
    std::size_t index;  // into all_parameters_
    bool here;          // held on this rank
  };
  std::vector<Tie> tied_;  // parameters several ranks use, the same list on every rank
  torch::TensorOptions tie_options_;  // their type and device
  std::map<int, std::pair<std::vector<std::int64_t>, c10::ScalarType>> boundary_;  // received shapes
  std::unordered_set<int> sent_shape_;
  struct PendingSend {
    int tag;
    c10::intrusive_ptr<c10d::Work> work;
    torch::Tensor tensor;  // kept alive until the send is over
  };
  std::vector<PendingSend> pending_sends_;
  Traffic traffic_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  Precision precision_ = Precision::Fp32;
  LossScaler scaler_{Precision::Fp32};
};

}  // namespace

DDPBENCH_REGISTER_STRATEGY({"pp", "pipeline parallelism: the model's units cut into stages, one a rank (or V, interleaved); "
                            "micro-batches through naive, GPipe, 1F1B or interleaved 1F1B schedules",
                            8, /*uses_all_devices=*/true, [] { return std::make_unique<PipelineStrategy>(); },
                            /*multi_process=*/true, /*asynchronous=*/false, /*one_cuda_device=*/false,
                            /*needs_chain=*/true});

}  // namespace ddpbench
