#include "plan/plan_port_channels.hpp"

#include <algorithm>
#include <map>
#include <tuple>
#include <vector>

namespace meshcomm::plan {

PortChannels::PortChannels(CommResources& resources, const RankPlan& mine)
    : proxy_(resources.communicator()) {
  const int me = resources.topology().rank;
  std::vector<size_t> order;
  for (size_t i = 0; i < mine.channels.size(); ++i)
    if (mine.channels[i].type == ChannelType::Port) order.push_back(i);
  auto key = [&](size_t i) {
    const Channel& ch = mine.channels[i];
    return std::make_tuple(std::min(me, ch.peer), std::max(me, ch.peer), ch.index);
  };
  std::sort(order.begin(), order.end(), [&](size_t x, size_t y) { return key(x) < key(y); });

  const MemoryId own = proxy_.addMemory(resources.scratchMemory(me));
  std::map<int, MemoryId> peerScratch;
  std::vector<PortChannelDeviceHandle> handles(mine.channels.size(), PortChannelDeviceHandle{});
  for (size_t i : order) {
    const Channel& ch = mine.channels[i];
    // The paired channel (peer -> this rank, same index) builds its semaphore with the same tag.
    const SemaphoreId sem = proxy_.buildAndAddSemaphore(resources.connection(ch.peer), ch.index);
    auto it = peerScratch.find(ch.peer);
    if (it == peerScratch.end())
      it = peerScratch.emplace(ch.peer, proxy_.addMemory(resources.scratchMemory(ch.peer))).first;
    handles[i] = proxy_.portChannel(sem, it->second, own).deviceHandle();
  }
  handles_ = GpuBuffer(std::max<size_t>(sizeof(PortChannelDeviceHandle) * handles.size(), 16));
  if (!handles.empty())
    copyToDevice(handles_.data(), handles.data(), sizeof(PortChannelDeviceHandle) * handles.size());
  proxy_.startProxy();
}

PortChannels::~PortChannels() {
  proxy_.stopProxy();
}

}  // namespace meshcomm::plan
