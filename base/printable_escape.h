// The escaping behind base/printable.h, header-only and freestanding (no libstdc++, no allocation), so that the
// preloaded shim escapes what it logs exactly as the reports and the engine do:
//
//   escape_printable(text, len, PrintableForm::kLine, [&](const char* piece, size_t n) { ...append...; });
//
// `put` gets the output a piece at a time (a run of kept bytes, or one escape whole). See printable.h for what is
// escaped.
#pragma once

#include <stddef.h>
#include <stdint.h>

namespace trainscope::reports {

enum class PrintableForm { kLine, kText, kJson };  // printable(), printable_text(), printable_json()

// The length of the valid UTF-8 sequence at text[i] (2 to 4), or 0 when the bytes there are not one.
inline size_t utf8_sequence_at(const char* text, size_t len, size_t i, uint32_t* code_point) {
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
  if (i + length > len) return 0;
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

template <typename Put>
void escape_printable(const char* text, size_t len, PrintableForm form, Put&& put) {
  static constexpr char kHex[] = "0123456789abcdef";
  const auto escape_byte = [&](uint8_t byte) {  // \xHH
    const char piece[4] = {'\\', 'x', kHex[byte >> 4], kHex[byte & 0x0f]};
    put(piece, sizeof piece);
  };
  const auto escape_code_point = [&](uint32_t code_point) {  // JSON's \u00XX, for a code point below U+0100
    const char piece[6] = {'\\', 'u', '0', '0', kHex[(code_point >> 4) & 0x0f], kHex[code_point & 0x0f]};
    put(piece, sizeof piece);
  };
  const bool keep_lines = form != PrintableForm::kLine;
  size_t kept = 0;  // start of the run of bytes kept as they are, not yet put
  size_t i = 0;
  const auto flush = [&] {
    if (i > kept) put(text + kept, i - kept);
  };
  while (i < len) {
    const uint8_t byte = static_cast<uint8_t>(text[i]);
    if (byte < 0x80) {
      if ((byte < 0x20 && !(keep_lines && (byte == '\n' || byte == '\t'))) || byte == 0x7f) {
        flush();
        if (form == PrintableForm::kJson) {
          escape_code_point(byte);
        } else {
          escape_byte(byte);
        }
        kept = ++i;
      } else {
        ++i;
      }
      continue;
    }
    uint32_t code_point = 0;
    const size_t length = utf8_sequence_at(text, len, i, &code_point);
    const bool c1 = length != 0 && code_point >= 0x80 && code_point <= 0x9f;
    if (!c1 && length != 0) {
      i += length;
      continue;
    }
    flush();
    if (form == PrintableForm::kJson) {
      if (c1) {
        escape_code_point(code_point);
      } else {
        put("\\ufffd", 6);  // what the JSON writer makes of a byte that is not UTF-8
      }
      i += c1 ? length : 1;
    } else {
      // Not UTF-8, or a C1 control: escaped byte by byte (a C1 control's two bytes, an invalid byte alone).
      const size_t escaped = length == 0 ? 1 : length;
      for (size_t k = 0; k < escaped; ++k) escape_byte(static_cast<uint8_t>(text[i + k]));
      i += escaped;
    }
    kept = i;
  }
  flush();
}

}  // namespace trainscope::reports
