// TcpBootstrap: rendezvous through the root, then tagged messages over one authenticated TCP connection per
// ordered pair of ranks, and ring/star collectives on internal tags. docs/bootstrap.md has the whole design.
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "base/logging.hpp"
#include "base/siphash.hpp"
#include "bootstrap/handshake.hpp"
#include "bootstrap/limits.hpp"
#include "bootstrap/peer_receiver.hpp"
#include "bootstrap/root.hpp"
#include "bootstrap/unique_id.hpp"
#include "bootstrap/wire.hpp"
#include "meshcomm/bootstrap.hpp"
#include "meshcomm/env.hpp"
#include "meshcomm/errors.hpp"

namespace meshcomm {

using bootstrap::Endpoint;
using bootstrap::Secret;

namespace {

// Internal tags (user tags are >= 0). Same-tag messages are FIFO per sender, so back-to-back collectives stay
// in step without sequence numbers: every rank issues them in the same order.
constexpr int kTagAllGather = -1;
constexpr int kTagBroadcast = -2;

std::string rankPrefix(int rank) {
  return detail::concat("rank ", rank, ": ");
}

// `nRanks`, once checked (before anything is sized by it).
int checkedRanks(int rank, int nRanks) {
  MESHCOMM_REQUIRE(nRanks >= 1 && nRanks <= bootstrap::kMaxRanks && rank >= 0 && rank < nRanks,
                   "TcpBootstrap: rank ", rank, " is out of range for nRanks=", nRanks,
                   " (nRanks must be in 1..", bootstrap::kMaxRanks, ")");
  return nRanks;
}

}  // namespace

// ---- Bootstrap convenience wrappers ----------------------------------------------------------------------

void Bootstrap::sendBytes(const std::vector<char>& data, int peer, int tag) {
  uint64_t length = data.size();
  send(&length, sizeof(length), peer, tag);
  send(data.data(), data.size(), peer, tag);
}

std::vector<char> Bootstrap::recvBytes(int peer, int tag) {
  uint64_t length = 0;
  recv(&length, sizeof(length), peer, tag);
  uint64_t limit = bootstrap::maxMessageFromEnv(detail::concat(rankPrefix(rank()), "bootstrap recvBytes"));
  if (length > limit) {
    MESHCOMM_THROW(ErrorCode::RemoteError, rankPrefix(rank()), "bootstrap recvBytes(peer ", peer, ", tag ",
                   tag, "): the length prefix says ", length,
                   " bytes, more than MESHCOMM_BOOTSTRAP_MAX_MESSAGE=", limit,
                   " (did the peer send something else on this tag?)");
  }
  std::vector<char> data(length);
  recv(data.data(), data.size(), peer, tag);
  return data;
}

// ---- Impl ------------------------------------------------------------------------------------------------

class TcpBootstrap::Impl {
 public:
  Impl(int rank, int nRanks, const UniqueId& id, double timeoutSec);

  net::Deadline newDeadline() const { return net::Deadline::after(timeoutSec_); }
  // `op` names the operation in errors ("recv", "allGather recv", ...).
  void send(const void* data, size_t bytes, int peer, int tag, const char* op, const net::Deadline& deadline);
  void recv(void* data, size_t bytes, int peer, int tag, const char* op, const net::Deadline& deadline);
  void ringAllGather(void* data, size_t bytesPerRank, const char* op);

  const int rank;
  const int nRanks;
  int nRanksPerNode = 0;
  int localRank = 0;
  std::vector<Endpoint> endpoints;  // by rank, from the rendezvous

 private:
  // An outgoing connection to one peer, opened on first send. After a failure it stays broken: a partly
  // written frame cannot be resumed.
  struct Link {
    std::mutex mu;
    net::Fd fd;
    std::string broken;
  };

  std::unique_ptr<bootstrap::RootThread> startRootHere(const net::SockAddr& addr) const;
  void rendezvous(const net::SockAddr& root, const net::Deadline& deadline);
  net::SockAddr startReceiver(const net::SockAddr& localRouteToRoot);
  std::vector<Endpoint> readRankTable(int fd, const net::Deadline& deadline, const std::string& what) const;
  void computeLocalRanks();
  void sendOnLink(Link& link, const void* data, size_t bytes, int peer, int tag,
                  const net::Deadline& deadline, const std::string& what);
  // Every operation fails once the receiver thread has (`what` names the operation).
  void requireReceiverRunning(const std::string& what);
  [[noreturn]] static void throwReceiverStopped(const std::string& what, const std::string& reason);

  const double timeoutSec_;
  const uint64_t maxMessage_;
  Secret secret_{};
  bootstrap::Mailbox mailbox_;
  std::vector<Link> links_;                            // by peer
  std::unique_ptr<bootstrap::RootThread> root_;        // rank 0 of a uniqueIdFromAddress id
  std::unique_ptr<bootstrap::PeerReceiver> receiver_;  // destroyed first: it fills mailbox_
};

TcpBootstrap::Impl::Impl(int rank, int nRanks, const UniqueId& id, double timeoutSec)
    : rank(rank),
      nRanks(checkedRanks(rank, nRanks)),
      timeoutSec_(timeoutSec < 0 ? bootstrap::timeoutFromEnv(rankPrefix(rank) + "TcpBootstrap") : timeoutSec),
      maxMessage_(bootstrap::maxMessageFromEnv(rankPrefix(rank) + "TcpBootstrap")),
      mailbox_(nRanks, maxMessage_ * bootstrap::kQueuedBytesPerMaxMessage),
      links_(nRanks) {
  MESHCOMM_REQUIRE(timeoutSec_ > 0, rankPrefix(rank), "TcpBootstrap: the timeout must be positive (got ",
                   timeoutSec_, "s)");
  bootstrap::IdContents contents = bootstrap::decodeUniqueId(id, rankPrefix(rank) + "TcpBootstrap");
  secret_ = contents.secret;
  net::Deadline deadline = newDeadline();
  if (contents.rootHost == bootstrap::RootHost::Rank0 && rank == 0) root_ = startRootHere(contents.root);
  rendezvous(contents.root, deadline);
  computeLocalRanks();
}

std::unique_ptr<bootstrap::RootThread> TcpBootstrap::Impl::startRootHere(const net::SockAddr& addr) const {
  net::Fd fd;
  int err = net::tryListen(addr, &fd);
  if (err != 0) {
    const char* hint = err == EADDRINUSE      ? " (set MESHCOMM_BOOTSTRAP_ADDR or MASTER_PORT)"
                       : err == EADDRNOTAVAIL ? " (rank 0 must run on the host that the root address names)"
                                              : "";
    MESHCOMM_THROW(ErrorCode::SystemError, "rank 0: bootstrap root cannot listen on ", addr.toString(), ": ",
                   std::strerror(err), hint);
  }
  return std::make_unique<bootstrap::RootThread>(std::move(fd), nRanks, secret_, timeoutSec_);
}

void TcpBootstrap::Impl::rendezvous(const net::SockAddr& root, const net::Deadline& deadline) {
  std::string what = detail::concat(rankPrefix(rank), "bootstrap rendezvous with root ", root.toString());
  net::Fd conn = net::connectTo(root, deadline, net::ConnectRetry::UntilDeadline, what);
  bootstrap::authenticateConnection(conn.get(), secret_, rank, bootstrap::kRootRank, deadline, what);

  Endpoint me{startReceiver(net::localAddress(conn.get())), bootstrap::localHostId()};
  bootstrap::WireWriter hello;
  hello.i32(nRanks);
  bootstrap::writeEndpoint(hello, me);
  net::IoStatus s = net::sendAll(conn.get(), hello.data().data(), hello.data().size(), deadline);
  if (!s.ok()) net::throwIoError(s, what + " (sending this rank's endpoint)", deadline);
  endpoints = readRankTable(conn.get(), deadline, what);
}

net::SockAddr TcpBootstrap::Impl::startReceiver(const net::SockAddr& localRouteToRoot) {
  // Listen where peers can reach us: the chosen interface, else the local address of the route to the root.
  net::SockAddr addr = envRaw("MESHCOMM_SOCKET_IFNAME") ? net::advertisedAddress() : localRouteToRoot;
  addr.setPort(0);
  net::Fd fd;
  int err = net::tryListen(addr, &fd);
  if (err != 0)
    detail::throwSystemError(
        err, detail::concat(rankPrefix(rank), "bootstrap cannot listen on ", addr.toString()));
  net::SockAddr bound = net::localAddress(fd.get());
  receiver_ = std::make_unique<bootstrap::PeerReceiver>(
      std::move(fd), rank, nRanks, secret_, bootstrap::handshakeTimeout(timeoutSec_), maxMessage_, mailbox_);
  return bound;
}

std::vector<Endpoint> TcpBootstrap::Impl::readRankTable(int fd, const net::Deadline& deadline,
                                                        const std::string& what) const {
  uint8_t header[bootstrap::kReplyHeaderBytes];
  net::IoStatus s = net::recvAll(fd, header, sizeof(header), deadline);
  if (s.result == net::IoResult::TimedOut) {
    MESHCOMM_THROW(ErrorCode::Timeout, what, " timed out after ", net::formatSeconds(timeoutSec_),
                   " waiting for all ", nRanks, " ranks to join");
  }
  if (!s.ok()) net::throwIoError(s, what + " (waiting for the rank table)", deadline);
  const bootstrap::ReplyHeader reply = bootstrap::decodeReplyHeader(header, sizeof(header), what);
  const uint32_t kind = reply.kind, count = reply.count;
  if (kind == bootstrap::kReplyError && count <= bootstrap::kMaxReplyText) {
    std::string text(count, '\0');
    s = net::recvAll(fd, text.data(), text.size(), deadline);
    if (!s.ok()) net::throwIoError(s, what + " (reading the root's error)", deadline);
    MESHCOMM_THROW(ErrorCode::RemoteError, rankPrefix(rank), "bootstrap rendezvous failed: ", text);
  }
  if (kind != bootstrap::kReplyTable || count != static_cast<uint32_t>(nRanks)) {
    MESHCOMM_THROW(ErrorCode::RemoteError, what, ": malformed reply from the root (kind ", kind, ", count ",
                   count, ")");
  }
  std::vector<uint8_t> table(count * bootstrap::kEndpointBytes);
  s = net::recvAll(fd, table.data(), table.size(), deadline);
  if (!s.ok()) net::throwIoError(s, what + " (reading the rank table)", deadline);
  return bootstrap::decodeRankTable(table, count, what);
}

void TcpBootstrap::Impl::computeLocalRanks() {
  uint64_t mine = endpoints[rank].hostId;
  for (int r = 0; r < nRanks; ++r) {
    if (endpoints[r].hostId != mine) continue;
    ++nRanksPerNode;
    if (r < rank) ++localRank;
  }
}

void TcpBootstrap::Impl::send(const void* data, size_t bytes, int peer, int tag, const char* op,
                              const net::Deadline& deadline) {
  std::string what = detail::concat(rankPrefix(rank), "bootstrap ", op, "(peer ", peer, ", tag ", tag, ")");
  requireReceiverRunning(what);
  if (bytes > maxMessage_) {
    MESHCOMM_THROW(ErrorCode::InvalidUsage, what, ": ", bytes,
                   " bytes is more than MESHCOMM_BOOTSTRAP_MAX_MESSAGE=", maxMessage_);
  }
  if (peer == rank) {
    const auto* p = static_cast<const uint8_t*>(data);
    std::string problem = mailbox_.deliver(rank, tag, std::vector<uint8_t>(p, p + bytes));
    if (!problem.empty()) MESHCOMM_THROW(ErrorCode::InvalidUsage, what, ": this rank ", problem);
    return;
  }
  Link& link = links_[peer];
  std::lock_guard<std::mutex> lock(link.mu);
  if (!link.broken.empty()) {
    MESHCOMM_THROW(ErrorCode::RemoteError, what, ": the connection to peer ", peer, " failed earlier (",
                   link.broken, ")");
  }
  try {
    sendOnLink(link, data, bytes, peer, tag, deadline, what);
  } catch (const Error& e) {
    link.fd.reset();
    link.broken = e.what();
    throw;
  }
}

void TcpBootstrap::Impl::sendOnLink(Link& link, const void* data, size_t bytes, int peer, int tag,
                                    const net::Deadline& deadline, const std::string& what) {
  if (!link.fd.valid()) {
    // Every rank listened before it joined, so a refused connection means the peer is gone: no retry.
    net::Fd fd = net::connectTo(endpoints[peer].addr, deadline, net::ConnectRetry::No, what);
    bootstrap::authenticateConnection(fd.get(), secret_, rank, peer, deadline, what);
    link.fd = std::move(fd);
  }
  bootstrap::WireWriter header;
  header.i32(tag).u64(bytes);
  std::vector<iovec> parts = {{const_cast<uint8_t*>(header.data().data()), header.data().size()},
                              {const_cast<void*>(data), bytes}};
  net::IoStatus s = net::sendAll(link.fd.get(), std::move(parts), deadline);
  if (!s.ok()) net::throwIoError(s, what, deadline);
}

void TcpBootstrap::Impl::recv(void* data, size_t bytes, int peer, int tag, const char* op,
                              const net::Deadline& deadline) {
  std::vector<uint8_t> payload;
  std::string reason;
  switch (mailbox_.take(peer, tag, deadline, &payload, &reason)) {
    case bootstrap::Mailbox::Outcome::TimedOut:
      MESHCOMM_THROW(ErrorCode::Timeout, rankPrefix(rank), "bootstrap ", op, " from peer ", peer, " tag ",
                     tag, " timed out after ", net::formatSeconds(deadline.budgetSeconds()));
    case bootstrap::Mailbox::Outcome::PeerGone:
      MESHCOMM_THROW(ErrorCode::RemoteError, rankPrefix(rank), "bootstrap ", op, "(peer ", peer, ", tag ",
                     tag, "): ", reason);
    case bootstrap::Mailbox::Outcome::ReceiverStopped:
      throwReceiverStopped(
          detail::concat(rankPrefix(rank), "bootstrap ", op, "(peer ", peer, ", tag ", tag, ")"), reason);
    case bootstrap::Mailbox::Outcome::Message:
      break;
  }
  if (payload.size() != bytes) {
    MESHCOMM_THROW(ErrorCode::RemoteError, rankPrefix(rank), "bootstrap ", op, "(peer ", peer, ", tag ", tag,
                   "): expected ", bytes, " bytes but peer ", peer, " sent ", payload.size());
  }
  if (bytes > 0) std::memcpy(data, payload.data(), bytes);
}

void TcpBootstrap::Impl::requireReceiverRunning(const std::string& what) {
  std::string reason = mailbox_.receiverStopped();
  if (!reason.empty()) throwReceiverStopped(what, reason);
}

void TcpBootstrap::Impl::throwReceiverStopped(const std::string& what, const std::string& reason) {
  MESHCOMM_THROW(ErrorCode::RemoteError, what,
                 ": this rank's bootstrap receiver thread failed, so no message "
                 "can arrive any more (",
                 reason, ")");
}

void TcpBootstrap::Impl::ringAllGather(void* data, size_t bytesPerRank, const char* op) {
  std::string sendOp = std::string(op) + " send", recvOp = std::string(op) + " recv";
  net::Deadline deadline = newDeadline();  // one budget for the whole collective
  auto* base = static_cast<char*>(data);
  int next = (rank + 1) % nRanks, prev = (rank + nRanks - 1) % nRanks;
  // Step s: pass on the slice received in step s-1 (our own first), receive the one before it.
  for (int step = 0; step < nRanks - 1; ++step) {
    size_t sendSlice = static_cast<size_t>((rank - step + nRanks) % nRanks);
    size_t recvSlice = static_cast<size_t>((rank - step - 1 + nRanks) % nRanks);
    send(base + sendSlice * bytesPerRank, bytesPerRank, next, kTagAllGather, sendOp.c_str(), deadline);
    recv(base + recvSlice * bytesPerRank, bytesPerRank, prev, kTagAllGather, recvOp.c_str(), deadline);
  }
}

// ---- TcpBootstrap ----------------------------------------------------------------------------------------

UniqueId TcpBootstrap::createUniqueId(int nRanks) {
  MESHCOMM_REQUIRE(nRanks >= 0 && nRanks <= bootstrap::kMaxRanks,
                   "TcpBootstrap::createUniqueId: nRanks=", nRanks, " must be in 0..", bootstrap::kMaxRanks,
                   " (0: the ranks tell)");
  const double timeoutSec =
      bootstrap::timeoutFromEnv("TcpBootstrap::createUniqueId");  // before a root starts
  net::SockAddr addr = net::advertisedAddress();
  net::Fd fd;
  int err = net::tryListen(addr, &fd);
  if (err != 0)
    detail::throwSystemError(err, "TcpBootstrap::createUniqueId: cannot listen on " + addr.toString());
  bootstrap::IdContents contents{bootstrap::randomSecret(), net::localAddress(fd.get()),
                                 bootstrap::RootHost::IdCreator};
  bootstrap::startDetachedRoot(std::move(fd), nRanks, contents.secret, timeoutSec);
  return bootstrap::encodeUniqueId(contents);
}

UniqueId TcpBootstrap::uniqueIdFromAddress(const std::string& hostPort,
                                           const std::array<uint8_t, 16>& secret) {
  return bootstrap::encodeUniqueId({secret, net::SockAddr::parse(hostPort), bootstrap::RootHost::Rank0});
}

TcpBootstrap::TcpBootstrap(int rank, int nRanks, const UniqueId& id, double timeoutSec)
    : impl_(std::make_unique<Impl>(rank, nRanks, id, timeoutSec)) {}

TcpBootstrap::~TcpBootstrap() = default;

namespace {

std::string getenvOrEmpty(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

// MASTER_ADDR:(MASTER_PORT+1); MASTER_PORT itself usually belongs to torch's TCPStore.
std::string rootAddressFromMaster(const std::string& who) {
  std::string host = getenvOrEmpty("MASTER_ADDR"), portText = getenvOrEmpty("MASTER_PORT");
  MESHCOMM_REQUIRE(!host.empty() && !portText.empty(), who,
                   ": no bootstrap root address: set MESHCOMM_BOOTSTRAP_ADDR=host:port, or MASTER_ADDR and "
                   "MASTER_PORT (the root then listens on MASTER_PORT+1)");
  char* end = nullptr;
  errno = 0;
  long port = std::strtol(portText.c_str(), &end, 10);
  MESHCOMM_REQUIRE(errno == 0 && *end == '\0' && port >= 1 && port <= 65534, who, ": MASTER_PORT='", portText,
                   "' is not a port number in 1-65534");
  bool bareIpv6 = host.find(':') != std::string::npos && host.front() != '[';
  return (bareIpv6 ? "[" + host + "]" : host) + ":" + std::to_string(port + 1);
}

// A secret every rank of one launch derives alike. Anyone who sees the launch variables can derive it too.
Secret deriveSecret(const RankEnv& env, const std::string& rootAddress) {
  std::string material =
      detail::concat(rootAddress, '\n', getenvOrEmpty("MASTER_ADDR"), '\n', getenvOrEmpty("MASTER_PORT"),
                     '\n', env.worldSize, '\n', getenvOrEmpty("TORCHELASTIC_RUN_ID"));
  static constexpr SipKey kLow = {'m', 'e', 's', 'h', 'c', 'o', 'm', 'm',
                                  '-', 's', 'e', 'c', 'r', 'e', 't', '0'};
  static constexpr SipKey kHigh = {'m', 'e', 's', 'h', 'c', 'o', 'm', 'm',
                                   '-', 's', 'e', 'c', 'r', 'e', 't', '1'};
  // Little-endian halves, so that hosts of either byte order derive the same bytes.
  bootstrap::WireWriter halves;
  halves.u64(sipHash24(kLow, material.data(), material.size()))
      .u64(sipHash24(kHigh, material.data(), material.size()));
  Secret s;
  std::memcpy(s.data(), halves.data().data(), s.size());
  return s;
}

Secret secretFromEnvironment(const RankEnv& env, const std::string& rootAddress) {
  if (auto hex = envRaw("MESHCOMM_BOOTSTRAP_SECRET"))
    return bootstrap::parseSecretHex(*hex, "MESHCOMM_BOOTSTRAP_SECRET");
  if (env.rank == 0) {
    MESHCOMM_LOG(
        WARN,
        "MESHCOMM_BOOTSTRAP_SECRET is not set: the bootstrap secret is derived from MASTER_ADDR, "
        "MASTER_PORT, WORLD_SIZE and TORCHELASTIC_RUN_ID, so it is not secret; anyone who can reach ",
        rootAddress, " and knows them can join (meshcomm-run sets a random secret)");
  }
  return deriveSecret(env, rootAddress);
}

}  // namespace

std::shared_ptr<TcpBootstrap> TcpBootstrap::fromEnvironment() {
  RankEnv env = RankEnv::fromEnvironment();
  std::string who = detail::concat(rankPrefix(env.rank), "TcpBootstrap::fromEnvironment");
  auto explicitAddress = envRaw("MESHCOMM_BOOTSTRAP_ADDR");
  if (env.source == "none" && !explicitAddress && getenvOrEmpty("MASTER_ADDR").empty()) {
    // A single process started without a launcher: nothing to meet, a private root suffices.
    return std::make_shared<TcpBootstrap>(0, 1, createUniqueId(1));
  }
  std::string rootAddress = explicitAddress ? *explicitAddress : rootAddressFromMaster(who);
  Secret secret = secretFromEnvironment(env, rootAddress);
  return std::make_shared<TcpBootstrap>(env.rank, env.worldSize, uniqueIdFromAddress(rootAddress, secret));
}

int TcpBootstrap::rank() const {
  return impl_->rank;
}
int TcpBootstrap::size() const {
  return impl_->nRanks;
}
int TcpBootstrap::nRanksPerNode() const {
  return impl_->nRanksPerNode;
}
int TcpBootstrap::localRank() const {
  return impl_->localRank;
}

uint64_t TcpBootstrap::hostId(int rank) const {
  MESHCOMM_REQUIRE(rank >= 0 && rank < impl_->nRanks, rankPrefix(impl_->rank), "bootstrap hostId(", rank,
                   "): rank out of range for nRanks=", impl_->nRanks);
  return impl_->endpoints[rank].hostId;
}

namespace {

void checkPointToPoint(const char* op, const void* data, size_t bytes, int peer, int tag, int rank,
                       int nRanks) {
  MESHCOMM_REQUIRE(peer >= 0 && peer < nRanks, rankPrefix(rank), "bootstrap ", op, "(peer ", peer, ", tag ",
                   tag, "): peer out of range for nRanks=", nRanks);
  MESHCOMM_REQUIRE(tag >= 0, rankPrefix(rank), "bootstrap ", op, "(peer ", peer, ", tag ", tag,
                   "): tags must be >= 0 (negative tags are internal)");
  MESHCOMM_REQUIRE(data || bytes == 0, rankPrefix(rank), "bootstrap ", op, "(peer ", peer, ", tag ", tag,
                   "): null buffer for ", bytes, " bytes");
}

}  // namespace

void TcpBootstrap::send(const void* data, size_t bytes, int peer, int tag) {
  checkPointToPoint("send", data, bytes, peer, tag, impl_->rank, impl_->nRanks);
  impl_->send(data, bytes, peer, tag, "send", impl_->newDeadline());
}

void TcpBootstrap::recv(void* data, size_t bytes, int peer, int tag) {
  checkPointToPoint("recv", data, bytes, peer, tag, impl_->rank, impl_->nRanks);
  impl_->recv(data, bytes, peer, tag, "recv", impl_->newDeadline());
}

void TcpBootstrap::allGather(void* data, size_t bytesPerRank) {
  MESHCOMM_REQUIRE(data || bytesPerRank == 0, rankPrefix(impl_->rank), "bootstrap allGather: null buffer");
  MESHCOMM_REQUIRE(bytesPerRank <= SIZE_MAX / static_cast<size_t>(impl_->nRanks), rankPrefix(impl_->rank),
                   "bootstrap allGather: ", bytesPerRank, " bytes per rank overflows the buffer size");
  impl_->ringAllGather(data, bytesPerRank, "allGather");
}

void TcpBootstrap::broadcast(void* data, size_t bytes, int root) {
  const int rank = impl_->rank, n = impl_->nRanks;
  MESHCOMM_REQUIRE(root >= 0 && root < n, rankPrefix(rank), "bootstrap broadcast: root ", root,
                   " out of range for nRanks=", n);
  MESHCOMM_REQUIRE(data || bytes == 0, rankPrefix(rank), "bootstrap broadcast: null buffer for ", bytes,
                   " bytes");
  net::Deadline deadline = impl_->newDeadline();
  if (rank != root) {
    impl_->recv(data, bytes, root, kTagBroadcast, "broadcast recv", deadline);
    return;
  }
  for (int peer = 0; peer < n; ++peer) {
    if (peer != root) impl_->send(data, bytes, peer, kTagBroadcast, "broadcast send", deadline);
  }
}

void TcpBootstrap::barrier() {
  std::vector<char> tokens(static_cast<size_t>(impl_->nRanks));
  impl_->ringAllGather(tokens.data(), 1, "barrier");
}

}  // namespace meshcomm
