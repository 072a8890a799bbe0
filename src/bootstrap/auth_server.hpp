// The accepting side of bootstrap connections, shared by the rendezvous root and each rank's peer listener:
// a poll loop that accepts connections, authenticates each one (handshake.hpp) within a deadline, and hands
// the authenticated ones to its owner. One thread serves every connection, so a silent or hostile client
// delays nobody. At most kMaxPendingHandshakes unauthenticated connections are held: a new one closes the
// oldest, so idle connections cannot keep honest ones in the listen backlog. Connections that fail or do not
// finish authentication within the handshake deadline are logged (WARN, with their address) and closed before
// they can deliver a byte to the owner.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bootstrap/socket.hpp"
#include "bootstrap/unique_id.hpp"

namespace meshcomm::bootstrap {

class AuthServer {
 public:
  struct Conn {
    Conn(net::Fd fd, net::SockAddr remote, net::Deadline handshakeDeadline)
        : io(std::move(fd), remote), handshakeDeadline(handshakeDeadline) {}
    net::PolledConn io;
    net::Deadline handshakeDeadline;
    uint64_t nonce = 0;
    bool authenticated = false;
    int rank = -1;  // proven by the handshake once authenticated
    int stage = 0;  // the owner's protocol state
    bool closeWhenFlushed = false;
    bool removed = false;
  };

  class Handler {
   public:
    virtual ~Handler() = default;
    // `c` proved rank c.rank: the owner expects its first message, or closes it.
    virtual void onAuthenticated(Conn& c) = 0;
    // The input that an authenticated connection expected is complete (take it with c.io.takeInput()).
    virtual void onInput(Conn& c) = 0;
    // An authenticated connection closed or failed (`why`); it is removed after this call.
    virtual void onClosed(Conn& c, const std::string& why) = 0;
  };

  // `name` and the listen address prefix log lines ("bootstrap root at 10.0.0.1:29501"); `acceptorRank` is
  // the rank this side proves itself as (kRootRank for the root); `handshakeTimeoutSec` is the time each
  // accepted connection has to authenticate.
  AuthServer(net::Fd listenFd, const Secret& secret, int acceptorRank, double handshakeTimeoutSec,
             const std::string& name, Handler& handler);

  const net::SockAddr& address() const { return address_; }
  const std::string& who() const { return who_; }
  // Whether new connections are accepted (they wait in the listen backlog meanwhile).
  void setAccepting(bool accepting) { accepting_ = accepting; }
  std::vector<std::unique_ptr<Conn>>& connections() { return conns_; }

  // Waits until there is activity, `wake` passes (null: no limit) or `stopFd` (>= 0) becomes readable, and
  // serves what is ready. Returns false once stopFd is readable.
  bool serveOnce(int stopFd, const net::Deadline* wake);
  // Closes `c` once its queued output is sent (at once if none is pending).
  void closeAfterFlush(Conn& c) { c.closeWhenFlushed = true; }
  // Closes `c` now, without a callback.
  void drop(Conn& c) { c.removed = true; }
  // Writes whatever queued output the sockets take right now (best effort, e.g. before giving up).
  void flushWithoutWaiting();

 private:
  void acceptPending();
  void dropOldestPending();
  void serve(Conn& c, short revents);
  void advance(Conn& c);
  void fail(Conn& c, const std::string& why);
  void expireHandshakes();
  size_t pendingHandshakes() const;
  int pollTimeoutMs(const net::Deadline* wake) const;

  net::Fd listenFd_;
  net::SockAddr address_;
  Secret secret_;
  int acceptorRank_;
  double handshakeTimeoutSec_;
  std::string who_;
  Handler& handler_;
  bool accepting_ = true;
  std::optional<net::Deadline> acceptPausedUntil_;  // after a failing accept()
  std::vector<std::unique_ptr<Conn>> conns_;
};

}  // namespace meshcomm::bootstrap
