#include "bootstrap/handshake.hpp"

#include "base/siphash.hpp"
#include "bootstrap/wire.hpp"
#include "meshcomm/errors.hpp"

namespace meshcomm::bootstrap {

namespace {

enum class Direction : uint64_t {
  ConnectorProof = 0x74636e6e6f632d6dull,  // "m-connct"
  AcceptorAnswer = 0x7470636363612d6dull,  // "m-acccpt"
};

uint64_t authMac(const Secret& secret, Direction direction, uint64_t nonce, int connectorRank,
                 int acceptorRank) {
  WireWriter w;
  w.u64(static_cast<uint64_t>(direction)).u64(nonce).i32(connectorRank).i32(acceptorRank);
  return sipHash24(secret, w.data().data(), w.data().size());
}

}  // namespace

uint64_t sendChallenge(net::PolledConn& conn) {
  uint64_t nonce = randomU64();
  conn.queueOutput(WireWriter().u64(kWireMagic).u64(nonce).data());
  conn.expectInput(kProofBytes);
  return nonce;
}

std::optional<VerifiedProof> verifyProof(const std::vector<uint8_t>& proof, const Secret& secret,
                                         uint64_t nonce, int acceptorRank) {
  if (proof.size() != kProofBytes) return std::nullopt;
  WireReader r(proof);
  uint64_t magic = r.u64();
  int connectorRank = r.i32();
  uint64_t connectorNonce = r.u64();
  uint64_t mac = r.u64();
  if (magic != kWireMagic ||
      mac != authMac(secret, Direction::ConnectorProof, nonce, connectorRank, acceptorRank)) {
    return std::nullopt;
  }
  return VerifiedProof{
      connectorRank, authMac(secret, Direction::AcceptorAnswer, connectorNonce, connectorRank, acceptorRank)};
}

std::optional<int> checkProofAndAnswer(net::PolledConn& conn, const std::vector<uint8_t>& proof,
                                       const Secret& secret, uint64_t nonce, int acceptorRank) {
  const std::optional<VerifiedProof> verified = verifyProof(proof, secret, nonce, acceptorRank);
  if (!verified) return std::nullopt;
  conn.queueOutput(WireWriter().u64(verified->answer).data());
  return verified->connectorRank;
}

void authenticateConnection(int fd, const Secret& secret, int myRank, int acceptorRank,
                            const net::Deadline& deadline, const std::string& what) {
  uint8_t challenge[kChallengeBytes];
  net::IoStatus s = net::recvAll(fd, challenge, sizeof(challenge), deadline);
  if (!s.ok()) net::throwIoError(s, what + " (authentication: waiting for the challenge)", deadline);
  WireReader cr(challenge, sizeof(challenge));
  if (cr.u64() != kWireMagic) {
    MESHCOMM_THROW(ErrorCode::RemoteError, what,
                   ": the remote end is not a meshcomm bootstrap endpoint of this "
                   "protocol version (bad handshake magic)");
  }
  uint64_t theirNonce = cr.u64();
  uint64_t myNonce = randomU64();

  WireWriter proof;
  proof.u64(kWireMagic)
      .i32(myRank)
      .u64(myNonce)
      .u64(authMac(secret, Direction::ConnectorProof, theirNonce, myRank, acceptorRank));
  s = net::sendAll(fd, proof.data().data(), proof.data().size(), deadline);
  if (!s.ok()) net::throwIoError(s, what + " (authentication: sending the proof)", deadline);

  uint8_t answer[kAnswerBytes];
  s = net::recvAll(fd, answer, sizeof(answer), deadline);
  if (s.result == net::IoResult::Closed) {
    MESHCOMM_THROW(
        ErrorCode::RemoteError, what,
        ": the remote end rejected this rank's proof of the secret and closed the connection (do all "
        "ranks use the same UniqueId / MESHCOMM_BOOTSTRAP_SECRET?)");
  }
  if (!s.ok()) net::throwIoError(s, what + " (authentication: waiting for the answer)", deadline);
  if (WireReader(answer, sizeof(answer)).u64() !=
      authMac(secret, Direction::AcceptorAnswer, myNonce, myRank, acceptorRank)) {
    MESHCOMM_THROW(
        ErrorCode::RemoteError, what,
        ": the remote end failed to prove that it knows the bootstrap secret; refusing to talk to it");
  }
}

}  // namespace meshcomm::bootstrap
