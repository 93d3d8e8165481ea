#include "views/comm_json.h"

#include "pipeline/balance.h"

namespace ddpbench {

using nlohmann::json;

json async_json(const AsyncSummary& a) {
  json rss = json::array();
  for (auto b : a.worker_peak_rss_bytes) rss.push_back(b);
  return {{"mode", a.mode},
          {"workers", a.workers},
          {"sync_every", a.sync_every},
          {"updates", a.updates},
          {"staleness", {{"median", a.staleness_median}, {"max", a.staleness_max}, {"mean", a.staleness_mean}}},
          {"worker_peak_rss_bytes", a.worker_peak_rss_bytes.empty() ? json(nullptr) : rss}};
}

json comm_json(const std::optional<CommSummary>& comm) {
  if (!comm) return nullptr;
  const auto busbw = bus_bandwidth(*comm);
  json timeline = json::array();
  // A strategy that reduce-scatters its buckets (zero1, zero2) names its collective so.
  const char* collective_ms = comm->reduce_scatter_bytes_per_step > 0 ? "reduce_scatter_ms" : "allreduce_ms";
  // Where the host did not wait for the collectives (NCCL), their host-clock seconds would be
  // launches: the JSON says null, and a bucket has no collective time, rather than show those.
  const bool timed = comm->collective_seconds_measured;
  const auto ms = [timed](double seconds) { return timed ? json(seconds * 1e3) : json(nullptr); };
  for (const auto& b : comm->bucket_timeline) {
    json bucket = {{"bytes", b.bytes}, {"ready_ms", b.ready_seconds * 1e3}};
    if (timed) bucket[collective_ms] = b.allreduce_seconds * 1e3;
    timeline.push_back(bucket);
  }
  json units = json::array();
  for (const auto& u : comm->units) units.push_back({{"bytes", u.bytes}, {"root", u.root}});
  json mesh = json::array();
  for (const auto& d : comm->mesh) {
    mesh.push_back({{"name", d.name}, {"size", d.size}, {"bytes_per_step", d.bytes_per_step},
                    {"collectives_per_step", d.collectives_per_step}});
  }
  return {{"backend", comm->backend},
          {"bytes_per_step", comm->bytes_per_step},
          {"buckets", comm->buckets},
          {"allreduce_ms", ms(comm->allreduce_seconds_per_step)},
          {"busbw_gbps", busbw ? json(*busbw / 1e9) : json(nullptr)},
          {"bucket_timeline", timeline},
          {"units", units},
          {"reduce_scatter_bytes_per_step", comm->reduce_scatter_bytes_per_step},
          {"all_gather_bytes_per_step", comm->all_gather_bytes_per_step},
          {"reduce_scatter_ms", ms(comm->reduce_scatter_seconds_per_step)},
          {"all_gather_ms", ms(comm->all_gather_seconds_per_step)},
          {"reduce_scatters_per_step", comm->reduce_scatters_per_step ? json(*comm->reduce_scatters_per_step) : json(nullptr)},
          {"all_gathers_per_step", comm->all_gathers_per_step ? json(*comm->all_gathers_per_step) : json(nullptr)},
          {"bytes_sent_per_step", ring_bytes_sent(*comm)},
          {"point_to_point_bytes_per_step", comm->point_to_point_bytes_per_step},
          {"mesh", mesh}};
}

// The pipeline that ran and its bubble measured on each rank (the share of its step it waited on
// its neighbours: pipeline_wait) beside the formula's for equal stages.
json pipeline_json(const CommSummary::Pipeline& p, const RepetitionRecord& r) {
  json by_rank = json::array();
  double sum = 0;
  for (const auto& rank : r.ranks) {
    const double share = rank.mean_step_seconds > 0
                             ? rank.phase_seconds[static_cast<int>(Phase::PipelineWait)] / rank.mean_step_seconds
                             : 0.0;
    by_rank.push_back(share);
    sum += share;
  }
  json units = json::array();
  for (const auto& [begin, end] : p.stage_units) units.push_back({begin, end});
  // What each rank computed in the step (the rest it waited), and the most over the mean: the
  // stages' balance as the run measured it, beside the profile the cut was made from.
  json compute = json::array();
  std::vector<double> busy;
  for (const auto& rank : r.ranks) {
    busy.push_back(rank.mean_step_seconds - rank.phase_seconds[static_cast<int>(Phase::PipelineWait)]);
    compute.push_back(busy.back() * 1e3);
  }
  const auto milliseconds_or_null = [](const std::vector<double>& seconds) {
    if (seconds.empty()) return json(nullptr);
    json ms = json::array();
    for (double s : seconds) ms.push_back(s * 1e3);
    return ms;
  };
  const auto& balance_by = p.stage_profile_seconds.empty() ? std::vector<double>(p.stage_parameters.begin(), p.stage_parameters.end())
                                                           : p.stage_profile_seconds;
  return {{"schedule", p.schedule},
          {"balance", p.balance},
          {"stage_parameters", p.stage_parameters},
          {"stage_profile_ms", milliseconds_or_null(p.stage_profile_seconds)},
          {"unit_parameters", p.unit_parameters},
          {"unit_profile_ms", milliseconds_or_null(p.unit_profile_seconds)},
          {"stage_imbalance", balance_by.empty() ? json(nullptr) : json(pipeline::imbalance(balance_by))},
          {"compute_ms_by_rank", compute},
          {"compute_imbalance", busy.empty() ? json(nullptr) : json(pipeline::imbalance(busy))},
          {"stages", p.stages},
          {"microbatches", p.microbatches},
          {"chunks_per_rank", p.chunks_per_rank},
          {"stage_units", units},
          {"expected_bubble", p.expected_bubble},
          {"bubble", r.ranks.empty() ? json(nullptr) : json(sum / static_cast<double>(r.ranks.size()))},
          {"bubble_by_rank", by_rank}};
}

}  // namespace ddpbench
