#pragma once
// std::optional to and from JSON: none is null. Shared by the JSON report and the two codecs
// (records from ranks, options to ranks).
#include <nlohmann/json.hpp>

#include <optional>

namespace ddpbench {

template <typename T>
nlohmann::json optional_to_json(const std::optional<T>& v) {
  return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
}

template <typename T>
std::optional<T> optional_from_json(const nlohmann::json& j) {
  if (j.is_null()) return std::nullopt;
  return j.get<T>();
}

}  // namespace ddpbench
