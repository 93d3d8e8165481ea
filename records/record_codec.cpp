#include "records/record_codec.h"

#include <nlohmann/json.hpp>

#include <cmath>

#include "base/json_optional.h"

namespace ddpbench {

using nlohmann::json;

namespace {

// JSON has no NaN: a diverged run's numbers travel as null and come back as NaN.
json number(double x) { return std::isfinite(x) ? json(x) : json(nullptr); }
json numbers(const std::vector<double>& xs) {
  json out = json::array();
  for (double x : xs) out.push_back(number(x));
  return out;
}
double number_from(const json& j) { return j.is_null() ? std::nan("") : j.get<double>(); }

json phases_to_json(const PhaseSeconds& p) { return json(std::vector<double>(p.begin(), p.end())); }
PhaseSeconds phases_from_json(const json& j) {
  PhaseSeconds p{};
  const auto v = j.get<std::vector<double>>();
  for (size_t i = 0; i < p.size() && i < v.size(); ++i) p[i] = v[i];
  return p;
}

json memory_to_json(const std::vector<DeviceMemory>& memory) {
  json out = json::array();
  for (const auto& m : memory) {
    out.push_back({{"device", m.device},
                   {"cuda", m.kind == DeviceKind::Cuda},
                   {"allocated", optional_to_json(m.peak_allocated_bytes)},
                   {"reserved", optional_to_json(m.peak_reserved_bytes)},
                   {"held_before", optional_to_json(m.held_before_bytes)},
                   {"parameters", optional_to_json(m.parameter_bytes)},
                   {"gradients", optional_to_json(m.gradient_bytes)},
                   {"optimizer_state", optional_to_json(m.optimizer_state_bytes)},
                   {"activations", optional_to_json(m.activation_bytes)}});
  }
  return out;
}
std::vector<DeviceMemory> memory_from_json(const json& j) {
  std::vector<DeviceMemory> out;
  for (const auto& m : j) {
    DeviceMemory d;
    d.device = m.at("device").get<int>();
    d.kind = m.at("cuda").get<bool>() ? DeviceKind::Cuda : DeviceKind::Cpu;
    d.peak_allocated_bytes = optional_from_json<std::int64_t>(m.at("allocated"));
    d.peak_reserved_bytes = optional_from_json<std::int64_t>(m.at("reserved"));
    d.held_before_bytes = optional_from_json<std::int64_t>(m.at("held_before"));
    d.parameter_bytes = optional_from_json<std::int64_t>(m.at("parameters"));
    d.gradient_bytes = optional_from_json<std::int64_t>(m.at("gradients"));
    d.optimizer_state_bytes = optional_from_json<std::int64_t>(m.at("optimizer_state"));
    d.activation_bytes = optional_from_json<std::int64_t>(m.at("activations"));
    out.push_back(d);
  }
  return out;
}

json rank_to_json(const RankRecord& r) {
  return {{"rank", r.rank},
          {"host", r.host},
          {"mean_step_seconds", r.mean_step_seconds},
          {"phase_seconds", phases_to_json(r.phase_seconds)},
          {"cpu_seconds", r.cpu_seconds},
          {"peak_rss_bytes", optional_to_json(r.peak_rss_bytes)},
          {"memory", memory_to_json(r.memory)}};
}
RankRecord rank_from_json(const json& j) {
  RankRecord r;
  r.rank = j.at("rank").get<int>();
  r.host = j.at("host").get<std::string>();
  r.mean_step_seconds = j.at("mean_step_seconds").get<double>();
  r.phase_seconds = phases_from_json(j.at("phase_seconds"));
  r.cpu_seconds = j.at("cpu_seconds").get<double>();
  r.peak_rss_bytes = optional_from_json<std::int64_t>(j.at("peak_rss_bytes"));
  r.memory = memory_from_json(j.at("memory"));
  return r;
}

template <typename F>
auto parse(const std::string& text, const char* what, F&& decode) {
  try {
    return decode(json::parse(text));
  } catch (const json::exception& e) {
    throw std::runtime_error(std::string("malformed ") + what + " from a rank: " + e.what());
  }
}

}  // namespace

namespace codec {

std::string encode(const RankRecord& record) { return rank_to_json(record).dump(); }

RankRecord decode_rank(const std::string& text) { return parse(text, "rank record", rank_from_json); }

std::string encode(const RepetitionRecord& r) {
  json ranks = json::array();
  for (const auto& rank : r.ranks) ranks.push_back(rank_to_json(rank));
  json comm = nullptr;
  if (r.comm) {
    json timeline = json::array();
    for (const auto& b : r.comm->bucket_timeline) {
      timeline.push_back({{"bytes", b.bytes}, {"ready_seconds", b.ready_seconds}, {"allreduce_seconds", b.allreduce_seconds}});
    }
    json units = json::array();
    for (const auto& u : r.comm->units) units.push_back({{"bytes", u.bytes}, {"root", u.root}});
    json mesh = json::array();
    for (const auto& d : r.comm->mesh) {
      mesh.push_back({{"name", d.name}, {"size", d.size}, {"bytes_per_step", d.bytes_per_step},
                      {"collectives_per_step", d.collectives_per_step}});
    }
    comm = {{"bucket_timeline", timeline},
            {"units", units},
            {"mesh", mesh},
            {"backend", r.comm->backend},
            {"world_size", r.comm->world_size},
            {"bytes_per_step", r.comm->bytes_per_step},
            {"buckets", r.comm->buckets},
            {"allreduce_seconds_per_step", r.comm->allreduce_seconds_per_step},
            {"collective_seconds_measured", r.comm->collective_seconds_measured},
            {"reduce_scatter_bytes_per_step", r.comm->reduce_scatter_bytes_per_step},
            {"all_gather_bytes_per_step", r.comm->all_gather_bytes_per_step},
            {"reduce_scatter_seconds_per_step", r.comm->reduce_scatter_seconds_per_step},
            {"all_gather_seconds_per_step", r.comm->all_gather_seconds_per_step},
            {"reduce_scatters_per_step", optional_to_json(r.comm->reduce_scatters_per_step)},
            {"all_gathers_per_step", optional_to_json(r.comm->all_gathers_per_step)},
            {"point_to_point_bytes_per_step", r.comm->point_to_point_bytes_per_step},
            {"pipeline", nullptr}};
    if (const auto& p = r.comm->pipeline) {
      comm["pipeline"] = {{"schedule", p->schedule}, {"stages", p->stages}, {"microbatches", p->microbatches},
                          {"chunks_per_rank", p->chunks_per_rank}, {"stage_units", p->stage_units},
                          {"expected_bubble", p->expected_bubble}, {"balance", p->balance},
                          {"stage_parameters", p->stage_parameters}, {"stage_profile_seconds", p->stage_profile_seconds},
                          {"unit_parameters", p->unit_parameters}, {"unit_profile_seconds", p->unit_profile_seconds}};
    }
  }
  return json{{"index", r.index},
              {"step_seconds", r.step_seconds},
              {"cpu_seconds", r.cpu_seconds},
              {"phase_seconds", phases_to_json(r.phase_seconds)},
              {"memory", memory_to_json(r.memory)},
              {"peak_rss_bytes", optional_to_json(r.peak_rss_bytes)},
              {"first_loss", number(r.first_loss)},
              {"final_loss", number(r.final_loss)},
              {"step_losses", numbers(r.step_losses)},
              {"ranks", ranks},
              {"comm", comm},
              {"data_path", r.data_path}}
      .dump();
}

RepetitionRecord decode_repetition(const std::string& text) {
  return parse(text, "repetition record", [](const json& j) {
    RepetitionRecord r;
    r.index = j.at("index").get<int>();
    r.step_seconds = j.at("step_seconds").get<std::vector<double>>();
    r.cpu_seconds = j.at("cpu_seconds").get<double>();
    r.phase_seconds = phases_from_json(j.at("phase_seconds"));
    r.memory = memory_from_json(j.at("memory"));
    r.peak_rss_bytes = optional_from_json<std::int64_t>(j.at("peak_rss_bytes"));
    r.first_loss = number_from(j.at("first_loss"));
    r.final_loss = number_from(j.at("final_loss"));
    for (const auto& x : j.at("step_losses")) r.step_losses.push_back(number_from(x));
    for (const auto& rank : j.at("ranks")) r.ranks.push_back(rank_from_json(rank));
    r.data_path = j.at("data_path").get<std::string>();
    if (!j.at("comm").is_null()) {
      const auto& c = j.at("comm");
      CommSummary s;
      s.backend = c.at("backend").get<std::string>();
      s.world_size = c.at("world_size").get<int>();
      s.bytes_per_step = c.at("bytes_per_step").get<std::int64_t>();
      s.buckets = c.at("buckets").get<int>();
      s.allreduce_seconds_per_step = c.at("allreduce_seconds_per_step").get<double>();
      s.collective_seconds_measured = c.at("collective_seconds_measured").get<bool>();
      s.reduce_scatter_bytes_per_step = c.at("reduce_scatter_bytes_per_step").get<std::int64_t>();
      s.all_gather_bytes_per_step = c.at("all_gather_bytes_per_step").get<std::int64_t>();
      s.reduce_scatter_seconds_per_step = c.at("reduce_scatter_seconds_per_step").get<double>();
      s.all_gather_seconds_per_step = c.at("all_gather_seconds_per_step").get<double>();
      s.reduce_scatters_per_step = optional_from_json<int>(c.at("reduce_scatters_per_step"));
      s.all_gathers_per_step = optional_from_json<int>(c.at("all_gathers_per_step"));
      s.point_to_point_bytes_per_step = c.at("point_to_point_bytes_per_step").get<std::int64_t>();
      for (const auto& d : c.at("mesh")) {
        s.mesh.push_back({d.at("name").get<std::string>(), d.at("size").get<int>(), d.at("bytes_per_step").get<std::int64_t>(),
                          d.at("collectives_per_step").get<int>()});
      }
      if (const auto& p = c.at("pipeline"); !p.is_null()) {
        CommSummary::Pipeline line;
        line.schedule = p.at("schedule").get<std::string>();
        line.stages = p.at("stages").get<int>();
        line.microbatches = p.at("microbatches").get<int>();
        line.chunks_per_rank = p.at("chunks_per_rank").get<int>();
        line.stage_units = p.at("stage_units").get<std::vector<std::pair<std::int64_t, std::int64_t>>>();
        line.expected_bubble = p.at("expected_bubble").get<double>();
        line.balance = p.at("balance").get<std::string>();
        line.stage_parameters = p.at("stage_parameters").get<std::vector<std::int64_t>>();
        line.stage_profile_seconds = p.at("stage_profile_seconds").get<std::vector<double>>();
        line.unit_parameters = p.at("unit_parameters").get<std::vector<std::int64_t>>();
        line.unit_profile_seconds = p.at("unit_profile_seconds").get<std::vector<double>>();
        s.pipeline = line;
      }
      for (const auto& b : c.at("bucket_timeline")) {
        s.bucket_timeline.push_back({b.at("bytes").get<std::int64_t>(), b.at("ready_seconds").get<double>(),
                                     b.at("allreduce_seconds").get<double>()});
      }
      for (const auto& u : c.at("units")) s.units.push_back({u.at("bytes").get<std::int64_t>(), u.at("root").get<bool>()});
      r.comm = s;
    }
    return r;
  });
}

std::string encode(const ParityRecord& p) {
  return json{{"steps", p.steps},
              {"max_rel_param_diff", number(p.max_rel_param_diff)},
              {"final_loss", number(p.final_loss)},
              {"reference_final_loss", number(p.reference_final_loss)},
              {"tolerance", p.tolerance},
              {"within_tolerance", p.within_tolerance},
              {"reference", p.reference},
              {"dtype", p.dtype},
              {"note", p.note},
              {"worst_parameters", p.worst_parameters},
              {"checked", p.checked}}
      .dump();
}

ParityRecord decode_parity(const std::string& text) {
  return parse(text, "parity record", [](const json& j) {
    ParityRecord p;
    p.steps = j.at("steps").get<int>();
    p.max_rel_param_diff = number_from(j.at("max_rel_param_diff"));
    p.final_loss = number_from(j.at("final_loss"));
    p.reference_final_loss = number_from(j.at("reference_final_loss"));
    p.tolerance = j.at("tolerance").get<double>();
    p.within_tolerance = j.at("within_tolerance").get<bool>();
    p.reference = j.at("reference").get<std::string>();
    p.dtype = j.at("dtype").get<std::string>();
    p.note = j.at("note").get<std::string>();
    p.worst_parameters = j.value("worst_parameters", "");
    p.checked = j.value("checked", true);
    return p;
  });
}

}  // namespace codec
}  // namespace ddpbench
