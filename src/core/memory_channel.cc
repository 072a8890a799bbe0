#include "meshcomm/memory_channel.hpp"

#include "meshcomm/errors.hpp"

namespace meshcomm {

MemoryChannel::MemoryChannel(std::shared_ptr<MemoryDevice2DeviceSemaphore> semaphore, RegisteredMemory dst,
                             RegisteredMemory src, RegisteredMemory packetBuffer)
    : semaphore_(std::move(semaphore)),
      dst_(std::move(dst)),
      src_(std::move(src)),
      packetBuffer_(std::move(packetBuffer)) {
  MESHCOMM_REQUIRE(semaphore_ != nullptr, "MemoryChannel: null semaphore");
  const int rank = semaphore_->deviceHandle().spin.rank;
  const int peer = semaphore_->remoteRank();
  if (!dst_.isMapped()) {
    MESHCOMM_THROW(ErrorCode::InvalidUsage, "rank ", rank, ": MemoryChannel to peer ", peer,
                   " needs mapped peer memory (CUDA IPC); use a PortChannel for TCP peers",
                   dst_ ? "" : " (dst is an empty RegisteredMemory)");
  }
  // src and packetBuffer are accessed by this GPU: they must be usable here too.
  MESHCOMM_REQUIRE(!src_ || src_.isMapped(), "rank ", rank, ": MemoryChannel to peer ", peer,
                   ": src (memory of rank ", src_.rank(), ") is not mapped here");
  MESHCOMM_REQUIRE(!packetBuffer_ || packetBuffer_.isMapped(), "rank ", rank, ": MemoryChannel to peer ",
                   peer, ": packetBuffer (memory of rank ", packetBuffer_.rank(), ") is not mapped here");
}

MemoryChannelDeviceHandle MemoryChannel::deviceHandle() const {
  MemoryChannelDeviceHandle h{};
  if (semaphore_) h.semaphore = semaphore_->deviceHandle();
  h.dst = dst_.data();
  h.src = src_.data();
  h.packetBuffer = packetBuffer_.data();
  return h;
}

}  // namespace meshcomm
