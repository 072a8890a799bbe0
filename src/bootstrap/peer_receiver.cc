#include "bootstrap/peer_receiver.hpp"

#include "base/logging.hpp"
#include "bootstrap/wire.hpp"

namespace meshcomm::bootstrap {

// ---- Mailbox ---------------------------------------------------------------------------------------------

void Mailbox::deliver(int peer, int tag, std::vector<uint8_t> payload) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queues_[{peer, tag}].push_back(std::move(payload));
  }
  arrived_.notify_all();
}

void Mailbox::markGone(int peer, const std::string& reason) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    gone_[peer] = reason;
  }
  arrived_.notify_all();
}

Mailbox::Outcome Mailbox::take(int peer, int tag, const net::Deadline& deadline,
                               std::vector<uint8_t>* payload, std::string* reason) {
  std::unique_lock<std::mutex> lock(mu_);
  auto key = std::make_pair(peer, tag);
  auto ready = [&] {
    auto it = queues_.find(key);
    return (it != queues_.end() && !it->second.empty()) || !gone_[peer].empty();
  };
  if (!arrived_.wait_until(lock, deadline.when(), ready)) return Outcome::TimedOut;
  auto it = queues_.find(key);
  if (it == queues_.end() || it->second.empty()) {
    *reason = gone_[peer];
    return Outcome::PeerGone;
  }
  *payload = std::move(it->second.front());
  it->second.pop_front();
  if (it->second.empty()) queues_.erase(it);
  return Outcome::Message;
}

// ---- PeerReceiver ----------------------------------------------------------------------------------------

PeerReceiver::PeerReceiver(net::Fd listenFd, int myRank, int nRanks, const Secret& secret,
                           double handshakeTimeoutSec, uint64_t maxMessage, Mailbox& mailbox)
    : myRank_(myRank),
      maxMessage_(maxMessage),
      mailbox_(mailbox),
      connected_(nRanks, false),
      pendingTag_(nRanks, 0),
      stopFd_(net::makeEventFd()),
      server_(std::move(listenFd), secret, myRank, handshakeTimeoutSec,
              detail::concat("rank ", myRank, ": bootstrap peer listener"), *this),
      thread_([this] { run(); }) {}

PeerReceiver::~PeerReceiver() {
  net::signalEventFd(stopFd_.get());
  thread_.join();
}

void PeerReceiver::run() {
  try {
    while (server_.serveOnce(stopFd_.get(), nullptr)) {
    }
  } catch (const std::exception& e) {
    // Only a failing poll() gets here; every waiting recv() then times out and names its peer.
    MESHCOMM_LOG(ERROR, server_.who(), " stopped: ", e.what());
  }
}

void PeerReceiver::onAuthenticated(AuthServer::Conn& c) {
  const char* problem = nullptr;
  if (c.rank < 0 || c.rank >= static_cast<int>(connected_.size()) || c.rank == myRank_) {
    problem = "claims a rank that cannot send to this rank";
  } else if (connected_[c.rank]) {
    problem = "opened a second data connection (only one per peer is allowed)";
  }
  if (problem) {
    MESHCOMM_LOG(WARN, server_.who(), ": dropping connection from ", c.io.remote().toString(), " (rank ",
                 c.rank, "): it ", problem);
    server_.drop(c);
    return;
  }
  connected_[c.rank] = true;
  c.stage = kFrameHeader;
  c.io.expectInput(kFrameHeaderBytes);
}

void PeerReceiver::onInput(AuthServer::Conn& c) {
  if (c.stage == kFrameHeader) {
    onFrameHeader(c);
    return;
  }
  mailbox_.deliver(c.rank, pendingTag_[c.rank], c.io.takeInput());
  c.stage = kFrameHeader;
  c.io.expectInput(kFrameHeaderBytes);
}

void PeerReceiver::onFrameHeader(AuthServer::Conn& c) {
  std::vector<uint8_t> header = c.io.takeInput();
  WireReader r(header);
  int tag = r.i32();
  uint64_t length = r.u64();
  if (length > maxMessage_) {
    std::string why = detail::concat("sent a message of ", length, " bytes (tag ", tag,
                                     "), more than MESHCOMM_BOOTSTRAP_MAX_MESSAGE=", maxMessage_,
                                     "; its connection was closed");
    MESHCOMM_LOG(WARN, server_.who(), ": rank ", c.rank, " ", why);
    mailbox_.markGone(c.rank, "peer " + why);
    server_.drop(c);
    return;
  }
  if (length == 0) {
    mailbox_.deliver(c.rank, tag, {});
    c.io.expectInput(kFrameHeaderBytes);
    return;
  }
  pendingTag_[c.rank] = tag;
  c.stage = kPayload;
  c.io.expectInput(length);
}

void PeerReceiver::onClosed(AuthServer::Conn& c, const std::string& why) {
  mailbox_.markGone(c.rank, why);
}

}  // namespace meshcomm::bootstrap
