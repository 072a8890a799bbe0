// Bootstrap: the host control plane. A TCP rendezvous authenticated by a 128-bit secret, then tagged
// point-to-point messages and small collectives between ranks. Every blocking call has a timeout
// (MESHCOMM_BOOTSTRAP_TIMEOUT) and its error names this rank, the peer and the operation.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace meshcomm {

// 128 bytes, the size of ncclUniqueId, so the NCCL shim can carry it unchanged.
// Layout (all little-endian): magic(8) | secret(16) | family(2) | port(2, network order) | address(16) | pad.
struct UniqueId {
  std::array<uint8_t, 128> bytes{};
};

// The rank layout of this process, read from the launcher's environment:
// torchrun (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE), OpenMPI (OMPI_COMM_WORLD_RANK, ..._SIZE,
// ..._LOCAL_RANK, ..._LOCAL_SIZE) or Slurm (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NTASKS_PER_NODE
// or SLURM_TASKS_PER_NODE), in that order of precedence.
struct RankEnv {
  int rank = 0;
  int worldSize = 1;
  int localRank = 0;
  int localWorldSize = 1;
  std::string source;  // "torchrun", "openmpi", "slurm" or "none"

  // Throws Error(InvalidUsage) naming the variable when one is present but malformed or inconsistent.
  static RankEnv fromEnvironment();
};

class Bootstrap {
 public:
  virtual ~Bootstrap() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Ranks that share this rank's host (same host id), and this rank's index among them.
  virtual int nRanksPerNode() const = 0;
  virtual int localRank() const = 0;
  // A 64-bit id of the host of `rank` (equal ids = same host; used to choose CUDA IPC vs TCP).
  virtual uint64_t hostId(int rank) const = 0;

  // Tagged point-to-point. Messages with the same (sender, receiver, tag) arrive in the order they were
  // sent; messages with different tags are independent. `tag` must be >= 0 (negative tags are internal).
  // recv requires the exact byte count the sender sent, else Error(RemoteError) names the mismatch.
  virtual void send(const void* data, size_t bytes, int peer, int tag) = 0;
  virtual void recv(void* data, size_t bytes, int peer, int tag) = 0;

  // Collectives: every rank must call them in the same order.
  // allGather: `data` holds size()*bytesPerRank bytes; this rank's slice is at rank()*bytesPerRank.
  virtual void allGather(void* data, size_t bytesPerRank) = 0;
  virtual void broadcast(void* data, size_t bytes, int root) = 0;
  virtual void barrier() = 0;

  // Convenience wrappers over send/recv for variable-size byte strings (length-prefixed).
  void sendBytes(const std::vector<char>& data, int peer, int tag);
  std::vector<char> recvBytes(int peer, int tag);
};

class TcpBootstrap : public Bootstrap {
 public:
  // Creates an id with a fresh random secret and starts, in this process, the rendezvous root that
  // listens on the advertised address (MESHCOMM_SOCKET_IFNAME or first non-loopback IPv4, else loopback)
  // until `nRanks` ranks have joined or MESHCOMM_BOOTSTRAP_TIMEOUT passes. nRanks 0: the size is taken from
  // the first rank that joins (every rank passes it to the constructor; all must agree), as ncclGetUniqueId.
  // A job has at most 65536 ranks.
  static UniqueId createUniqueId(int nRanks);
  // An id for a fixed "host:port" root address and secret; used for launches from the environment, where
  // rank 0 hosts the root itself (initialize() starts it there).
  static UniqueId uniqueIdFromAddress(const std::string& hostPort, const std::array<uint8_t, 16>& secret);

  // Rendezvous with every other rank (1 <= nRanks <= 65536). `timeoutSec` < 0 means
  // MESHCOMM_BOOTSTRAP_TIMEOUT.
  // Rank 0 of a uniqueIdFromAddress id binds the root address itself; a port in use gives an error naming
  // the address and the variable to change.
  TcpBootstrap(int rank, int nRanks, const UniqueId& id, double timeoutSec = -1);
  // From the environment: RankEnv for rank/size; MESHCOMM_BOOTSTRAP_ADDR or MASTER_ADDR:MASTER_PORT+1 for
  // the root; MESHCOMM_BOOTSTRAP_SECRET (else a secret derived from the launch variables, with a warning).
  static std::shared_ptr<TcpBootstrap> fromEnvironment();
  ~TcpBootstrap() override;

  int rank() const override;
  int size() const override;
  int nRanksPerNode() const override;
  int localRank() const override;
  uint64_t hostId(int rank) const override;
  void send(const void* data, size_t bytes, int peer, int tag) override;
  void recv(void* data, size_t bytes, int peer, int tag) override;
  void allGather(void* data, size_t bytesPerRank) override;
  void broadcast(void* data, size_t bytes, int root) override;
  void barrier() override;

  class Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace meshcomm
