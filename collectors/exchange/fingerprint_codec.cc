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

template <auto... Members>
struct FieldList {
  static constexpr size_t kCount = sizeof...(Members);
  static void widen_all(const Fingerprint& f, uint64_t* out) {
    size_t i = 0;
    ((out[i++] = widen<Members>(f)), ...);
  }
  // Stores every value into its field; returns the index of the first that does not fit its type, or -1.
  static int narrow_all(const uint64_t* values, Fingerprint& f) {
    int bad = -1;
    int i = 0;
    ((!narrow<Members>(f, values[i]) && bad < 0 ? (void)(bad = i) : (void)0, ++i), ...);
    return bad;
  }
};

// The fields in mask order: those that change from call to call first, so that the common masks fit one or two
// bytes. Members as template arguments, so that the coding loops unroll over them (a table of function pointers
// made the encoder the client thread's largest cost).
using Fields = FieldList<&Fingerprint::seq, &Fingerprint::record_index, &Fingerprint::start_ns, &Fingerprint::op,
                         &Fingerprint::count, &Fingerprint::caller, &Fingerprint::stack_id, &Fingerprint::peer,
                         &Fingerprint::redop, &Fingerprint::flags, &Fingerprint::dtype, &Fingerprint::comm_id,
                         &Fingerprint::result, &Fingerprint::kind, &Fingerprint::comm_rank, &Fingerprint::nranks,
                         &Fingerprint::aux>;
constexpr const char* kFieldNames[] = {"seq",      "record_index", "start_ns",  "op",     "count", "caller",
                                       "stack_id", "peer",         "redop",     "flags",  "dtype", "comm_id",
                                       "result",   "kind",         "comm_rank", "nranks", "aux"};
constexpr size_t kFieldCount = Fields::kCount;
static_assert(kFieldCount == sizeof(kFieldNames) / sizeof(kFieldNames[0]));
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
  if (*at < bytes.size() && bytes[*at] < 0x80) {  // most values: one byte
    *value = bytes[(*at)++];
    return true;
  }
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
  uint64_t previous[kFieldCount] = {};
  for (const Fingerprint& f : fingerprints) {
    uint64_t values[kFieldCount];
    Fields::widen_all(f, values);
    uint64_t differences[kFieldCount];
    uint32_t mask = 0;
    for (size_t i = 0; i < kFieldCount; ++i) {
      differences[i] = values[i] - previous[i];
      if (differences[i] != 0) mask |= 1u << i;
      previous[i] = values[i];
    }
    uint8_t* at = put_varint(out.data() + used, mask);
    for (size_t i = 0; i < kFieldCount; ++i) {
      if ((mask >> i) & 1u) at = put_varint(at, zigzag(differences[i]));
    }
    used = static_cast<size_t>(at - out.data());
  }
  out.resize(used);
}

size_t decode_fingerprints(std::span<const uint8_t> bytes, std::span<Fingerprint> out, std::string* error) {
  size_t at = 0;
  uint64_t values[kFieldCount] = {};  // the previous fingerprint's, widened
  for (size_t n = 0; n < out.size(); ++n) {
    const auto fail = [&](const std::string& why) {
      *error = "fingerprint " + std::to_string(n) + ": " + why;
      return size_t{0};
    };
    uint64_t mask = 0;
    if (!get_varint(bytes, &at, &mask)) return fail("truncated or overlong field mask");
    if (mask >> kFieldCount) return fail("unknown fields in the mask " + std::to_string(mask));
    for (uint64_t fields = mask; fields != 0; fields &= fields - 1) {
      const auto i = static_cast<size_t>(__builtin_ctzll(fields));
      uint64_t coded = 0;
      if (!get_varint(bytes, &at, &coded)) return fail(std::string("truncated or overlong ") + kFieldNames[i]);
      if (coded == 0) return fail(std::string(kFieldNames[i]) + " is in the mask but unchanged");
      values[i] += unzigzag(coded);
    }
    Fingerprint f{};
    if (const int bad = Fields::narrow_all(values, f); bad >= 0)
      return fail(std::string(kFieldNames[bad]) + " does not fit its type");
    if (const std::string range = out_of_range(f); !range.empty()) return fail(range);
    out[n] = f;
  }
  return at;
}

}  // namespace trainscope::exchange
