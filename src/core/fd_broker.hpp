// The per-process fd broker: hands file descriptors of exported cuMem allocations to other processes of
// the same user on this host. POSIX fds never travel through the bootstrap (TCP cannot carry them): the
// exporter publishes the fd here under a fresh export id, sends (broker name, export id) in the memory
// descriptor, and the importer fetches the fd from the broker over a unix socket with SCM_RIGHTS.
//
// The server is a unix SOCK_SEQPACKET socket in the abstract namespace (no file, nothing to clean up) named
// "meshcomm-fdb-<uid>-<pid>-<64-bit random hex>"; it serves every request from one thread and drops
// connections whose SO_PEERCRED uid is not ours. Export ids come from a counter and are never reused, so a
// recycled fd number can never hand out the wrong memory. One broker per process (libmeshcomm singleton),
// started on first use, stopped and joined at exit.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace meshcomm {

class FdBroker {
 public:
  // Longest broker name (without the leading NUL of the abstract namespace).
  static constexpr size_t kMaxNameLength = 63;

  // The process-wide broker (the server starts on the first call of name() or publish()).
  static FdBroker& instance();

  // This process's broker name; starts the server if needed. Throws SystemError if it cannot start.
  std::string name();
  // Stores a duplicate of `fd` (the caller keeps and closes its own) under a fresh export id (> 0).
  uint64_t publish(int fd);
  // Closes the stored duplicate; later fetches of the id fail with "not found". Unknown ids are ignored.
  void withdraw(uint64_t exportId) noexcept;
  // Number of fds currently published (for tests and leak checks).
  size_t publishedCount() const;

  // Client side: connects to the broker `brokerName` (as name() returned it in the owner process), asks
  // for `exportId` and returns a new fd (close-on-exec) the caller owns, within `timeoutSec` (< 0:
  // defaultTimeoutSec(); a fetch is always bounded). Errors: RemoteError naming broker and id when the
  // broker is unreachable, refuses or does not know the id ("export id N not found (the owner released
  // it)"); Timeout when it does not answer in time.
  static int fetch(const std::string& brokerName, uint64_t exportId, double timeoutSec);
  // MESHCOMM_BOOTSTRAP_TIMEOUT seconds, or 120 when it is not positive (the bootstrap refuses such values; a
  // fetch stays bounded).
  static double defaultTimeoutSec();

  // Stops the server and closes every stored fd (called at process exit; idempotent; no-op in a forked
  // child). Later publish() calls throw; withdraw() calls do nothing.
  void shutdown() noexcept;

  class Impl;

 private:
  FdBroker();
  ~FdBroker() = delete;  // the singleton is intentionally never destroyed (see instance())
  Impl* impl_;
};

}  // namespace meshcomm
