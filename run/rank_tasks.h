#pragma once
// Multi-process cases across ranks: the task ddpbench's launcher hands its fresh rank processes, and
// what the ranks of a group exchange through the store so that rank 0 can speak for all of them.
#include <string>

#include "records/results.h"

namespace ddpbench {

class ProcessGroupContext;

// One unit of a multi-process case that ddpbench's launcher hands to fresh rank processes.
struct RankTask {
  enum class Kind { Parity, Repetition };
  Kind kind = Kind::Parity;
  std::string case_name;
  int repetition = 0;
  bool trace = false;  // a repetition's ranks record trace events and leave them in the store
  std::string encode() const;
  static RankTask decode(const std::string& text);  // throws UsageError on malformed text
};

// Rank 0 collects every rank's figures (through the store) into `rep`: its ranks, and the memory of
// every rank's device; the other ranks send theirs.
void gather_ranks(ProcessGroupContext& group, const CaseSpec& spec, RepetitionRecord& rep);

// Only rank 0 compares with single: it publishes whether the case goes on, and every other rank
// takes rank 0's verdict into `record`, so that all of them agree.
void share_parity_verdict(ProcessGroupContext& group, CaseRecord& record);

}  // namespace ddpbench
