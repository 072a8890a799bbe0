// The receiving half of bootstrap point-to-point messages: each rank's background thread accepts one
// authenticated connection per sending peer and files the framed messages it reads into a Mailbox, by
// (peer, tag), in arrival order. recv() takes them from the Mailbox.
#pragma once

#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "bootstrap/auth_server.hpp"

namespace meshcomm::bootstrap {

// Messages received from peers, per (peer, tag) in arrival order, the peers that have gone away, and why the
// receiver stopped (if it did). What one peer may have waiting unreceived is bounded (limits.hpp).
class Mailbox {
 public:
  Mailbox(int nRanks, uint64_t maxQueuedBytes) : maxQueuedBytes_(maxQueuedBytes), peers_(nRanks) {}

  // Files the message, or returns why not (the peer's unreceived messages would exceed their bound).
  std::string deliver(int peer, int tag, std::vector<uint8_t> payload);
  // The peer's connection ended; waiters on it wake up. Messages it sent before remain receivable.
  void markGone(int peer, const std::string& reason);
  // The receiver stopped: every waiter wakes up and every later take() fails with `reason`.
  void markReceiverStopped(const std::string& reason);
  // Why the receiver stopped; empty while it runs.
  std::string receiverStopped();

  enum class Outcome { Message, PeerGone, ReceiverStopped, TimedOut };
  // Waits for the oldest message from (peer, tag) until the deadline. On PeerGone and ReceiverStopped,
  // *reason says why.
  Outcome take(int peer, int tag, const net::Deadline& deadline, std::vector<uint8_t>* payload,
               std::string* reason);

 private:
  struct PeerState {
    std::string gone;  // empty while connected or not yet connected
    size_t queuedMessages = 0;
    uint64_t queuedBytes = 0;
  };
  std::string checkRoom(const PeerState& p, size_t bytes) const;

  const uint64_t maxQueuedBytes_;
  std::mutex mu_;
  std::condition_variable arrived_;
  std::map<std::pair<int, int>, std::deque<std::vector<uint8_t>>> queues_;
  std::vector<PeerState> peers_;  // by peer
  std::string receiverStopped_;
};

class PeerReceiver : private AuthServer::Handler {
 public:
  // Serves `listenFd` on a new thread until destruction. Messages longer than `maxMessage` bytes, and
  // messages the mailbox has no room for, close the sender's connection (the peer is then reported gone).
  // Should the thread fail, the mailbox is told why.
  PeerReceiver(net::Fd listenFd, int myRank, int nRanks, const Secret& secret, double handshakeTimeoutSec,
               uint64_t maxMessage, Mailbox& mailbox);
  ~PeerReceiver() override;
  PeerReceiver(const PeerReceiver&) = delete;
  PeerReceiver& operator=(const PeerReceiver&) = delete;

 private:
  enum Stage { kFrameHeader, kPayload };
  void run();
  void onAuthenticated(AuthServer::Conn& c) override;
  void onInput(AuthServer::Conn& c) override;
  void onClosed(AuthServer::Conn& c, const std::string& why) override;
  void onFrameHeader(AuthServer::Conn& c);
  void deliver(AuthServer::Conn& c, int tag, std::vector<uint8_t> payload);
  void closePeer(AuthServer::Conn& c, const std::string& why);

  int myRank_;
  uint64_t maxMessage_;
  Mailbox& mailbox_;
  std::vector<bool> connected_;  // by peer: it has (had) its one data connection; touched by the thread only
  std::vector<int> pendingTag_;  // by peer: the tag of the payload being read
  net::Fd stopFd_;
  AuthServer server_;
  std::thread thread_;  // last: started once everything it uses exists
};

}  // namespace meshcomm::bootstrap
