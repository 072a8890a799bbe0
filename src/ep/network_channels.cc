// NetworkChannels (network_channels.hpp).
#include "ep/network_channels.hpp"

#include "meshcomm/env.hpp"
#include "meshcomm/errors.hpp"

namespace meshcomm::ep {

int nodeSizeOf(Comm& comm) {
  const int rank = comm.rank(), size = comm.size();
  const int64_t forced = envInt("MESHCOMM_EP_NODE_SIZE");
  if (forced != 0) {
    MESHCOMM_REQUIRE(forced > 0 && size % forced == 0, "rank ", rank, ": MESHCOMM_EP_NODE_SIZE=", forced,
                     "; a divisor of the group's ", size, " ranks is needed");
    return static_cast<int>(forced);
  }
  Bootstrap& b = comm.communicator().bootstrap();
  int nodeSize = 1;
  while (nodeSize < size && b.hostId(nodeSize) == b.hostId(0)) ++nodeSize;
  for (int r = 0; r < size; ++r) {
    const bool sameAsBlockStart = b.hostId(r) == b.hostId(r / nodeSize * nodeSize);
    const bool newBlock = r % nodeSize == 0 && r > 0 && b.hostId(r) == b.hostId(r - 1);
    MESHCOMM_REQUIRE(size % nodeSize == 0 && sameAsBlockStart && !newBlock, "rank ", rank,
                     ": meshcomm.ep: the ranks' hosts do not form equal blocks of consecutive ranks (rank ",
                     r, "); set MESHCOMM_EP_NODE_SIZE or order the ranks by host");
  }
  return nodeSize;
}

NetworkChannels::NetworkChannels(Comm& comm, const PeerRegions& regions, int nodeSize, int tag) {
  const int rank = comm.rank(), size = comm.size();
  if (nodeSize >= size) return;
  Communicator& c = comm.communicator();
  std::vector<int> remote;
  for (int p = 0; p < size; ++p)
    if (p / nodeSize != rank / nodeSize) remote.push_back(p);
  for (int p : remote) connections_.push_back(c.connect(p, tag, Transport::Tcp));
  proxy_ = std::make_unique<ProxyService>(c);
  const MemoryId own = proxy_->addMemory(regions.memory(rank));
  std::vector<PortChannelDeviceHandle> handles(size);
  for (size_t i = 0; i < remote.size(); ++i) {
    const SemaphoreId sem = proxy_->buildAndAddSemaphore(connections_[i], tag + 1);
    handles[remote[i]] =
        proxy_->portChannel(sem, proxy_->addMemory(regions.memory(remote[i])), own).deviceHandle();
  }
  handles_ = GpuBuffer(sizeof(PortChannelDeviceHandle) * size);
  CudaDeviceGuard guard(comm.cudaDevice());
  MESHCOMM_CUDA_CHECK(cudaMemcpy(handles_.data(), handles.data(), handles_.size(), cudaMemcpyHostToDevice));
  proxy_->startProxy();
}

NetworkChannels::~NetworkChannels() {
  if (proxy_) proxy_->stopProxy();
}

const PortChannelDeviceHandle* NetworkChannels::handles() const {
  return static_cast<const PortChannelDeviceHandle*>(handles_.data());
}

void NetworkChannels::checkError() const {
  if (proxy_) proxy_->checkError();
}

}  // namespace meshcomm::ep
