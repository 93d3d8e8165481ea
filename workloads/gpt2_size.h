#pragma once
// GPT-2's geometry (`--gpt2-size`): one of the four sizes OpenAI released, or one written out, so
// that the same model code runs at 1.5B parameters on a GPU or at a few hundred thousand in a test.
#include <cstdint>
#include <string>

namespace ddpbench {

struct Gpt2Size {
  std::string name = "small";  // as --gpt2-size spelled it
  std::int64_t layers = 12;
  std::int64_t heads = 12;
  std::int64_t width = 768;
  std::int64_t vocab = 50257;
  std::int64_t context = 1024;  // the position table, the longest --seq-len; the same at every size

  // The model's parameter count (the tied output projection counted once).
  std::int64_t parameters() const;
};

// "small" (124M, the default), "medium" (355M), "large" (774M), "xl" (1.56B), or
// "LAYERS:HEADS:WIDTH[:VOCAB]" (vocabulary 50257 when left out). Throws std::invalid_argument
// saying what is wrong with `text`.
Gpt2Size parse_gpt2_size(const std::string& text);

}  // namespace ddpbench
