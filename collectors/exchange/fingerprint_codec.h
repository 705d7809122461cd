// The byte encoding of a batch's fingerprints on the wire (wire_protocol.h, version 4).
//
// Consecutive calls of a rank differ in few fields, and by little: the sequence number and the record index move
// by one, the start time by microseconds, the op, count and call site among a handful of values. So each
// fingerprint is coded against the one before it in the batch (the first against a zeroed one):
//   varint mask of the fields that differ | for each of them, in mask order, the zigzag varint of the difference
// Differences are taken on the field's value widened to 64 bits (signed fields sign-extended) and wrap around, so
// every value has exactly one encoding; a field in the mask whose difference is 0, an overlong varint, an unknown
// mask bit or a value outside its field's type is refused, which keeps encode(decode(bytes)) == bytes.
// A call of the collective-bound loop in tests/bench takes 12-20 bytes this way, against 85 as plain fields: the
// exchange's bytes, CURVE's work and the copies on both sides shrink with it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "base/fingerprint.h"

namespace trainscope::exchange {

// The fewest bytes one fingerprint takes (its mask): what bounds a batch's count by the bytes that carry it.
inline constexpr size_t kMinFingerprintBytes = 1;
// The most: a mask and every field at the longest varint.
inline constexpr size_t kMaxFingerprintBytes = 3 + 17 * 10;

// Appends the coded fingerprints to `out`.
void encode_fingerprints(std::span<const Fingerprint> fingerprints, std::vector<uint8_t>& out);

// Decodes out.size() fingerprints from the front of `bytes` into `out`. Returns the bytes used, or sets *error to
// a one-line reason (naming the fingerprint and the field) and returns 0.
size_t decode_fingerprints(std::span<const uint8_t> bytes, std::span<Fingerprint> out, std::string* error);

}  // namespace trainscope::exchange
