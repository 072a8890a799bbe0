// Raw protocol clients of a rendezvous root and a peer listener, for tests that drive them directly. Each
// helper throws std::runtime_error when the exchange does not go as the protocol says.
#pragma once

#include <cstdint>
#include <vector>

#include "bootstrap/socket.hpp"
#include "bootstrap/unique_id.hpp"

namespace meshcomm::test {

// Connects to `acceptor` and proves `secret` as `rank` to `acceptorRank` (kRootRank for the root).
net::Fd authenticatedConnection(const net::SockAddr& acceptor, const bootstrap::Secret& secret, int rank,
                                int acceptorRank, const net::Deadline& deadline);

// Joins the root as `rank` of `nRanks`, listening (as it claims) on 127.0.0.1:(1000 + rank), host id 77.
net::Fd joinRoot(const net::SockAddr& root, const bootstrap::Secret& secret, int rank, int nRanks,
                 const net::Deadline& deadline);

// Reads one reply of the root: its kind, and its body (the table's endpoints or the error text).
std::vector<uint8_t> readRootReply(const net::Fd& fd, uint32_t* kind, const net::Deadline& deadline);

}  // namespace meshcomm::test
