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

// Messages received from peers, per (peer, tag) in arrival order, and the peers that have gone away.
class Mailbox {
 public:
  explicit Mailbox(int nRanks) : gone_(nRanks) {}

  void deliver(int peer, int tag, std::vector<uint8_t> payload);
  // The peer's connection ended; waiters on it wake up. Messages it sent before remain receivable.
  void markGone(int peer, const std::string& reason);

  enum class Outcome { Message, PeerGone, TimedOut };
  // Waits for the oldest message from (peer, tag) until the deadline. On PeerGone, *reason says why.
  Outcome take(int peer, int tag, const net::Deadline& deadline, std::vector<uint8_t>* payload,
               std::string* reason);

 private:
  std::mutex mu_;
  std::condition_variable arrived_;
  std::map<std::pair<int, int>, std::deque<std::vector<uint8_t>>> queues_;
  std::vector<std::string> gone_;  // by peer: empty while connected or not yet connected
};

class PeerReceiver : private AuthServer::Handler {
 public:
  // Serves `listenFd` on a new thread until destruction. Messages longer than `maxMessage` bytes close the
  // sender's connection (the peer is then reported gone).
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
