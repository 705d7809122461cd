// Control characters escaped in strings from outside this process (printable.h).
#include "reports/printable.h"

#include <cstddef>
#include <cstdint>

namespace trainscope::reports {

namespace {

// The length of the valid UTF-8 sequence at text[i] (2 to 4), or 0 when the bytes there are not one.
size_t utf8_sequence(std::string_view text, size_t i, uint32_t* code_point) {
  const auto byte = [&](size_t k) { return static_cast<uint8_t>(text[k]); };
  const uint8_t lead = byte(i);
  size_t length = 0;
  uint32_t value = 0;
  if (lead >= 0xc2 && lead <= 0xdf) {
    length = 2;
    value = lead & 0x1fu;
  } else if (lead >= 0xe0 && lead <= 0xef) {
    length = 3;
    value = lead & 0x0fu;
  } else if (lead >= 0xf0 && lead <= 0xf4) {
    length = 4;
    value = lead & 0x07u;
  } else {
    return 0;
  }
  if (i + length > text.size()) return 0;
  for (size_t k = 1; k < length; ++k) {
    if ((byte(i + k) & 0xc0u) != 0x80u) return 0;
    value = (value << 6) | (byte(i + k) & 0x3fu);
  }
  // Overlong forms, UTF-16 surrogates and values past U+10FFFF are not UTF-8.
  if ((length == 3 && value < 0x800) || (length == 4 && (value < 0x10000 || value > 0x10ffff)) ||
      (value >= 0xd800 && value <= 0xdfff))
    return 0;
  *code_point = value;
  return length;
}

enum class Form { kLine, kText, kJson };

void escape_byte(std::string& out, uint8_t byte) {
  static constexpr char kHex[] = "0123456789abcdef";
  out += "\\x";
  out += kHex[byte >> 4];
  out += kHex[byte & 0x0f];
}

// JSON's own escape of a code point below U+0100: \u00XX.
void escape_code_point(std::string& out, uint32_t code_point) {
  static constexpr char kHex[] = "0123456789abcdef";
  out += "\\u00";
  out += kHex[(code_point >> 4) & 0x0f];
  out += kHex[code_point & 0x0f];
}

std::string escape(std::string_view text, Form form) {
  const bool keep_lines = form != Form::kLine;
  std::string out;
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    const uint8_t byte = static_cast<uint8_t>(text[i]);
    if (byte < 0x80) {
      if ((byte < 0x20 && !(keep_lines && (byte == '\n' || byte == '\t'))) || byte == 0x7f) {
        if (form == Form::kJson) {
          escape_code_point(out, byte);
        } else {
          escape_byte(out, byte);
        }
      } else {
        out += static_cast<char>(byte);
      }
      ++i;
      continue;
    }
    uint32_t code_point = 0;
    const size_t length = utf8_sequence(text, i, &code_point);
    if (length != 0 && form == Form::kJson && code_point >= 0x80 && code_point <= 0x9f) {
      escape_code_point(out, code_point);
      i += length;
      continue;
    }
    if (length == 0 && form == Form::kJson) {
      out += "\\ufffd";  // what the JSON writer makes of a byte that is not UTF-8
      ++i;
      continue;
    }
    if (length == 0 || (code_point >= 0x80 && code_point <= 0x9f)) {
      // Not UTF-8, or a C1 control: escaped byte by byte (a C1 control's two bytes, an invalid byte alone).
      const size_t escaped = length == 0 ? 1 : length;
      for (size_t k = 0; k < escaped; ++k) escape_byte(out, static_cast<uint8_t>(text[i + k]));
      i += escaped;
      continue;
    }
    out.append(text.substr(i, length));
    i += length;
  }
  return out;
}

}  // namespace

std::string printable(std::string_view text) { return escape(text, Form::kLine); }

std::string printable_text(std::string_view text) { return escape(text, Form::kText); }

std::string printable_json(std::string_view json) { return escape(json, Form::kJson); }

}  // namespace trainscope::reports
