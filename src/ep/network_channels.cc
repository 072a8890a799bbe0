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

NetworkChannels::NetworkChannels(Comm& comm, int nodeSize, size_t bytes, int tag) {
  const int rank = comm.rank(), size = comm.size();
  if (nodeSize >= size) return;
  Communicator& c = comm.communicator();
  CudaDeviceGuard guard(comm.cudaDevice());
  std::vector<int> remote;
  for (int p = 0; p < size; ++p)
    if (p / nodeSize != rank / nodeSize) remote.push_back(p);
  region_ = HostMappedBuffer(bytes);  // zeroed
  const RegisteredMemory own = c.registerMemory(region_.host(), bytes);
  for (int p : remote) c.sendMemory(own, p, tag);
  std::vector<RegisteredMemory> theirs;
  for (int p : remote) {
    theirs.push_back(c.recvMemory(p, tag));
    MESHCOMM_REQUIRE(theirs.back().size() == bytes, "rank ", rank, ": meshcomm.ep: rank ", p,
                     "'s network region has ", theirs.back().size(), " bytes, this rank's ", bytes,
                     " (every rank must pass the same size)");
  }
  for (int p : remote) connections_.push_back(c.connect(p, tag + 1, Transport::Tcp));
  proxy_ = std::make_unique<ProxyService>(c);
  const MemoryId ownId = proxy_->addMemory(own);
  std::vector<PortChannelDeviceHandle> handles(size);
  for (size_t i = 0; i < remote.size(); ++i) {
    const SemaphoreId sem = proxy_->buildAndAddSemaphore(connections_[i], tag + 2);
    handles[remote[i]] = proxy_->portChannel(sem, proxy_->addMemory(theirs[i]), ownId).deviceHandle();
  }
  handles_ = GpuBuffer(sizeof(PortChannelDeviceHandle) * size);
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
