#include "run/rank_tasks.h"

#include <unistd.h>

#include <cstdint>
#include <sstream>
#include <vector>

#include "base/errors.h"
#include "base/utf8.h"
#include "distributed/process_group.h"
#include "records/record_codec.h"

namespace ddpbench {
namespace {

std::string host_name() {
  char name[256] = {};
  gethostname(name, sizeof(name) - 1);
  return escape_invalid_utf8(name);  // it goes into the JSON: bad bytes as \xHH
}

}  // namespace

std::string RankTask::encode() const {
  return (kind == Kind::Parity ? "parity " : "repetition " + std::to_string(repetition) + " ") + case_name +
         (trace ? " trace" : "");
}

RankTask RankTask::decode(const std::string& text) {
  RankTask task;
  std::istringstream in(text);
  std::string kind;
  in >> kind;
  if (kind == "repetition") {
    task.kind = Kind::Repetition;
    in >> task.repetition;
  } else if (kind != "parity") {
    throw UsageError("DDPBENCH_RANK_TASK=" + text + ": expected 'parity CASE' or 'repetition N CASE'");
  }
  in >> task.case_name;
  const bool named = static_cast<bool>(in) && !task.case_name.empty();
  std::string flag;
  if (named && in >> flag) task.trace = flag == "trace";
  if (!named || (!flag.empty() && !task.trace)) {
    throw UsageError("DDPBENCH_RANK_TASK=" + text + ": expected 'parity CASE' or 'repetition N CASE [trace]'");
  }
  return task;
}

void gather_ranks(ProcessGroupContext& group, const CaseSpec& spec, RepetitionRecord& rep) {
  RankRecord mine;
  mine.rank = group.rank();
  mine.host = host_name();
  mine.mean_step_seconds = rep.mean_step_seconds();
  mine.phase_seconds = rep.phase_seconds;
  mine.cpu_seconds = rep.cpu_seconds;
  mine.peak_rss_bytes = rep.peak_rss_bytes;
  mine.memory = rep.memory;
  for (auto& m : mine.memory) m.device = group.rank();
  const std::string prefix = "gather/" + spec.name() + "/" + std::to_string(rep.index) + "/";
  if (group.rank() != 0) {
    group.store().set(prefix + std::to_string(mine.rank), as_bytes(codec::encode(mine)));
    return;
  }
  rep.ranks = {mine};
  rep.memory.clear();
  for (const auto& m : mine.memory) rep.memory.push_back(m);
  for (int r = 1; r < group.size(); ++r) {
    const std::string key = prefix + std::to_string(r);
    group.store().wait({key});
    rep.ranks.push_back(codec::decode_rank(as_string(group.store().get(key))));
    for (const auto& m : rep.ranks.back().memory) rep.memory.push_back(m);
  }
}

void share_parity_verdict(ProcessGroupContext& group, CaseRecord& record) {
  const std::string key = "parity/" + record.spec.name();
  if (group.rank() == 0) {
    group.store().set(key, as_bytes(record.status == CaseStatus::Ok ? std::string() : record.reason));
  } else {
    group.store().wait({key});
    const std::string reason = as_string(group.store().get(key));
    if (!reason.empty()) {
      record.status = CaseStatus::Failed;
      record.reason = reason;
    }
  }
}

}  // namespace ddpbench
