#include "views/json_report.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "base/atomic_file.h"
#include "views/explain.h"
#include "base/json_optional.h"
#include "base/stats.h"
#include "pipeline/schedule.h"
#include "views/comm_json.h"

namespace ddpbench {
namespace {

using nlohmann::json;

// The strategies' own flags, each under the strategies it applies to, so that a reader (the
// projection) knows what ran instead of assuming the defaults.
json strategy_settings_json(const StrategyOptions& o) {
  const json buckets = {{"bucket_mb", o.ddp.bucket_mb}, {"overlap", o.ddp.overlap}};
  json ddp = buckets;
  ddp["grad_as_bucket_view"] = o.ddp.grad_as_bucket_view;
  ddp["sync_bn"] = o.ddp.sync_bn;
  return {{"ddp", ddp},
          {"zero1", buckets},
          {"zero2", buckets},
          {"fsdp", {{"reshard_after_forward", o.fsdp.reshard_after_forward}, {"prefetch", o.fsdp.prefetch},
                    {"overlap", o.ddp.overlap}}},
          {"tp", {{"sequence_parallel", o.tp.sequence_parallel}}},
          {"mesh", o.mesh.empty() ? json(nullptr) : json(o.mesh)},
          // Every strategy's (docs/memory.md).
          {"levers", {{"activation_checkpointing", o.levers.activation_checkpointing.to_string()},
                      {"grad_accum", o.levers.grad_accum},
                      {"sync_every_microbatch", o.levers.sync_every_microbatch},
                      {"no_sync_accum", o.levers.no_sync_accum}}},
          {"hogwild", {{"mode", to_string(o.hogwild.mode)}, {"sync_every", o.hogwild.sync_every},
                       {"workers", o.hogwild.workers}}},
          {"pp", {{"schedule", pipeline::to_string(o.pipeline.schedule)},
                  {"microbatches", o.pipeline.microbatches == 0 ? json(nullptr) : json(o.pipeline.microbatches)},
                  {"stages_per_rank", o.pipeline.stages_per_rank == 0 ? json(nullptr) : json(o.pipeline.stages_per_rank)},
                  {"balance", o.pipeline.split.empty() ? pipeline::to_string(o.pipeline.balance) : "split"},
                  {"split", o.pipeline.split.empty() ? json(nullptr) : json(o.pipeline.split)}}}};
}

json context_json(const RunRecord& record) {
  const auto& c = record.context;
  const auto& s = record.settings;
  json devices = json::array();
  for (const auto& d : c.devices) {
    devices.push_back({{"index", d.index}, {"name", d.name}, {"kind", to_string(d.kind)},
                       {"total_memory_bytes", d.total_memory_bytes}});
  }
  json env = json::object();
  for (const auto& [k, v] : c.env) env[k] = v;
  double load[3] = {0, 0, 0};
  json load_avg = json::array();
  if (getloadavg(load, 3) == 3) load_avg = {load[0], load[1], load[2]};

  json ddp = {
      {"version", c.version},
      {"git_sha", c.git_sha},
      {"argv", c.argv},
      {"torch_version", c.torch_version},
      {"cuda_version", optional_to_json(c.cuda_version)},
      {"nccl_version", optional_to_json(c.nccl_version)},
      {"devices", devices},
      {"env", env},
      {"settings",
       {{"device_kind", to_string(s.device_kind)},
        {"world_size", s.world_size},
        {"threads_per_device", s.threads_per_device},
        {"steps", s.steps},
        {"warmup", s.warmup},
        {"repetitions", s.repetitions},
        {"seed", s.seed},
        {"parity_steps", s.parity_steps},
        {"parity_tolerance", s.parity_tolerance},
        {"dtype", to_string(s.precision)},
        {"max_cv", s.max_cv},
        {"slow_by", s.slow_by},
        {"target_precision", s.target_precision > 0 ? json(s.target_precision) : json(nullptr)},
        {"min_time_seconds", s.target_precision > 0 ? json(s.min_time_seconds) : json(nullptr)},
        {"max_time_seconds", s.target_precision > 0 ? json(s.max_time_seconds) : json(nullptr)},
        {"loader_workers", s.loader_workers},
        {"pin_memory", s.pin_memory},
        {"timeout_seconds", s.timeout_seconds},
        // How phase times were taken: CUDA events on the GPU's stream, or the host's steady clock.
        {"phase_timer", s.device_kind == DeviceKind::Cuda ? "cuda_events" : "steady_clock"},
        {"strategy_settings", strategy_settings_json(s.strategy_options)},
        {"workloads", s.workload_descriptions}}},
      {"complete", record.complete},
  };
  json floor = json::array();
  for (const auto& f : record.noise_floor) {
    floor.push_back({{"workload", f.workload}, {"cv", f.cv}, {"repetitions", f.repetitions}, {"from", "single"}});
  }
  ddp["noise_floor"] = floor;
  if (!record.interruption.empty()) ddp["interruption"] = record.interruption;
  return {
      {"date", c.date},
      {"host_name", c.host_name},
      {"executable", c.executable},
      {"num_cpus", c.num_cpus},
      {"load_avg", load_avg},
      {"library_build_type", c.build_type == "Debug" ? "debug" : "release"},
      {"library_version", c.version},
      {"json_schema_version", kJsonSchemaVersion},
      {"ddpbench", ddp},
  };
}

json memory_json(const std::vector<DeviceMemory>& memory) {
  json out = json::array();
  for (const auto& m : memory) {
    out.push_back({{"device", m.device},
                   {"kind", to_string(m.kind)},
                   {"peak_allocated_bytes", optional_to_json(m.peak_allocated_bytes)},
                   {"peak_reserved_bytes", optional_to_json(m.peak_reserved_bytes)},
                   {"held_before_bytes", optional_to_json(m.held_before_bytes)},
                   {"parameter_bytes", optional_to_json(m.parameter_bytes)},
                   {"gradient_bytes", optional_to_json(m.gradient_bytes)},
                   {"optimizer_state_bytes", optional_to_json(m.optimizer_state_bytes)},
                   {"activation_bytes", optional_to_json(m.activation_bytes)},
                   {"other_bytes", optional_to_json(other_peak_bytes(m))}});
  }
  return out;
}

json parity_json(const std::optional<ParityRecord>& parity) {
  if (!parity) return nullptr;
  json p = {{"steps", parity->steps},
            {"max_rel_param_diff", parity->max_rel_param_diff},
            {"final_loss", parity->final_loss},
            {"reference_final_loss", parity->reference_final_loss},
            {"tolerance", parity->tolerance},
            {"within_tolerance", parity->within_tolerance},
            {"reference", parity->reference},
            {"dtype", parity->dtype}};
  if (!parity->note.empty()) p["note"] = parity->note;
  if (!parity->worst_parameters.empty()) p["worst_parameters"] = parity->worst_parameters;
  p["checked"] = parity->checked;
  p["compared_by"] = parity->compared_by_loss ? "loss" : "parameters";
  return p;
}

// Phase means in ms, the phases the strategy marked plus the residual the harness saw around them.
json phases_json(const CaseRecord& c, const PhaseSeconds& phases, double step_seconds) {
  json out = json::object();
  double marked = 0;
  for (Phase p : c.phases_used) {
    out[phase_name(p)] = phases[static_cast<int>(p)] * 1e3;
    marked += phases[static_cast<int>(p)];
  }
  out["residual"] = (step_seconds - marked) * 1e3;
  return out;
}

// Percentiles and the median's 95% confidence interval over every measured step of every
// repetition. Steps of one repetition are not independent, so read the interval as a lower bound
// of the uncertainty; the CV (between repetitions) is the noise a comparison must beat.
json step_distribution_json(const CaseRecord& c) {
  std::vector<double> ms;
  for (const auto& r : c.repetitions) {
    for (double t : r.step_seconds) ms.push_back(t * 1e3);
  }
  const auto ci = stats::median_confidence_interval(ms, 0.95);
  return {{"p10", stats::percentile(ms, 0.1)},
          {"p50", stats::median(ms)},
          {"p90", stats::percentile(ms, 0.9)},
          {"median_ci95", ci ? json{{"low", ci->low}, {"high", ci->high}} : json(nullptr)},
          {"samples", ms.size()}};
}

json finite_or_null(double x) { return std::isfinite(x) ? json(x) : json(nullptr); }

// The arithmetic rate the case achieved at `items_per_second`, against its devices' peak. `spread`:
// the figures are a stddev or a CV, where a fraction of the peak means nothing.
json compute_json(const CaseRecord& c, double items_per_second, const char* aggregate = nullptr) {
  const bool cv = aggregate != nullptr && std::string(aggregate) == "cv";
  const bool spread = cv || (aggregate != nullptr && std::string(aggregate) == "stddev");
  // Unknown FLOPs (a model exported without a count) give no rate, not a rate of zero.
  const bool known = c.facts.flops_per_sample > 0;
  const double achieved = known ? c.flops_at(items_per_second) : std::nan("");
  json out = {{"flops_per_step", static_cast<double>(c.spec.global_batch) * c.facts.flops_per_sample},
              {"achieved_tflops", cv ? json(nullptr) : finite_or_null(achieved / 1e12)},
              {"peak_tflops", c.peak ? json(c.peak->flops_per_second / 1e12) : json(nullptr)},
              {"peak_source", c.peak ? json(c.peak->source) : json(nullptr)},
              {"fraction_of_peak", c.peak && !spread ? finite_or_null(achieved / c.peak->flops_per_second) : json(nullptr)}};
  return out;
}

json ranks_json(const CaseRecord& c, const RepetitionRecord& r) {
  json out = json::array();
  for (const auto& rank : r.ranks) {
    out.push_back({{"rank", rank.rank},
                   {"host", rank.host},
                   {"step_time_ms", rank.mean_step_seconds * 1e3},
                   {"cpu_time_ms", rank.cpu_seconds / static_cast<double>(std::max<size_t>(1, r.step_seconds.size())) * 1e3},
                   {"phases_ms", phases_json(c, rank.phase_seconds, rank.mean_step_seconds)},
                   {"peak_rss_bytes", optional_to_json(rank.peak_rss_bytes)}});
  }
  return out;
}

json case_fields(const CaseRecord& c, const RunSettings& s) {
  json f = {{"workload", c.spec.workload},
            {"strategy", c.spec.strategy},
            {"world_size", c.spec.world_size},
            {"device_kind", to_string(c.device_kind)},
            {"threads_per_device", c.threads_per_device},
            {"global_batch", c.spec.global_batch},
            // --grad-accum: the micro-batches of each optimizer step's global batch, and the samples
            // of one over every rank (docs/memory.md).
            {"micro_batches", s.strategy_options.levers.grad_accum},
            {"micro_batch_samples", c.spec.global_batch / std::max(1, s.strategy_options.levers.grad_accum)},
            {"status", to_string(c.status)},
            {"reason", c.reason.empty() ? json(nullptr) : json(c.reason)},
            {"note", c.note.empty() ? json(nullptr) : json(c.note)},
            {"workload_facts",
             {{"parameters", c.facts.parameters},
              {"gradient_bytes", c.facts.gradient_bytes},
              {"flops_per_sample", c.facts.flops_per_sample},
              // How the step grows with the tokens a sample (the projection's --seq-len): all 0
              // for a model without a sequence.
              {"tokens_per_sample", c.facts.sequence.tokens},
              {"max_tokens_per_sample", c.facts.sequence.max_tokens},
              {"attention_flops_per_sample", c.facts.sequence.attention_flops},
              {"attention_score_bytes_per_sample",
               c.facts.sequence.saved_score_elements * c.facts.sequence.saved_score_element_bytes},
              {"fixed_activation_bytes", c.facts.fixed_activation_bytes}}},
            {"parity", parity_json(c.parity)},
            {"noisy", c.noisy},
            // The 95% interval, over repetitions, of the statistic named, relative; unresolved:
            // adaptive sampling stopped at --max-time short of --target-precision.
            {"precision", {{"achieved_ci95", optional_to_json(c.achieved_precision)},
                           {"statistic", "lower_quartile_step"},
                           {"unresolved", c.unresolved},
                           {"seconds_spent", c.seconds_spent}}},
            {"cv_over_noise_floor", optional_to_json(c.cv_over_noise_floor)}};
  if (c.loss_vs_single) {
    f["loss_vs_single"] = {{"samples_seen", c.loss_vs_single->samples_seen},
                           {"loss", finite_or_null(c.loss_vs_single->loss)},
                           {"reference_loss", finite_or_null(c.loss_vs_single->reference_loss)},
                           {"ratio", finite_or_null(c.loss_vs_single->ratio())},
                           {"reference", "single"}};
  }
  return f;
}

json base_entry(const CaseRecord& c, int family_index, const std::string& name, const RunSettings& s) {
  return {{"name", name},
          {"family_index", family_index},
          {"per_family_instance_index", 0},
          {"run_name", c.spec.name()},
          // Adaptive sampling gives each case its own count; a case not measured says what was asked.
          {"repetitions", c.repetitions.empty() ? s.repetitions : static_cast<int>(c.repetitions.size())},
          {"threads", 1},
          {"time_unit", "ms"}};
}

// A case that did not end ok marks every entry it has as Google Benchmark marks an error, so that
// no reader (Google Benchmark's compare.py included) takes its kept repetitions for a result.
void mark_error(json& entry, const CaseRecord& c) {
  if (c.status == CaseStatus::Ok) return;
  entry["error_occurred"] = true;
  entry["error_message"] = c.reason;
}

void add_case(json& benchmarks, const CaseRecord& c, int family_index, const RunSettings& s) {
  const std::string name = c.spec.name();
  // Kept repetitions of a case that failed later, or of a run that ended before all were measured.
  const bool partial = c.status != CaseStatus::Ok || static_cast<int>(c.repetitions.size()) < s.repetitions;
  if (c.repetitions.empty()) {
    // Google Benchmark's shape for a run that did not happen: error_occurred with the message.
    json e = base_entry(c, family_index, name, s);
    e["run_type"] = "iteration";
    e["repetition_index"] = 0;
    e["iterations"] = 0;
    e["real_time"] = 0;
    e["cpu_time"] = 0;
    e["error_occurred"] = true;
    e["error_message"] = c.reason;
    e["ddpbench"] = case_fields(c, s);
    benchmarks.push_back(e);
    return;
  }

  std::vector<double> real_ms, cpu_ms, items;
  for (const auto& r : c.repetitions) {
    const double step = r.mean_step_seconds();
    real_ms.push_back(step * 1e3);
    cpu_ms.push_back(r.cpu_seconds / static_cast<double>(r.step_seconds.size()) * 1e3);
    items.push_back(static_cast<double>(c.spec.global_batch) / step);

    json e = base_entry(c, family_index, name, s);
    e["run_type"] = "iteration";
    e["repetition_index"] = r.index;
    e["iterations"] = r.step_seconds.size();
    e["real_time"] = real_ms.back();
    e["cpu_time"] = cpu_ms.back();
    e["items_per_second"] = items.back();
    mark_error(e, c);
    json f = case_fields(c, s);
    f["partial"] = partial;
    json steps = json::array();
    for (double t : r.step_seconds) steps.push_back(t * 1e3);
    f["step_times_ms"] = steps;
    f["compute"] = compute_json(c, items.back());
    f["phases_ms"] = phases_json(c, r.phase_seconds, step);
    f["memory"] = memory_json(r.memory);
    f["memory_imbalance"] = optional_to_json(memory_imbalance(r.memory));
    f["peak_rss_bytes"] = optional_to_json(r.peak_rss_bytes);
    f["data_path"] = r.data_path;
    f["first_loss"] = r.first_loss;
    f["final_loss"] = r.final_loss;
    json curve_samples = json::array(), curve_loss = json::array();
    for (size_t i = 0; i < r.step_losses.size(); ++i) {
      curve_samples.push_back((static_cast<std::int64_t>(s.warmup) + static_cast<std::int64_t>(i) + 1) * c.spec.global_batch);
      curve_loss.push_back(finite_or_null(r.step_losses[i]));
    }
    f["loss_curve"] = {{"samples_seen", curve_samples}, {"loss", curve_loss}};
    if (r.async) f["async"] = async_json(*r.async);
    if (r.comm) f["comm"] = comm_json(r.comm);
    if (r.comm && r.comm->pipeline) f["pipeline"] = pipeline_json(*r.comm->pipeline, r);
    if (!r.ranks.empty()) {
      f["ranks"] = ranks_json(c, r);
      f["straggler_spread"] = optional_to_json(r.straggler_spread());
    }
    e["ddpbench"] = f;
    benchmarks.push_back(e);
  }

  // Peaks over all repetitions, for the aggregates.
  std::vector<DeviceMemory> peak = c.repetitions.front().memory;
  for (const auto& r : c.repetitions) {
    for (size_t d = 0; d < r.memory.size() && d < peak.size(); ++d) {
      auto take_max = [](std::optional<std::int64_t>& a, const std::optional<std::int64_t>& b) {
        if (b && (!a || *b > *a)) a = b;
      };
      take_max(peak[d].peak_allocated_bytes, r.memory[d].peak_allocated_bytes);
      take_max(peak[d].peak_reserved_bytes, r.memory[d].peak_reserved_bytes);
      take_max(peak[d].held_before_bytes, r.memory[d].held_before_bytes);
      take_max(peak[d].parameter_bytes, r.memory[d].parameter_bytes);
      take_max(peak[d].gradient_bytes, r.memory[d].gradient_bytes);
      take_max(peak[d].optimizer_state_bytes, r.memory[d].optimizer_state_bytes);
      take_max(peak[d].activation_bytes, r.memory[d].activation_bytes);
    }
  }

  struct Aggregate {
    const char* name;
    double (*fn)(const std::vector<double>&);
    bool percentage;
  };
  const Aggregate aggregates[] = {{"median", stats::median, false},
                                  {"mean", stats::mean, false},
                                  {"stddev", stats::stddev, false},
                                  {"cv", stats::cv, true}};
  for (const auto& a : aggregates) {
    json e = base_entry(c, family_index, name + "_" + a.name, s);
    e["run_type"] = "aggregate";
    e["aggregate_name"] = a.name;
    e["aggregate_unit"] = a.percentage ? "percentage" : "time";
    e["repetitions"] = c.repetitions.size();
    e["iterations"] = c.repetitions.size();
    e["real_time"] = a.fn(real_ms);
    e["cpu_time"] = a.fn(cpu_ms);
    e["items_per_second"] = a.fn(items);
    mark_error(e, c);
    json f = case_fields(c, s);
    f["partial"] = partial;
    PhaseSeconds phases{};
    for (int p = 0; p < kPhaseCount; ++p) {
      std::vector<double> xs;
      for (const auto& r : c.repetitions) xs.push_back(r.phase_seconds[p]);
      phases[p] = a.fn(xs);
    }
    std::vector<double> step_s;
    for (double ms : real_ms) step_s.push_back(ms * 1e-3);
    f["phases_ms"] = phases_json(c, phases, a.fn(step_s));
    f["memory"] = memory_json(peak);
    f["memory_imbalance"] = optional_to_json(memory_imbalance(peak));
    f["scaling_efficiency"] = optional_to_json(c.scaling_efficiency);
    f["step_time_ms"] = step_distribution_json(c);
    f["compute"] = compute_json(c, a.fn(items), a.name);
    if (c.repetitions.front().async) {
      // Staleness aggregates over the repetitions' medians and maxima; mode and workers do not vary.
      AsyncSummary async = *c.repetitions.front().async;
      std::vector<double> medians, maxima, means;
      for (const auto& r : c.repetitions) {
        if (!r.async) continue;
        medians.push_back(r.async->staleness_median);
        maxima.push_back(static_cast<double>(r.async->staleness_max));
        means.push_back(r.async->staleness_mean);
      }
      async.staleness_median = a.fn(medians);
      async.staleness_mean = a.fn(means);
      json aj = async_json(async);
      aj["staleness"]["max"] = a.fn(maxima);
      aj.erase("updates");
      aj.erase("worker_peak_rss_bytes");
      f["async"] = aj;
    }
    if (c.repetitions.front().comm) {
      // The aggregate of the per-repetition collective times; bytes and buckets do not vary.
      CommSummary comm = *c.repetitions.front().comm;
      std::vector<double> seconds, reduce_scatter, all_gather, spreads;
      for (const auto& r : c.repetitions) {
        if (r.comm) {
          comm.collective_seconds_measured = comm.collective_seconds_measured && r.comm->collective_seconds_measured;
          seconds.push_back(r.comm->allreduce_seconds_per_step);
          reduce_scatter.push_back(r.comm->reduce_scatter_seconds_per_step);
          all_gather.push_back(r.comm->all_gather_seconds_per_step);
        }
        if (auto spread = r.straggler_spread()) spreads.push_back(*spread);
      }
      comm.allreduce_seconds_per_step = a.fn(seconds);
      comm.reduce_scatter_seconds_per_step = a.fn(reduce_scatter);
      comm.all_gather_seconds_per_step = a.fn(all_gather);
      for (std::size_t b = 0; b < comm.bucket_timeline.size(); ++b) {
        std::vector<double> ready, allreduce;
        for (const auto& r : c.repetitions) {
          if (!r.comm || r.comm->bucket_timeline.size() <= b) continue;
          ready.push_back(r.comm->bucket_timeline[b].ready_seconds);
          allreduce.push_back(r.comm->bucket_timeline[b].allreduce_seconds);
        }
        comm.bucket_timeline[b].ready_seconds = a.fn(ready);
        comm.bucket_timeline[b].allreduce_seconds = a.fn(allreduce);
      }
      f["comm"] = comm_json(comm);
      // Like real_time in the stddev and cv aggregates, allreduce_ms is then a spread, not a time.
      if (std::string(a.name) == "stddev" || a.percentage) f["comm"]["busbw_gbps"] = nullptr;
      if (!spreads.empty()) f["straggler_spread"] = a.fn(spreads);
    }
    e["ddpbench"] = f;
    benchmarks.push_back(e);
  }
}

}  // namespace

nlohmann::json to_json(const RunRecord& record) {
  json benchmarks = json::array();
  for (size_t i = 0; i < record.cases.size(); ++i) {
    add_case(benchmarks, record.cases[i], static_cast<int>(i), record.settings);
  }
  json why = json::array();
  for (const auto& e : explain(record)) {
    why.push_back({{"workload", e.workload}, {"fastest", e.fastest}, {"lines", e.lines}});
  }
  // ddpbench's own top-level object: readers of Google Benchmark's layout ignore it.
  return {{"context", context_json(record)}, {"benchmarks", benchmarks}, {"ddpbench", {{"why", why}}}};
}

void JsonFileSink::on_update(const RunRecord& record) {
  if (failure_) return;
  const std::string contents = to_json(record).dump(2) + "\n";
  try {
    write_file_atomically(path_, contents);
  } catch (const std::exception& e) {
    failure_ = e.what();
    if (on_failure_) on_failure_(*failure_);
  }
}

}  // namespace ddpbench
