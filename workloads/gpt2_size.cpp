#include "workloads/gpt2_size.h"

#include <array>
#include <stdexcept>
#include <vector>

namespace ddpbench {
namespace {

// OpenAI's released GPT-2 models (the model cards' layers, heads and widths; vocabulary 50257).
const std::array<Gpt2Size, 4> kReleased = {{
    {"small", 12, 12, 768},
    {"medium", 24, 16, 1024},
    {"large", 36, 20, 1280},
    {"xl", 48, 25, 1600},
}};

std::int64_t field(const std::string& text, const std::string& part, const char* what, std::int64_t low, std::int64_t high) {
  std::size_t used = 0;
  long long value = 0;
  try {
    value = std::stoll(part, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (part.empty() || used != part.size()) {
    throw std::invalid_argument("'" + text + "': " + what + " '" + part + "' is not a whole number");
  }
  if (value < low || value > high) {
    throw std::invalid_argument("'" + text + "': " + what + " must be " + std::to_string(low) + " to " +
                                std::to_string(high) + ", got " + part);
  }
  return value;
}

}  // namespace

std::int64_t Gpt2Size::parameters() const {
  // Embeddings, then per block two LayerNorms (4W), QKV (3W^2 + 3W), the attention's projection
  // (W^2 + W), the MLP (4W^2 + 4W and 4W^2 + W), then the last LayerNorm (2W).
  return vocab * width + context * width + layers * (12 * width * width + 13 * width) + 2 * width;
}

Gpt2Size parse_gpt2_size(const std::string& text) {
  for (const auto& size : kReleased) {
    if (text == size.name) return size;
  }
  std::vector<std::string> parts;
  std::size_t start = 0;
  for (std::size_t colon; (colon = text.find(':', start)) != std::string::npos; start = colon + 1) {
    parts.push_back(text.substr(start, colon - start));
  }
  parts.push_back(text.substr(start));
  if (parts.size() != 3 && parts.size() != 4) {
    throw std::invalid_argument("'" + text + "': expected small, medium, large, xl or LAYERS:HEADS:WIDTH[:VOCAB]");
  }
  Gpt2Size size;
  size.name = text;
  size.layers = field(text, parts[0], "layers", 1, 1024);
  size.heads = field(text, parts[1], "heads", 1, 1024);
  size.width = field(text, parts[2], "width", 1, 65536);
  if (parts.size() == 4) size.vocab = field(text, parts[3], "vocabulary", 2, 1 << 24);
  if (size.width % size.heads != 0) {
    throw std::invalid_argument("'" + text + "': width " + parts[2] + " is not a multiple of heads " + parts[1]);
  }
  return size;
}

}  // namespace ddpbench
