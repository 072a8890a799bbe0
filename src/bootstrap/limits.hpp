// The bounds that keep what a peer can make a rank allocate or hold small: the job size, the deadline and
// number of unauthenticated connections, the largest message and what may wait unreceived per peer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace meshcomm::bootstrap {

// The largest nRanks a job may have (a hello announcing more is rejected before anything is sized by it).
constexpr int kMaxRanks = 1 << 16;

// Unauthenticated connections an acceptor holds at once; a new one beyond this closes the oldest.
constexpr size_t kMaxPendingHandshakes = 128;

// Seconds an accepted connection has to prove the secret, unless the bootstrap timeout is shorter.
constexpr double kHandshakeTimeoutSec = 5;
double handshakeTimeout(double bootstrapTimeoutSec);

// Messages from one peer that may wait unreceived in a rank's mailbox; their bytes may add up to
// kQueuedBytesPerMaxMessage times the largest message.
constexpr size_t kMaxQueuedMessages = 1 << 16;
constexpr uint64_t kQueuedBytesPerMaxMessage = 2;

// MESHCOMM_BOOTSTRAP_MAX_MESSAGE: a positive number of bytes. Throws Error(InvalidUsage) naming the variable
// and its value otherwise (starting with `who` when the value is an integer out of range).
uint64_t maxMessageFromEnv(const std::string& who);

// MESHCOMM_BOOTSTRAP_TIMEOUT: a positive number of seconds, else Error(InvalidUsage) likewise.
double timeoutFromEnv(const std::string& who);

}  // namespace meshcomm::bootstrap
