// The job's shared secret and the keys derived from it, so that only the job's own ranks feed its coordinator and a
// rank knows it reached its own job's coordinator (not whatever program listens on the port).
//
// The transport is ZeroMQ's CURVE (CurveZMQ: Curve25519 key agreement, authenticated encryption, forward secrecy).
// The coordinator's key pair is derived from the secret, so every rank that knows the secret knows the coordinator's
// public key and nobody else can complete a handshake as the coordinator; a rank's own key pair is fresh per
// connection, and the rank then proves it knows the secret by presenting it, encrypted, in its hello. Anyone without
// the secret cannot connect (CURVE needs the server's public key), cannot read fingerprints or stacks on the wire,
// and cannot pose as the coordinator.
//
// Where the secret comes from: TRAINSCOPE_TOKEN (`trainscope run` sets a random one), else the job key: the bytes of
// the ncclUniqueId of the first communicator that spans every rank of the launcher. NCCL fills a unique id with a
// random 64-bit magic number and the root's address, and the job hands it to its ranks over its own rendezvous; an
// outsider never sees it unless it can read the job's rendezvous store, which already lets it wreck the job.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include <zmq.h>

namespace trainscope::exchange {

struct CurveKeyPair {
  std::array<uint8_t, 32> public_key{};
  std::array<uint8_t, 32> secret_key{};
};

// The coordinator's key pair for the job whose secret is `token` (deterministic: every rank computes the same).
CurveKeyPair coordinator_key_pair(std::string_view token);

// The socket-monitor events of a CURVE handshake that failed: the other side does not hold the job's key.
inline constexpr int kHandshakeFailedEvents =
    ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH;

// A fresh random key pair for one rank's connection.
CurveKeyPair fresh_key_pair();

// `bytes` random bytes from the system's randomness source, as hex digits (a job token, a run id's suffix). Throws
// std::runtime_error when there is none: a token of zeros would be one anyone can compute.
std::string random_hex(size_t bytes);

// The token the ranks of a job share when TRAINSCOPE_TOKEN is not set: 64 hex digits derived from the job key.
std::string token_from_job_key(std::span<const uint8_t> job_key);

}  // namespace trainscope::exchange
