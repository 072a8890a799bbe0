#include "bootstrap/auth_server.hpp"

#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "base/logging.hpp"
#include "bootstrap/handshake.hpp"
#include "bootstrap/limits.hpp"
#include "bootstrap/wire.hpp"

namespace meshcomm::bootstrap {

namespace {

std::string describe(const net::IoStatus& s) {
  if (s.result == net::IoResult::Closed) {
    return s.err ? detail::concat("peer closed the connection (", std::strerror(s.err), ")")
                 : "peer closed the connection";
  }
  if (s.err == EPROTO) return "peer sent data it was not asked for";
  return std::strerror(s.err);
}

}  // namespace

AuthServer::AuthServer(net::Fd listenFd, const Secret& secret, int acceptorRank, double handshakeTimeoutSec,
                       const std::string& name, Handler& handler)
    : listenFd_(std::move(listenFd)),
      address_(net::localAddress(listenFd_.get())),
      secret_(secret),
      acceptorRank_(acceptorRank),
      handshakeTimeoutSec_(handshakeTimeoutSec),
      who_(name + " at " + address_.toString()),
      handler_(handler) {}

bool AuthServer::serveOnce(int stopFd, const net::Deadline* wake) {
  std::vector<pollfd> fds;
  fds.push_back({stopFd, POLLIN, 0});  // poll() ignores negative fds
  bool acceptPaused = acceptPausedUntil_ && !acceptPausedUntil_->expired();
  bool listen = accepting_ && !acceptPaused;
  fds.push_back({listen ? listenFd_.get() : -1, POLLIN, 0});
  for (const auto& c : conns_) {
    // A closing connection reads nothing more; errors and hang-ups are reported without asking.
    short events = c->closeWhenFlushed ? static_cast<short>(POLLOUT) : c->io.pollEvents();
    fds.push_back({c->io.fd(), events, 0});
  }

  int rc = ::poll(fds.data(), fds.size(), pollTimeoutMs(wake));
  if (rc < 0 && errno != EINTR) detail::throwSystemError(errno, who_ + ": poll()");
  if (fds[0].revents) return false;
  if (rc > 0) {
    // Connections accepted below are appended after the ones polled, so indices stay aligned.
    size_t polled = fds.size() - 2;
    for (size_t i = 0; i < polled; ++i) {
      if (fds[i + 2].revents) serve(*conns_[i], fds[i + 2].revents);
    }
    if (fds[1].revents) acceptPending();
  }
  expireHandshakes();
  conns_.erase(std::remove_if(conns_.begin(), conns_.end(), [](const auto& c) { return c->removed; }),
               conns_.end());
  return true;
}

void AuthServer::flushWithoutWaiting() {
  for (auto& c : conns_) {
    if (!c->removed) (void)c->io.pumpOutput();  // giving up anyway: a failure changes nothing
  }
}

void AuthServer::acceptPending() {
  // Bounded, so that a flood of connections cannot keep this loop from serving the ones it holds.
  for (size_t accepted = 0; accepted < kMaxPendingHandshakes; ++accepted) {
    net::SockAddr remote;
    int err = 0;
    net::Fd fd = net::acceptConnection(listenFd_.get(), &remote, &err);
    if (!fd.valid()) {
      if (err == ECONNABORTED) continue;  // that client gave up before we accepted it
      if (err != 0) {
        // EMFILE and the like: the connection stays in the backlog. Pause accepting for a moment rather than
        // spin on a listen socket that stays readable.
        MESHCOMM_LOG(WARN, who_, ": accept() failed: ", std::strerror(err), "; retrying in 100 ms");
        acceptPausedUntil_ = net::Deadline::after(0.1);
      }
      return;
    }
    if (pendingHandshakes() >= kMaxPendingHandshakes) dropOldestPending();
    auto c = std::make_unique<Conn>(std::move(fd), remote, net::Deadline::after(handshakeTimeoutSec_));
    c->nonce = sendChallenge(c->io);
    conns_.push_back(std::move(c));
    net::IoStatus s = conns_.back()->io.pumpOutput();
    if (!s.ok()) fail(*conns_.back(), describe(s));
  }
}

void AuthServer::dropOldestPending() {
  // conns_ is in accept order.
  auto oldest = std::find_if(conns_.begin(), conns_.end(),
                             [](const auto& c) { return !c->authenticated && !c->removed; });
  if (oldest == conns_.end()) return;
  MESHCOMM_LOG(WARN, who_, ": dropping connection from ", (*oldest)->io.remote().toString(),
               ": not authenticated yet, and ", kMaxPendingHandshakes,
               " unauthenticated connections are pending (the oldest makes room for a new one)");
  (*oldest)->removed = true;
}

void AuthServer::serve(Conn& c, short revents) {
  if (c.removed) return;
  net::IoStatus s;
  if (revents & POLLOUT) s = c.io.pumpOutput();
  // Read every complete message available now; handlers re-arm the next expected input.
  while (s.ok() && (revents & (POLLIN | POLLERR | POLLHUP)) && !c.removed && !c.closeWhenFlushed) {
    s = c.io.pumpInput();
    if (!s.ok() || !c.io.inputComplete()) break;
    advance(c);
  }
  if (s.ok() && !c.removed) s = c.io.pumpOutput();  // what the handlers just queued
  if (!s.ok()) {
    fail(c, describe(s));
  } else if (c.closeWhenFlushed && !c.io.outputPending()) {
    c.removed = true;
  }
}

void AuthServer::advance(Conn& c) {
  if (c.authenticated) {
    handler_.onInput(c);
    return;
  }
  std::optional<int> rank = checkProofAndAnswer(c.io, c.io.takeInput(), secret_, c.nonce, acceptorRank_);
  if (!rank) {
    MESHCOMM_LOG(WARN, who_, ": dropping connection from ", c.io.remote().toString(),
                 ": failed authentication (wrong secret, or not a meshcomm rank)");
    c.removed = true;
    return;
  }
  c.authenticated = true;
  c.rank = *rank;
  handler_.onAuthenticated(c);
}

void AuthServer::fail(Conn& c, const std::string& why) {
  if (c.removed) return;
  if (c.authenticated) {
    handler_.onClosed(c, why);
  } else {
    MESHCOMM_LOG(WARN, who_, ": dropping connection from ", c.io.remote().toString(),
                 " during authentication: ", why);
  }
  c.removed = true;
}

void AuthServer::expireHandshakes() {
  for (auto& c : conns_) {
    if (!c->authenticated && !c->removed && c->handshakeDeadline.expired()) {
      MESHCOMM_LOG(WARN, who_, ": dropping connection from ", c->io.remote().toString(),
                   ": no authentication within ", net::formatSeconds(handshakeTimeoutSec_));
      c->removed = true;
    }
  }
}

size_t AuthServer::pendingHandshakes() const {
  return static_cast<size_t>(std::count_if(conns_.begin(), conns_.end(),
                                           [](const auto& c) { return !c->authenticated && !c->removed; }));
}

int AuthServer::pollTimeoutMs(const net::Deadline* wake) const {
  int ms = wake ? wake->pollTimeoutMs() : -1;
  if (acceptPausedUntil_ && !acceptPausedUntil_->expired()) {
    int left = acceptPausedUntil_->pollTimeoutMs();
    ms = ms < 0 ? left : std::min(ms, left);
  }
  for (const auto& c : conns_) {
    if (c->authenticated || c->removed) continue;
    int left = c->handshakeDeadline.pollTimeoutMs();
    ms = ms < 0 ? left : std::min(ms, left);
  }
  return ms;
}

}  // namespace meshcomm::bootstrap
