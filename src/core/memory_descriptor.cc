// MemoryDescriptor (core/registered_memory_impl.hpp): what one rank tells another about a registration, and
// the validation of every field of one that arrives from the network.
#include <cstring>

#include "core/registered_memory_impl.hpp"
#include "meshcomm/errors.hpp"

namespace meshcomm {

const char* memoryKindName(MemoryKind kind) {
  switch (kind) {
    case MemoryKind::DeviceCudaMalloc:
      return "cudaMalloc device";
    case MemoryKind::DeviceCuMem:
      return "cuMem device";
    case MemoryKind::Host:
      return "pinned host";
  }
  return "unknown";
}

MemoryDescriptor MemoryDescriptor::make() {
  MemoryDescriptor d;
  std::memset(&d, 0, sizeof(d));
  d.magic = kMagic;
  d.version = kVersion;
  d.structBytes = static_cast<uint32_t>(sizeof(MemoryDescriptor));
  return d;
}

std::vector<char> MemoryDescriptor::toBytes() const {
  std::vector<char> out(sizeof(MemoryDescriptor));
  std::memcpy(out.data(), this, sizeof(MemoryDescriptor));
  return out;
}

MemoryDescriptor MemoryDescriptor::fromBytes(const void* data, size_t bytes, const std::string& context) {
  if (data == nullptr || bytes != sizeof(MemoryDescriptor)) {
    MESHCOMM_THROW(ErrorCode::RemoteError, context, ": memory descriptor has ", bytes, " bytes, expected ",
                   sizeof(MemoryDescriptor),
                   " (truncated, not a memory descriptor, or a peer running another "
                   "meshcomm version)");
  }
  MemoryDescriptor d;
  std::memcpy(&d, data, sizeof(d));
  d.validate(context);
  return d;
}

MemoryDescriptor MemoryDescriptor::fromPeer(const std::vector<char>& bytes, int peer,
                                            const std::string& context) {
  MemoryDescriptor d = fromBytes(bytes.data(), bytes.size(), context);
  if (d.ownerRank != peer) {
    MESHCOMM_THROW(ErrorCode::RemoteError, context, ": the descriptor names rank ", d.ownerRank,
                   " as the memory's owner, not the sending peer ", peer,
                   " (a rank shares only its own registrations)");
  }
  return d;
}

void MemoryDescriptor::validate(const std::string& context) const {
  auto bad = [&](const std::string& what) {
    MESHCOMM_THROW(ErrorCode::RemoteError, context, ": invalid memory descriptor: ", what);
  };
  if (magic != kMagic) bad(detail::concat("bad magic 0x", std::hex, magic, " (not a memory descriptor)"));
  if (version != kVersion) {
    bad(detail::concat("version ", version, ", this meshcomm speaks version ", kVersion));
  }
  if (structBytes != sizeof(MemoryDescriptor)) {
    bad(detail::concat("declares ", structBytes, " bytes, expected ", sizeof(MemoryDescriptor)));
  }
  const auto k = static_cast<MemoryKind>(kind);
  if (k != MemoryKind::DeviceCudaMalloc && k != MemoryKind::DeviceCuMem && k != MemoryKind::Host) {
    bad(detail::concat("unknown memory kind ", static_cast<int>(kind)));
  }
  if (ownerRank < 0) bad(detail::concat("negative owner rank ", ownerRank));
  if (deviceIndex < 0) bad(detail::concat("negative device index ", deviceIndex));
  if (id == 0) bad("registration id 0");
  if (size == 0) bad("size 0");
  if (offsetFromBase > baseSize || size > baseSize - offsetFromBase) {
    bad(detail::concat("range [", offsetFromBase, ", +", size, ") exceeds its allocation of ", baseSize,
                       " bytes"));
  }
  if (ownerBase > UINT64_MAX - baseSize) bad("allocation base + size overflows");
  if (std::memchr(brokerName, '\0', sizeof(brokerName)) == nullptr) bad("broker name not terminated");
  if (k == MemoryKind::DeviceCuMem) {
    if (exportId == 0) bad("cuMem memory without an export id");
    if (brokerName[0] == '\0') bad("cuMem memory without an fd broker name");
  }
}

}  // namespace meshcomm
