// The rendezvous root: accepts authenticated ranks until all nRanks have sent {nRanks, listen endpoint}, then
// sends every rank the table of all endpoints and exits. nRanks 0: the first valid rank's nRanks is the
// job's (ncclGetUniqueId does not know the size; at most kMaxRanks); later ranks must agree. Connections that
// are inconsistent (rank out of range, duplicate rank, other nRanks) get an error reply and are closed; the
// root keeps waiting for honest ranks. When the timeout passes first, every joined rank gets an error that
// names the missing ranks.
#pragma once

#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "bootstrap/auth_server.hpp"
#include "bootstrap/wire.hpp"

namespace meshcomm::bootstrap {

class RendezvousRoot : private AuthServer::Handler {
 public:
  RendezvousRoot(net::Fd listenFd, int nRanks, const Secret& secret, double timeoutSec);
  // Runs until every rank has the table, the timeout passes, or `stopFd` (>= 0) becomes readable.
  void run(int stopFd);

 private:
  enum Stage { kAwaitHello, kJoined, kReplied };
  void onAuthenticated(AuthServer::Conn& c) override;
  void onInput(AuthServer::Conn& c) override;
  void onClosed(AuthServer::Conn& c, const std::string& why) override;
  std::string checkHello(const AuthServer::Conn& c, int helloRanks,
                         const std::optional<Endpoint>& endpoint) const;
  void reject(AuthServer::Conn& c, const std::string& problem);
  void replyToJoined(const std::vector<uint8_t>& reply);
  void sendTables();
  void failJoined();

  int nRanks_;  // 0 until the first rank says (ids created without a size)
  double timeoutSec_;
  AuthServer server_;
  std::vector<std::optional<Endpoint>> joined_;  // by rank
  std::vector<std::string> joinedFrom_;          // by rank: the remote address, for messages
  int nJoined_ = 0;
  bool tablesSent_ = false;
};

// Runs a root on a detached thread that owns it (createUniqueId): it ends by itself.
void startDetachedRoot(net::Fd listenFd, int nRanks, const Secret& secret, double timeoutSec);

// A root on a thread that is stopped and joined on destruction (rank 0 of a uniqueIdFromAddress id).
class RootThread {
 public:
  RootThread(net::Fd listenFd, int nRanks, const Secret& secret, double timeoutSec);
  ~RootThread();
  RootThread(const RootThread&) = delete;
  RootThread& operator=(const RootThread&) = delete;

 private:
  net::Fd stopFd_;
  std::thread thread_;
};

}  // namespace meshcomm::bootstrap
