#include "root_client.hpp"

#include <string>

#include "bootstrap/handshake.hpp"
#include "bootstrap/wire.hpp"
#include "forked_ranks.hpp"

namespace meshcomm::test {

net::Fd authenticatedConnection(const net::SockAddr& acceptor, const bootstrap::Secret& secret, int rank,
                                int acceptorRank, const net::Deadline& deadline) {
  net::Fd fd = net::connectTo(acceptor, deadline, net::ConnectRetry::UntilDeadline, "test client");
  bootstrap::authenticateConnection(fd.get(), secret, rank, acceptorRank, deadline, "test client");
  return fd;
}

net::Fd joinRoot(const net::SockAddr& root, const bootstrap::Secret& secret, int rank, int nRanks,
                 const net::Deadline& deadline) {
  net::Fd fd = authenticatedConnection(root, secret, rank, bootstrap::kRootRank, deadline);
  bootstrap::WireWriter hello;
  hello.i32(nRanks);
  bootstrap::writeEndpoint(hello, {net::SockAddr::loopbackV4(static_cast<uint16_t>(1000 + rank)), 77});
  RANK_CHECK(net::sendAll(fd.get(), hello.data().data(), hello.data().size(), deadline).ok(), "rank ", rank);
  return fd;
}

std::vector<uint8_t> readRootReply(const net::Fd& fd, uint32_t* kind, const net::Deadline& deadline) {
  uint8_t header[bootstrap::kReplyHeaderBytes];
  net::IoStatus s = net::recvAll(fd.get(), header, sizeof(header), deadline);
  RANK_CHECK(s.ok(), "no reply from the root (result ", static_cast<int>(s.result), ")");
  bootstrap::WireReader r(header, sizeof(header));
  *kind = r.u32();
  uint32_t count = r.u32();
  std::vector<uint8_t> body(*kind == bootstrap::kReplyTable ? count * bootstrap::kEndpointBytes : count);
  RANK_CHECK(net::recvAll(fd.get(), body.data(), body.size(), deadline).ok(), "truncated reply");
  return body;
}

}  // namespace meshcomm::test
