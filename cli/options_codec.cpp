#include "cli/options_codec.h"

#include <nlohmann/json.hpp>

#include "base/errors.h"
#include "base/json_optional.h"
#include "pipeline/schedule.h"

namespace ddpbench {

namespace {

using nlohmann::json;

HogwildMode hogwild_mode_from(const std::string& text) {
  if (text == to_string(HogwildMode::Threads)) return HogwildMode::Threads;
  if (text == to_string(HogwildMode::Processes)) return HogwildMode::Processes;
  throw std::invalid_argument("unknown hogwild mode " + text);
}

}  // namespace

std::string encode_rank_options(const RankOptions& options) {
  const RunnerOptions& r = options.runner;
  json doc;
  doc["workloads"] = r.workloads;
  doc["strategies"] = r.strategies;
  doc["global_batch"] = optional_to_json(r.global_batch);
  doc["sequence_length"] = optional_to_json(r.sequence_length);
  doc["gpt2_size"] = r.gpt2_size;
  doc["gpt2_plain_loss"] = r.gpt2_plain_loss;
  doc["data_path"] = to_string(r.data_path);
  doc["dataset_size"] = optional_to_json(r.dataset_size);
  doc["steps"] = r.steps;
  doc["warmup"] = r.warmup;
  doc["repetitions"] = r.repetitions;
  doc["target_precision"] = r.target_precision;
  doc["min_time_seconds"] = r.min_time_seconds;
  doc["max_time_seconds"] = r.max_time_seconds;
  doc["seed"] = r.seed;
  doc["parity_steps"] = r.parity_steps;
  doc["parity_tolerance"] = r.parity_tolerance;
  doc["precision"] = to_string(r.precision);
  doc["peak_flops"] = optional_to_json(r.peak_flops);
  doc["max_cv"] = r.max_cv;
  doc["slow_by"] = r.slow_by;
  doc["loader"] = {{"workers", r.loader.workers},
                   {"pin_memory", r.loader.pin_memory},
                   {"prefetch_per_worker", r.loader.prefetch_per_worker}};
  doc["timeout_seconds"] = r.timeout_seconds;
  const auto& ddp = r.strategy.ddp;
  doc["ddp"] = {{"bucket_mb", ddp.bucket_mb},
                {"overlap", ddp.overlap},
                {"grad_as_bucket_view", ddp.grad_as_bucket_view},
                {"sync_bn", ddp.sync_bn},
                {"checkpoint_path", ddp.checkpoint_path},
                {"checkpoint_every", ddp.checkpoint_every}};
  doc["fsdp"] = {{"reshard_after_forward", r.strategy.fsdp.reshard_after_forward},
                 {"prefetch", r.strategy.fsdp.prefetch}};
  doc["tp"] = {{"sequence_parallel", r.strategy.tp.sequence_parallel}};
  doc["levers"] = {{"activation_checkpointing", r.strategy.levers.activation_checkpointing.to_string()},
                   {"grad_accum", r.strategy.levers.grad_accum},
                   {"sync_every_microbatch", r.strategy.levers.sync_every_microbatch},
                   {"no_sync_accum", r.strategy.levers.no_sync_accum}};
  doc["mesh"] = r.strategy.mesh;
  doc["pp"] = {{"schedule", pipeline::to_string(r.strategy.pipeline.schedule)},
               {"microbatches", r.strategy.pipeline.microbatches},
               {"stages_per_rank", r.strategy.pipeline.stages_per_rank},
               {"balance", pipeline::to_string(r.strategy.pipeline.balance)},
               {"split", r.strategy.pipeline.split}};
  const auto& hogwild = r.strategy.hogwild;
  doc["hogwild"] = {{"mode", to_string(hogwild.mode)}, {"sync_every", hogwild.sync_every}, {"workers", hogwild.workers}};
  doc["devices"] = {{"device", options.devices.device},
                    {"world_size", options.devices.world_size},
                    {"threads", options.devices.threads}};
  doc["sources"] = json::parse(options.sources.to_json());
  return doc.dump();
}

RankOptions decode_rank_options(const std::string& text) {
  try {
    const json doc = json::parse(text);
    RankOptions options;
    RunnerOptions& r = options.runner;
    r.workloads = doc.at("workloads").get<std::vector<std::string>>();
    r.strategies = doc.at("strategies").get<std::vector<std::string>>();
    r.global_batch = optional_from_json<std::int64_t>(doc.at("global_batch"));
    r.sequence_length = optional_from_json<std::int64_t>(doc.at("sequence_length"));
    r.gpt2_size = doc.at("gpt2_size").get<std::string>();
    r.gpt2_plain_loss = doc.at("gpt2_plain_loss").get<bool>();
    r.data_path = parse_data_path("--rank-options", doc.at("data_path").get<std::string>());
    r.dataset_size = optional_from_json<std::int64_t>(doc.at("dataset_size"));
    r.steps = doc.at("steps").get<int>();
    r.warmup = doc.at("warmup").get<int>();
    r.repetitions = doc.at("repetitions").get<int>();
    r.target_precision = doc.at("target_precision").get<double>();
    r.min_time_seconds = doc.at("min_time_seconds").get<double>();
    r.max_time_seconds = doc.at("max_time_seconds").get<double>();
    r.seed = doc.at("seed").get<std::uint64_t>();
    r.parity_steps = doc.at("parity_steps").get<int>();
    r.parity_tolerance = doc.at("parity_tolerance").get<double>();
    r.precision = parse_precision("--rank-options", doc.at("precision").get<std::string>());
    r.peak_flops = optional_from_json<double>(doc.at("peak_flops"));
    r.max_cv = doc.at("max_cv").get<double>();
    r.slow_by = doc.at("slow_by").get<double>();
    const auto& loader = doc.at("loader");
    r.loader.workers = loader.at("workers").get<int>();
    r.loader.pin_memory = loader.at("pin_memory").get<bool>();
    r.loader.prefetch_per_worker = loader.at("prefetch_per_worker").get<int>();
    r.timeout_seconds = doc.at("timeout_seconds").get<double>();
    const auto& ddp = doc.at("ddp");
    r.strategy.ddp.bucket_mb = ddp.at("bucket_mb").get<double>();
    r.strategy.ddp.overlap = ddp.at("overlap").get<bool>();
    r.strategy.ddp.grad_as_bucket_view = ddp.at("grad_as_bucket_view").get<bool>();
    r.strategy.ddp.sync_bn = ddp.at("sync_bn").get<bool>();
    r.strategy.ddp.checkpoint_path = ddp.at("checkpoint_path").get<std::string>();
    r.strategy.ddp.checkpoint_every = ddp.at("checkpoint_every").get<int>();
    const auto& fsdp = doc.at("fsdp");
    r.strategy.fsdp.reshard_after_forward = fsdp.at("reshard_after_forward").get<bool>();
    r.strategy.fsdp.prefetch = fsdp.at("prefetch").get<bool>();
    r.strategy.tp.sequence_parallel = doc.at("tp").at("sequence_parallel").get<bool>();
    try {
      r.strategy.levers.activation_checkpointing =
          CheckpointPolicy::parse(doc.at("levers").at("activation_checkpointing").get<std::string>());
    } catch (const std::invalid_argument& e) {
      throw UsageError(std::string("--rank-options: ") + e.what());
    }
    r.strategy.levers.grad_accum = doc.at("levers").at("grad_accum").get<int>();
    r.strategy.levers.sync_every_microbatch = doc.at("levers").at("sync_every_microbatch").get<bool>();
    r.strategy.levers.no_sync_accum = doc.at("levers").at("no_sync_accum").get<bool>();
    r.strategy.mesh = doc.at("mesh").get<std::string>();
    const auto& pp = doc.at("pp");
    const auto schedule = pipeline::parse_schedule(pp.at("schedule").get<std::string>());
    if (!schedule) throw UsageError("--rank-options: unknown pp schedule " + pp.at("schedule").dump());
    r.strategy.pipeline.schedule = *schedule;
    r.strategy.pipeline.microbatches = pp.at("microbatches").get<int>();
    r.strategy.pipeline.stages_per_rank = pp.at("stages_per_rank").get<int>();
    const auto balance = pipeline::parse_balance(pp.at("balance").get<std::string>());
    if (!balance) throw UsageError("--rank-options: unknown pp balance " + pp.at("balance").dump());
    r.strategy.pipeline.balance = *balance;
    r.strategy.pipeline.split = pp.at("split").get<std::vector<std::size_t>>();
    const auto& hogwild = doc.at("hogwild");
    r.strategy.hogwild.mode = hogwild_mode_from(hogwild.at("mode").get<std::string>());
    r.strategy.hogwild.sync_every = hogwild.at("sync_every").get<int>();
    r.strategy.hogwild.workers = hogwild.at("workers").get<int>();
    const auto& devices = doc.at("devices");
    options.devices.device = devices.at("device").get<std::string>();
    options.devices.world_size = devices.at("world_size").get<int>();
    options.devices.threads = devices.at("threads").get<int>();
    options.sources = WorkloadSources::from_json(doc.at("sources").dump());
    return options;
  } catch (const UsageError&) {
    throw;
  } catch (const std::exception& e) {
    throw UsageError(std::string("--rank-options: not a record of this ddpbench: ") + e.what());
  }
}

}  // namespace ddpbench
