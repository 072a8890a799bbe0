// NetworkChannels: the node topology of an expert-parallel group, this rank's network region (pinned host
// memory the GPU maps; docs/ep.md, "Internode") and one PortChannel from it to every rank outside this rank's
// node, over TCP, into that rank's network region. Inside a node the kernels use the EP regions' NVLink
// mappings; across nodes they stage rows in the network region and put them with these channels. Host
// memory at both ends, and host tokens for the signals, keep GPU work out of the transport: the proxy and
// the TCP receiver only copy bytes and store words, so nothing they do queues behind the application's GPU
// work (which may itself wait for these kernels).
#pragma once

#include <memory>
#include <vector>

#include "meshcomm/comm.hpp"
#include "meshcomm/connection.hpp"
#include "meshcomm/gpu_utils.hpp"
#include "meshcomm/port_channel.hpp"
#include "meshcomm/proxy.hpp"

namespace meshcomm::ep {

// Ranks per node of `comm`: MESHCOMM_EP_NODE_SIZE when set (a divisor of the size), else the ranks sharing
// this rank's host id, which must form equal blocks of consecutive ranks. Collective only in that every rank
// computes the same from the same inputs.
int nodeSizeOf(Comm& comm);

class NetworkChannels {
 public:
  // Collective over `comm` (pair with every rank of another node; tags tag .. tag + 2): a network region of
  // `bytes` (the same on every rank), a TCP connection and a PortChannel whose puts go from this rank's
  // network region to the peer's. Nothing is built when the group is one node.
  NetworkChannels(Comm& comm, int nodeSize, size_t bytes, int tag);
  ~NetworkChannels();
  NetworkChannels(const NetworkChannels&) = delete;
  NetworkChannels& operator=(const NetworkChannels&) = delete;

  // Device array [size]: the channel to each rank of another node (entries of this node's ranks are unset);
  // null when the group is one node.
  const PortChannelDeviceHandle* handles() const;
  // This rank's network region as the GPU addresses it (null when the group is one node).
  char* region() const { return static_cast<char*>(region_.device()); }
  // Throws the proxy's error (a failed connection, a bad trigger), if any.
  void checkError() const;

 private:
  HostMappedBuffer region_;
  std::vector<std::shared_ptr<Connection>> connections_;
  std::unique_ptr<ProxyService> proxy_;
  GpuBuffer handles_;
};

}  // namespace meshcomm::ep
