#pragma once
// Records in transit between processes: a rank's figures to rank 0, rank 0's repetition or parity
// result to ddpbench's launcher. A lossless internal encoding (JSON text), not the report format.
#include <string>

#include "records/results.h"

namespace ddpbench::codec {

std::string encode(const RankRecord& record);
std::string encode(const RepetitionRecord& record);
std::string encode(const ParityRecord& record);
// Throw std::runtime_error on malformed text.
RankRecord decode_rank(const std::string& text);
RepetitionRecord decode_repetition(const std::string& text);
ParityRecord decode_parity(const std::string& text);

}  // namespace ddpbench::codec
