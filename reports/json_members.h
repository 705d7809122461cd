// Careful access to the members of JSON read from files (reports, traces): a value of the wrong type reads as absent,
// never throws. Shared by the run summary, the timeline and the page.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace trainscope::reports {

inline const nlohmann::json* member(const nlohmann::json& j, const char* key) {
  if (!j.is_object()) return nullptr;
  const auto it = j.find(key);
  return it == j.end() ? nullptr : &*it;
}

inline std::optional<uint64_t> uint_member(const nlohmann::json& j, const char* key) {
  const nlohmann::json* v = member(j, key);
  if (v == nullptr) return std::nullopt;
  if (v->is_number_unsigned()) return v->get<uint64_t>();
  if (v->is_number_integer() && v->get<int64_t>() >= 0) return static_cast<uint64_t>(v->get<int64_t>());
  return std::nullopt;
}

inline std::optional<int64_t> int_member(const nlohmann::json& j, const char* key) {
  const nlohmann::json* v = member(j, key);
  if (v == nullptr || !v->is_number_integer()) return std::nullopt;
  if (v->is_number_unsigned()) {
    const uint64_t u = v->get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
    return static_cast<int64_t>(u);
  }
  return v->get<int64_t>();
}

// A rank: a whole number 0..INT32_MAX, else -1.
inline int32_t rank_member(const nlohmann::json& j, const char* key) {
  const std::optional<int64_t> v = int_member(j, key);
  return v && *v >= 0 && *v <= std::numeric_limits<int32_t>::max() ? static_cast<int32_t>(*v) : -1;
}

inline std::optional<double> number_member(const nlohmann::json& j, const char* key) {
  const nlohmann::json* v = member(j, key);
  if (v == nullptr || !v->is_number()) return std::nullopt;
  return v->get<double>();
}

inline std::string string_member(const nlohmann::json& j, const char* key) {
  const nlohmann::json* v = member(j, key);
  return v != nullptr && v->is_string() ? v->get<std::string>() : std::string();
}

inline bool bool_member(const nlohmann::json& j, const char* key, bool fallback) {
  const nlohmann::json* v = member(j, key);
  return v != nullptr && v->is_boolean() ? v->get<bool>() : fallback;
}

// The elements of an array that are objects; empty when it is not an array.
inline std::vector<const nlohmann::json*> objects_in(const nlohmann::json& j, const char* key) {
  std::vector<const nlohmann::json*> out;
  const nlohmann::json* v = member(j, key);
  if (v == nullptr || !v->is_array()) return out;
  for (const nlohmann::json& e : *v)
    if (e.is_object()) out.push_back(&e);
  return out;
}

// A member that is an object, or nullptr.
inline const nlohmann::json* object_member(const nlohmann::json& j, const char* key) {
  const nlohmann::json* v = member(j, key);
  return v != nullptr && v->is_object() ? v : nullptr;
}

}  // namespace trainscope::reports
