// Hexadecimal text, in the spellings the reports and the wire use: written once here instead of a formatter per file.
#pragma once

#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <span>
#include <string>

namespace trainscope::text {

// "0x7f3a0c" (an address, a stream, a caller).
inline std::string hex_address(uint64_t value) {
  char buffer[24];
  std::snprintf(buffer, sizeof(buffer), "0x%" PRIx64, value);
  return buffer;
}

// "7f3a0c": a communicator id as the frame reports spell it.
inline std::string hex_digits(uint64_t value) {
  char buffer[24];
  std::snprintf(buffer, sizeof(buffer), "%" PRIx64, value);
  return buffer;
}

// "00007f3a0c1b2d3e": always 16 digits, so that ids line up and their leading digits can name them.
inline std::string hex_id(uint64_t value) {
  char buffer[24];
  std::snprintf(buffer, sizeof(buffer), "%016" PRIx64, value);
  return buffer;
}

// Two lower-case digits per byte, in order (keys, tokens, an ncclUniqueId).
inline std::string hex_bytes(std::span<const uint8_t> bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string text;
  text.reserve(bytes.size() * 2);
  for (const uint8_t byte : bytes) {
    text += kDigits[byte >> 4];
    text += kDigits[byte & 15];
  }
  return text;
}

}  // namespace trainscope::text
