// Key derivation for the exchange (see job_secret.h), on libsodium: ZeroMQ's CURVE is built on it, so it is in the
// process already, and it gives keyed BLAKE2b and Curve25519 without any crypto of our own.
#include "collectors/exchange/job_secret.h"

#include <sodium.h>

#include <cstdio>
#include <stdexcept>
#include <vector>

namespace trainscope::exchange {

namespace {

void ensure_sodium() {
  // Idempotent and thread-safe; it only fails when the system has no randomness source.
  if (sodium_init() < 0) throw std::runtime_error("libsodium cannot initialise (no randomness source)");
}

// BLAKE2b-256 of `message`, keyed with a label: one secret gives independent values for independent uses.
std::array<uint8_t, 32> derive(std::string_view label, std::span<const uint8_t> message) {
  std::array<uint8_t, 32> out{};
  crypto_generichash(out.data(), out.size(), message.data(), message.size(),
                     reinterpret_cast<const unsigned char*>(label.data()), label.size());
  return out;
}

std::string hex_of(std::span<const uint8_t> bytes) {
  std::string hex;
  hex.reserve(bytes.size() * 2);
  for (const uint8_t byte : bytes) {
    char two[3];
    std::snprintf(two, sizeof(two), "%02x", byte);
    hex += two;
  }
  return hex;
}

}  // namespace

CurveKeyPair coordinator_key_pair(std::string_view token) {
  ensure_sodium();
  CurveKeyPair pair;
  pair.secret_key = derive("trainscope coordinator key v1",
                           std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(token.data()), token.size()));
  crypto_scalarmult_base(pair.public_key.data(), pair.secret_key.data());
  return pair;
}

CurveKeyPair fresh_key_pair() {
  ensure_sodium();
  CurveKeyPair pair;
  crypto_box_keypair(pair.public_key.data(), pair.secret_key.data());
  return pair;
}

std::string token_from_job_key(std::span<const uint8_t> job_key) {
  return hex_of(derive("trainscope job token v1", job_key));
}

std::string random_hex(size_t bytes) {
  if (bytes == 0) return "";  // randombytes_buf's buffer must not be null, and an empty vector's may be
  ensure_sodium();            // after it, randombytes_buf cannot fail (libsodium aborts rather than return weak bytes)
  std::vector<uint8_t> buffer(bytes);
  randombytes_buf(buffer.data(), buffer.size());
  return hex_of(buffer);
}

}  // namespace trainscope::exchange
