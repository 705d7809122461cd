// libFuzzer target for the exchange's message decoder: it must never crash, hang or over-allocate on any input,
// and whatever it accepts must re-encode to the same bytes, except where escaping changed a string from a peer
// (base/printable.h): then its re-encoding is a fixed point (escaping is idempotent).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

#include "collectors/exchange/wire_protocol.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace trainscope::exchange;
  const DecodeResult decoded = decode(std::span<const uint8_t>(data, size));
  if (!decoded.ok) {
    if (decoded.error.empty()) __builtin_trap();  // every refusal says why
    return 0;
  }
  const std::vector<uint8_t> again = encode(decoded.message);
  if (again.size() == size && std::memcmp(again.data(), data, size) == 0) return 0;
  const DecodeResult twice = decode(std::span<const uint8_t>(again.data(), again.size()));
  // Escaping changed a string: what it made is canonical (decoding it again changes nothing).
  if (!twice.ok || encode(twice.message) != again) __builtin_trap();
  return 0;
}
