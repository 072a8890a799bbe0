// NetworkChannels: the node topology of an expert-parallel group and one PortChannel from this rank to every
// rank outside its node, over TCP, between the ranks' EP regions (docs/ep.md, "Internode"). Inside a node the
// kernels use the regions' NVLink mappings; across nodes they stage rows in their own region and put them
// with these channels.
#pragma once

#include <memory>
#include <vector>

#include "ep/peer_regions.hpp"
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
  // Collective over `comm` (pair with every rank of another node; tags tag .. tag + 1): a TCP connection and
  // a PortChannel whose puts go from this rank's region to the peer's. Nothing is built when the group is
  // one node.
  NetworkChannels(Comm& comm, const PeerRegions& regions, int nodeSize, int tag);
  ~NetworkChannels();
  NetworkChannels(const NetworkChannels&) = delete;
  NetworkChannels& operator=(const NetworkChannels&) = delete;

  // Device array [size]: the channel to each rank of another node (entries of this node's ranks are unset);
  // null when the group is one node.
  const PortChannelDeviceHandle* handles() const;
  // Throws the proxy's error (a failed connection, a bad trigger), if any.
  void checkError() const;

 private:
  std::vector<std::shared_ptr<Connection>> connections_;
  std::unique_ptr<ProxyService> proxy_;
  GpuBuffer handles_;
};

}  // namespace meshcomm::ep
