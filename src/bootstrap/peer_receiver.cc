#include "bootstrap/peer_receiver.hpp"

#include "base/logging.hpp"
#include "bootstrap/limits.hpp"
#include "bootstrap/wire.hpp"

namespace meshcomm::bootstrap {

// ---- Mailbox ---------------------------------------------------------------------------------------------

std::string Mailbox::deliver(int peer, int tag, std::vector<uint8_t> payload) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    PeerState& p = peers_[peer];
    std::string problem = checkRoom(p, payload.size());
    if (!problem.empty()) return problem;
    ++p.queuedMessages;
    p.queuedBytes += payload.size();
    queues_[{peer, tag}].push_back(std::move(payload));
  }
  arrived_.notify_all();
  return "";
}

std::string Mailbox::checkRoom(const PeerState& p, size_t bytes) const {
  if (p.queuedMessages >= kMaxQueuedMessages || bytes > maxQueuedBytes_ - p.queuedBytes) {
    return detail::concat("sent a message of ", bytes, " bytes while ", p.queuedMessages, " messages (",
                          p.queuedBytes, " bytes) from it were not received yet; at most ",
                          kMaxQueuedMessages, " messages and ", maxQueuedBytes_, " bytes may wait per peer");
  }
  return "";
}

void Mailbox::markGone(int peer, const std::string& reason) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    peers_[peer].gone = reason;
  }
  arrived_.notify_all();
}

void Mailbox::markReceiverStopped(const std::string& reason) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    receiverStopped_ = reason;
  }
  arrived_.notify_all();
}

std::string Mailbox::receiverStopped() {
  std::lock_guard<std::mutex> lock(mu_);
  return receiverStopped_;
}

Mailbox::Outcome Mailbox::take(int peer, int tag, const net::Deadline& deadline,
                               std::vector<uint8_t>* payload, std::string* reason) {
  std::unique_lock<std::mutex> lock(mu_);
  auto key = std::make_pair(peer, tag);
  auto ready = [&] {
    auto it = queues_.find(key);
    return (it != queues_.end() && !it->second.empty()) || !peers_[peer].gone.empty() ||
           !receiverStopped_.empty();
  };
  if (!arrived_.wait_until(lock, deadline.when(), ready)) return Outcome::TimedOut;
  if (!receiverStopped_.empty()) {
    *reason = receiverStopped_;
    return Outcome::ReceiverStopped;
  }
  auto it = queues_.find(key);
  if (it == queues_.end() || it->second.empty()) {
    *reason = peers_[peer].gone;
    return Outcome::PeerGone;
  }
  *payload = std::move(it->second.front());
  it->second.pop_front();
  if (it->second.empty()) queues_.erase(it);
  PeerState& p = peers_[peer];
  --p.queuedMessages;
  p.queuedBytes -= payload->size();
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
  std::string why;
  try {
    while (server_.serveOnce(stopFd_.get(), nullptr)) {
    }
    return;
  } catch (const std::exception& e) {
    why = e.what();
  } catch (...) {
    why = "unknown exception";
  }
  std::string reason = detail::concat(server_.who(), " stopped: ", why);
  MESHCOMM_LOG(ERROR, reason);
  mailbox_.markReceiverStopped(reason);
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
  std::vector<uint8_t> payload = c.io.takeInput();
  c.stage = kFrameHeader;
  c.io.expectInput(kFrameHeaderBytes);
  deliver(c, pendingTag_[c.rank], std::move(payload));
}

void PeerReceiver::onFrameHeader(AuthServer::Conn& c) {
  const FrameHeader header = decodeFrameHeader(c.io.takeInput(), server_.who());  // expectInput: whole
  const int tag = header.tag;
  const uint64_t length = header.length;
  if (length > maxMessage_) {
    closePeer(c, detail::concat("sent a message of ", length, " bytes (tag ", tag,
                                "), more than MESHCOMM_BOOTSTRAP_MAX_MESSAGE=", maxMessage_));
    return;
  }
  if (length == 0) {
    c.io.expectInput(kFrameHeaderBytes);
    deliver(c, tag, {});
    return;
  }
  pendingTag_[c.rank] = tag;
  c.stage = kPayload;
  c.io.expectInput(length);
}

void PeerReceiver::deliver(AuthServer::Conn& c, int tag, std::vector<uint8_t> payload) {
  std::string problem = mailbox_.deliver(c.rank, tag, std::move(payload));
  if (!problem.empty()) closePeer(c, detail::concat(problem, " (tag ", tag, ")"));
}

void PeerReceiver::closePeer(AuthServer::Conn& c, const std::string& why) {
  std::string text = why + "; its connection was closed";
  MESHCOMM_LOG(WARN, server_.who(), ": rank ", c.rank, " ", text);
  mailbox_.markGone(c.rank, "peer " + text);
  server_.drop(c);
}

void PeerReceiver::onClosed(AuthServer::Conn& c, const std::string& why) {
  mailbox_.markGone(c.rank, why);
}

}  // namespace meshcomm::bootstrap
