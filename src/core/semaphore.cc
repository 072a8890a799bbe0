#include "meshcomm/semaphore.hpp"

#include "core/communicator_impl.hpp"
#include "meshcomm/errors.hpp"

namespace meshcomm {

namespace {

struct ExchangedToken {
  RegisteredMemory memory;  // the peer's token pool chunk (mapped for CUDA IPC peers)
  uint64_t offset;          // the peer's token within it
};

// (pair) Sends our inbound token (pool chunk + offset) to the peer and receives the peer's. Both sides send
// first: bootstrap sends are buffered by the receiver, so send-then-recv on both sides cannot deadlock.
ExchangedToken exchangeTokens(Communicator& comm, const Communicator::Token& ours, int peer, int tag,
                              const char* what) {
  Bootstrap& bootstrap = comm.bootstrap();
  comm.sendMemory(ours.pool, peer, tag);
  uint64_t offset = ours.offset;
  bootstrap.send(&offset, sizeof(offset), peer, tag);

  ExchangedToken theirs;
  theirs.memory = comm.recvMemory(peer, tag);
  bootstrap.recv(&theirs.offset, sizeof(theirs.offset), peer, tag);
  // Both values come from the network: the token must be an aligned word inside the peer's registration.
  if (theirs.memory.rank() != peer || theirs.offset % sizeof(uint64_t) != 0 ||
      theirs.offset > theirs.memory.size() || theirs.memory.size() - theirs.offset < sizeof(uint64_t)) {
    MESHCOMM_THROW(ErrorCode::RemoteError, "rank ", comm.rank(), ": ", what, " with peer ", peer,
                   ": the peer sent an invalid token (owner rank ", theirs.memory.rank(), ", offset ",
                   theirs.offset, " in a registration of ", theirs.memory.size(), " bytes)");
  }
  return theirs;
}

}  // namespace

// ---- MemoryDevice2DeviceSemaphore --------------------------------------------------------------------

MemoryDevice2DeviceSemaphore::MemoryDevice2DeviceSemaphore(Communicator& comm,
                                                           const std::shared_ptr<Connection>& conn, int tag)
    : remoteRank_(-1) {
  constexpr const char* what = "MemoryDevice2DeviceSemaphore";
  MESHCOMM_REQUIRE(conn != nullptr, "rank ", comm.rank(), ": ", what, ": null connection");
  const int peer = conn->remoteRank();
  comm.impl().checkPeer(peer, what);
  if (conn->transport() != Transport::CudaIpc) {
    MESHCOMM_THROW(ErrorCode::InvalidUsage, "rank ", comm.rank(), ": ", what, " with peer ", peer,
                   " needs a CUDA IPC connection, got ", transportName(conn->transport()),
                   "; use a PortChannel (ProxyService) for TCP peers");
  }
  const int internalTag =
      internal::internalTag(internal::TagSpace::MemorySemaphore, tag, what, comm.rank(), peer);

  inbound_ = comm.allocateToken();
  uint64_t* expectedInbound = comm.allocateCounter();
  ExchangedToken theirs = exchangeTokens(comm, inbound_, peer, internalTag, what);
  if (!theirs.memory.isMapped()) {
    MESHCOMM_THROW(ErrorCode::InvalidUsage, "rank ", comm.rank(), ": ", what, " with peer ", peer,
                   ": the peer's token is not mapped here (different host, or MESHCOMM_TRANSPORT=tcp)");
  }
  remoteToken_ = theirs.memory;
  remoteRank_ = peer;

  handle_.local.inbound = inbound_.devicePtr();
  handle_.local.expectedInbound = expectedInbound;
  handle_.remoteInbound =
      reinterpret_cast<uint64_t*>(static_cast<char*>(remoteToken_.data()) + theirs.offset);
  handle_.spin = comm.spinContext(peer);
}

// ---- Host2DeviceSemaphore ----------------------------------------------------------------------------

Host2DeviceSemaphore::Host2DeviceSemaphore(Communicator& comm, std::shared_ptr<Connection> conn, int tag)
    : conn_(std::move(conn)) {
  constexpr const char* what = "Host2DeviceSemaphore";
  MESHCOMM_REQUIRE(conn_ != nullptr, "rank ", comm.rank(), ": ", what, ": null connection");
  const int peer = conn_->remoteRank();
  comm.impl().checkPeer(peer, what);
  const int internalTag =
      internal::internalTag(internal::TagSpace::HostSemaphore, tag, what, comm.rank(), peer);

  // Over TCP the peer's signals arrive through this rank's receiver thread: a host token takes them as CPU
  // stores (a device token would need a GPU write queued behind whatever shares the receiver's stream queue).
  inbound_ = conn_->transport() == Transport::Tcp ? comm.allocateHostToken() : comm.allocateToken();
  uint64_t* expectedInbound = comm.allocateCounter();
  ExchangedToken theirs = exchangeTokens(comm, inbound_, peer, internalTag, what);
  if (conn_->transport() == Transport::CudaIpc && !theirs.memory.isMapped()) {
    MESHCOMM_THROW(ErrorCode::InvalidUsage, "rank ", comm.rank(), ": ", what, " with peer ", peer,
                   ": the connection is CUDA IPC but the peer's token is not mapped here");
  }
  remoteToken_ = theirs.memory;
  remoteTokenOffset_ = theirs.offset;

  handle_.local.inbound = inbound_.devicePtr();
  handle_.local.expectedInbound = expectedInbound;
  handle_.spin = comm.spinContext(peer);
}

void Host2DeviceSemaphore::signal() {
  // Count the signal only once the connection has accepted it, so a failed signal does not shift the epoch.
  const uint64_t next = outbound_ + 1;
  conn_->updateAndSync(remoteToken_, remoteTokenOffset_, next);
  outbound_ = next;
}

}  // namespace meshcomm
