#include "bootstrap/root.hpp"

#include <memory>

#include "base/logging.hpp"
#include "bootstrap/limits.hpp"

namespace meshcomm::bootstrap {

namespace {

std::vector<uint8_t> errorReply(const std::string& text) {
  std::string t = text.substr(0, kMaxReplyText);
  return WireWriter().u32(kReplyError).u32(static_cast<uint32_t>(t.size())).bytes(t.data(), t.size()).data();
}

// The thread body: a root must never let an exception escape its thread (that would terminate the process).
void runRoot(RendezvousRoot& root, int stopFd) {
  try {
    root.run(stopFd);
  } catch (const std::exception& e) {
    MESHCOMM_LOG(ERROR, "bootstrap root stopped: ", e.what());
  }
}

}  // namespace

RendezvousRoot::RendezvousRoot(net::Fd listenFd, int nRanks, const Secret& secret, double timeoutSec)
    : nRanks_(nRanks),
      timeoutSec_(timeoutSec),
      server_(std::move(listenFd), secret, kRootRank, handshakeTimeout(timeoutSec), "bootstrap root", *this),
      joined_(nRanks),
      joinedFrom_(nRanks) {}

void RendezvousRoot::run(int stopFd) {
  net::Deadline deadline = net::Deadline::after(timeoutSec_);
  while (!(tablesSent_ && server_.connections().empty())) {
    if (deadline.expired()) {
      if (!tablesSent_) failJoined();
      return;
    }
    if (!server_.serveOnce(stopFd, &deadline)) return;
    if (!tablesSent_ && nRanks_ > 0 && nJoined_ == nRanks_) sendTables();
  }
}

void RendezvousRoot::onAuthenticated(AuthServer::Conn& c) {
  c.stage = kAwaitHello;
  c.io.expectInput(kHelloBytes);
}

void RendezvousRoot::onInput(AuthServer::Conn& c) {
  const Hello hello = decodeHello(c.io.takeInput(), "bootstrap root");  // expectInput(kHelloBytes): whole
  const int helloRanks = hello.nRanks;
  const std::optional<Endpoint>& endpoint = hello.endpoint;
  std::string problem = checkHello(c, helloRanks, endpoint);
  if (!problem.empty()) {
    reject(c, problem);
    return;
  }
  if (nRanks_ == 0) {  // the id did not fix the size: the first valid rank does
    nRanks_ = helloRanks;
    joined_.resize(static_cast<size_t>(nRanks_));
    joinedFrom_.resize(static_cast<size_t>(nRanks_));
  }
  c.stage = kJoined;
  joined_[c.rank] = endpoint;
  joinedFrom_[c.rank] = c.io.remote().toString();
  ++nJoined_;
}

std::string RendezvousRoot::checkHello(const AuthServer::Conn& c, int helloRanks,
                                       const std::optional<Endpoint>& endpoint) const {
  if (nRanks_ == 0 && (helloRanks < 1 || helloRanks > kMaxRanks)) {
    return detail::concat("rank ", c.rank, " was started with nRanks=", helloRanks, " (must be in 1..",
                          kMaxRanks, ")");
  }
  if (nRanks_ != 0 && helloRanks != nRanks_) {
    return detail::concat("rank ", c.rank, " was started with nRanks=", helloRanks, " but this job has ",
                          nRanks_, " ranks");
  }
  if (c.rank < 0 || c.rank >= helloRanks)
    return detail::concat("rank ", c.rank, " is out of range for nRanks=", helloRanks);
  if (tablesSent_) return detail::concat("rank ", c.rank, " arrived after the rendezvous completed");
  if (nRanks_ != 0 && joined_[c.rank])  // (nRanks_ 0: nobody has joined yet)
    return detail::concat("rank ", c.rank, " already joined from ", joinedFrom_[c.rank]);
  if (!endpoint) return detail::concat("rank ", c.rank, " sent an invalid listen address");
  return "";
}

void RendezvousRoot::reject(AuthServer::Conn& c, const std::string& problem) {
  MESHCOMM_LOG(WARN, server_.who(), ": rejecting ", c.io.remote().toString(), ": ", problem);
  c.io.queueOutput(errorReply(server_.who() + ": " + problem));
  c.stage = kReplied;
  server_.closeAfterFlush(c);
}

void RendezvousRoot::onClosed(AuthServer::Conn& c, const std::string& why) {
  if (c.stage == kJoined && !tablesSent_) {
    // Its slot frees up: the rank may still come back (and the others keep waiting for it).
    MESHCOMM_LOG(WARN, server_.who(), ": rank ", c.rank, " (", c.io.remote().toString(),
                 ") left before the rendezvous completed: ", why);
    joined_[c.rank].reset();
    --nJoined_;
  } else if (c.stage == kAwaitHello) {
    MESHCOMM_LOG(WARN, server_.who(), ": rank ", c.rank, " (", c.io.remote().toString(),
                 ") closed its connection before sending its endpoint: ", why);
  } else if (c.stage == kReplied && tablesSent_ && c.io.outputPending()) {
    MESHCOMM_LOG(WARN, server_.who(), ": could not send the rank table to rank ", c.rank, ": ", why);
  }
}

void RendezvousRoot::replyToJoined(const std::vector<uint8_t>& reply) {
  for (auto& c : server_.connections()) {
    if (c->removed || c->stage != kJoined) continue;
    c->io.queueOutput(reply);
    c->stage = kReplied;
    server_.closeAfterFlush(*c);
  }
}

void RendezvousRoot::sendTables() {
  WireWriter table;
  table.u32(kReplyTable).u32(static_cast<uint32_t>(nRanks_));
  for (const auto& e : joined_) writeEndpoint(table, *e);
  tablesSent_ = true;
  server_.setAccepting(false);
  replyToJoined(table.data());
}

void RendezvousRoot::failJoined() {
  if (nJoined_ == 0) {
    // An id that was created and never used (nccl-tests creates one before ncclCommInitAll makes its own):
    // nobody waits on it.
    MESHCOMM_LOG(INFO, server_.who(), ": closing after ", net::formatSeconds(timeoutSec_),
                 ": no rank joined");
    return;
  }
  std::string missing;
  int nMissing = 0;
  for (int r = 0; r < nRanks_; ++r) {
    if (joined_[r]) continue;
    if (++nMissing <= 16) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
  }
  if (nMissing > 16) missing += ", ...";
  std::string text =
      detail::concat(server_.who(), ": timed out after ", net::formatSeconds(timeoutSec_),
                     " waiting for ranks (", nJoined_, " of ", nRanks_, " joined; missing ", missing, ")");
  MESHCOMM_LOG(WARN, text);
  replyToJoined(errorReply(text));
  server_.flushWithoutWaiting();
}

void startDetachedRoot(net::Fd listenFd, int nRanks, const Secret& secret, double timeoutSec) {
  auto root = std::make_shared<RendezvousRoot>(std::move(listenFd), nRanks, secret, timeoutSec);
  std::thread([root] { runRoot(*root, -1); }).detach();
}

RootThread::RootThread(net::Fd listenFd, int nRanks, const Secret& secret, double timeoutSec)
    : stopFd_(net::makeEventFd()) {
  auto root = std::make_shared<RendezvousRoot>(std::move(listenFd), nRanks, secret, timeoutSec);
  thread_ = std::thread([root, stopFd = stopFd_.get()] { runRoot(*root, stopFd); });
}

RootThread::~RootThread() {
  net::signalEventFd(stopFd_.get());
  thread_.join();
}

}  // namespace meshcomm::bootstrap
