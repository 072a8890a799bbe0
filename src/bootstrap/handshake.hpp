// Mutual challenge-response authentication of a bootstrap connection with the shared secret.
//
//   acceptor  -> connector: challenge {magic, nonceA}
//   connector -> acceptor:  proof     {magic, connectorRank, nonceC, MAC(secret, "connect", nonceA, ranks)}
//   acceptor  -> connector: answer    {MAC(secret, "accept", nonceC, ranks)}      (only after the proof
//   checks)
//
// MAC is SipHash-2-4 keyed by the secret; the direction label stops one side's proof from being reflected
// back as the other's, and fresh random nonces stop replays. The acceptor is the root (rank kRootRank) or a
// rank's peer listener.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "bootstrap/socket.hpp"
#include "bootstrap/unique_id.hpp"

namespace meshcomm::bootstrap {

// Acceptor side, for poll loops: queues the challenge on `conn`, makes it expect the proof, and returns the
// nonce to check the proof against.
uint64_t sendChallenge(net::PolledConn& conn);

// Acceptor side, pure: the connector's rank (which the MAC binds) and the answer that proves this side knows
// the secret, when `proof` is kProofBytes with the magic and a MAC over `nonce` and the two ranks; nullopt
// otherwise (fuzzed by tests/fuzz/fuzz_bootstrap_wire.cc).
struct VerifiedProof {
  int connectorRank = 0;
  uint64_t answer = 0;
};
std::optional<VerifiedProof> verifyProof(const std::vector<uint8_t>& proof, const Secret& secret,
                                         uint64_t nonce, int acceptorRank);

// Acceptor side: checks the kProofBytes of `proof` (verifyProof). On success queues the answer on `conn` and
// returns the connector's rank, which the MAC binds; nullopt when the magic or the MAC is wrong.
std::optional<int> checkProofAndAnswer(net::PolledConn& conn, const std::vector<uint8_t>& proof,
                                       const Secret& secret, uint64_t nonce, int acceptorRank);

// Connector side, blocking until `deadline`. Throws RemoteError/Timeout starting with `what` when the
// acceptor closes the connection (it rejected our proof) or fails to prove that it knows the secret.
void authenticateConnection(int fd, const Secret& secret, int myRank, int acceptorRank,
                            const net::Deadline& deadline, const std::string& what);

}  // namespace meshcomm::bootstrap
