// Delta coding of a batch's fingerprints (see fingerprint_codec.h).
#include "collectors/exchange/fingerprint_codec.h"

#include <limits>
#include <type_traits>

#include "collectors/exchange/wire_protocol.h"

namespace trainscope::exchange {
namespace {

// A field's value widened to 64 bits: sign-extended for signed fields, so that -1 and 0 are neighbours.
template <auto Member>
uint64_t widen(const Fingerprint& f) {
  using T = std::remove_cvref_t<decltype(f.*Member)>;
  if constexpr (std::is_signed_v<T>) {
    return static_cast<uint64_t>(static_cast<int64_t>(f.*Member));
  } else {
    return static_cast<uint64_t>(f.*Member);
  }
}

// Stores a widened value back; false when it is not a value of the field's type (it would not re-encode the same).
template <auto Member>
bool narrow(Fingerprint& f, uint64_t value) {
  using T = std::remove_cvref_t<decltype(f.*Member)>;
  if constexpr (std::is_signed_v<T>) {
    const auto v = static_cast<int64_t>(value);
    if (v < std::numeric_limits<T>::min() || v > std::numeric_limits<T>::max()) return false;
    f.*Member = static_cast<T>(v);
  } else {
    if (value > std::numeric_limits<T>::max()) return false;
    f.*Member = static_cast<T>(value);
  }
  return true;
}

struct Field {
  const char* name;
  uint64_t (*get)(const Fingerprint&);
  bool (*set)(Fingerprint&, uint64_t);
};

#define TS_FIELD(name) \
  Field { #name, widen < &Fingerprint::name>, narrow < &Fingerprint::name> }
// Mask order: the fields that change from call to call first, so that the common masks fit one or two bytes.
constexpr Field kFields[] = {
    TS_FIELD(seq),    TS_FIELD(record_index), TS_FIELD(start_ns), TS_FIELD(op),    TS_FIELD(count),
    TS_FIELD(caller), TS_FIELD(stack_id),     TS_FIELD(peer),     TS_FIELD(redop), TS_FIELD(flags),
    TS_FIELD(dtype),  TS_FIELD(comm_id),      TS_FIELD(result),   TS_FIELD(kind),  TS_FIELD(comm_rank),
    TS_FIELD(nranks), TS_FIELD(aux),
};
#undef TS_FIELD
constexpr size_t kFieldCount = sizeof(kFields) / sizeof(kFields[0]);
static_assert(kFieldCount == 17 && kMaxFingerprintBytes >= 3 + kFieldCount * 10);

uint64_t zigzag(uint64_t difference) {
  return (difference << 1) ^ static_cast<uint64_t>(static_cast<int64_t>(difference) >> 63);
}
uint64_t unzigzag(uint64_t coded) { return (coded >> 1) ^ (0 - (coded & 1)); }

uint8_t* put_varint(uint8_t* at, uint64_t value) {
  while (value >= 0x80) {
    *at++ = static_cast<uint8_t>(value | 0x80);
    value >>= 7;
  }
  *at++ = static_cast<uint8_t>(value);
  return at;
}

// A varint of at most 10 bytes whose last byte is not a zero continuation (one encoding per value).
bool get_varint(std::span<const uint8_t> bytes, size_t* at, uint64_t* value) {
  uint64_t result = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (*at >= bytes.size()) return false;
    const uint8_t byte = bytes[(*at)++];
    if (shift == 63 && byte > 1) return false;  // bits beyond 64
    result |= static_cast<uint64_t>(byte & 0x7f) << shift;
    if ((byte & 0x80) == 0) {
      if (byte == 0 && shift != 0) return false;  // overlong
      *value = result;
      return true;
    }
  }
  return false;
}

// The ranges the coordinator relies on ("" when every field is in its range).
std::string out_of_range(const Fingerprint& f) {
  const auto say = [](const char* field, int64_t value, int64_t low, int64_t high) {
    return std::string(field) + " " + std::to_string(value) + " out of range [" + std::to_string(low) + ", " +
           std::to_string(high) + "]";
  };
  if (f.comm_rank < -1 || f.comm_rank > kMaxRanks - 1) return say("comm_rank", f.comm_rank, -1, kMaxRanks - 1);
  if (f.nranks < -1 || f.nranks > kMaxRanks) return say("nranks", f.nranks, -1, kMaxRanks);
  constexpr auto kOps = static_cast<int64_t>(recorder::Op::kCount);
  if (f.op >= kOps) return say("op", f.op, 0, kOps - 1);
  constexpr auto kFirstKind = static_cast<int64_t>(EventKind::kCall);
  constexpr auto kLastKind = static_cast<int64_t>(EventKind::kCommCreating);
  if (f.kind < kFirstKind || f.kind > kLastKind) return say("kind", f.kind, kFirstKind, kLastKind);
  return "";
}

}  // namespace

void encode_fingerprints(std::span<const Fingerprint> fingerprints, std::vector<uint8_t>& out) {
  size_t used = out.size();
  out.resize(used + fingerprints.size() * kMaxFingerprintBytes);
  Fingerprint previous{};
  for (const Fingerprint& f : fingerprints) {
    uint64_t differences[kFieldCount];
    uint32_t mask = 0;
    for (size_t i = 0; i < kFieldCount; ++i) {
      differences[i] = kFields[i].get(f) - kFields[i].get(previous);
      if (differences[i] != 0) mask |= 1u << i;
    }
    uint8_t* at = put_varint(out.data() + used, mask);
    for (size_t i = 0; i < kFieldCount; ++i) {
      if ((mask >> i) & 1u) at = put_varint(at, zigzag(differences[i]));
    }
    used = static_cast<size_t>(at - out.data());
    previous = f;
  }
  out.resize(used);
}

size_t decode_fingerprints(std::span<const uint8_t> bytes, std::span<Fingerprint> out, std::string* error) {
  size_t at = 0;
  Fingerprint previous{};
  for (size_t n = 0; n < out.size(); ++n) {
    const auto fail = [&](const std::string& why) {
      *error = "fingerprint " + std::to_string(n) + ": " + why;
      return size_t{0};
    };
    uint64_t mask = 0;
    if (!get_varint(bytes, &at, &mask)) return fail("truncated or overlong field mask");
    if (mask >> kFieldCount) return fail("unknown fields in the mask " + std::to_string(mask));
    Fingerprint f = previous;
    for (size_t i = 0; i < kFieldCount; ++i) {
      if (((mask >> i) & 1u) == 0) continue;
      uint64_t coded = 0;
      if (!get_varint(bytes, &at, &coded)) return fail(std::string("truncated or overlong ") + kFields[i].name);
      if (coded == 0) return fail(std::string(kFields[i].name) + " is in the mask but unchanged");
      if (!kFields[i].set(f, kFields[i].get(previous) + unzigzag(coded)))
        return fail(std::string(kFields[i].name) + " does not fit its type");
    }
    if (const std::string range = out_of_range(f); !range.empty()) return fail(range);
    out[n] = f;
    previous = f;
  }
  return at;
}

}  // namespace trainscope::exchange
