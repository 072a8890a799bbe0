#include "transport/transport_common.hpp"

#include <cstring>

#include "base/cu_driver.hpp"
#include "base/logging.hpp"
#include "core/communicator_impl.hpp"
#include "meshcomm/env.hpp"
#include "meshcomm/errors.hpp"
#include "meshcomm/gpu_utils.hpp"
#include "transport/range_check.hpp"

namespace meshcomm::internal {

namespace {

constexpr uint32_t kHelloMagic = 0x4d43484c;  // "MCHL"
constexpr uint16_t kHelloVersion = 1;

// Sent raw between two processes of the same build (same layout on both ends); checked by its magic.
struct Hello {
  uint32_t magic;
  uint16_t version;
  uint8_t transport;
  uint8_t reserved;
  int32_t rank;    // the sender
  int32_t peer;    // whom the sender believes it talks to
  int32_t device;  // the sender's CUDA device (for messages)
  int32_t reserved2;
  uint64_t hostId;
};
static_assert(sizeof(Hello) == 32, "Hello is a fixed-size wire message");

std::string describe(const RegisteredMemory& m) {
  return detail::concat("memory id ", m.id(), " of rank ", m.rank(), " (", m.size(), " bytes)");
}

}  // namespace

void exchangeHello(Communicator& comm, int peer, int tag, Transport transport) {
  Bootstrap& bs = comm.bootstrap();
  const int rank = comm.rank();
  comm.impl().checkPeer(peer, "connect");
  const int setupTag = internalTag(TagSpace::CudaIpcConnection, tag, "connect", rank, peer);
  Hello mine{};
  mine.magic = kHelloMagic;
  mine.version = kHelloVersion;
  mine.transport = static_cast<uint8_t>(transport);
  mine.rank = rank;
  mine.peer = peer;
  mine.device = comm.cudaDevice();
  mine.hostId = bs.hostId(rank);
  bs.send(&mine, sizeof(mine), peer, setupTag);
  Hello theirs{};
  bs.recv(&theirs, sizeof(theirs), peer, setupTag);

  const auto where = [&] {
    return detail::concat("rank ", rank, ": connect(peer ", peer, ", tag ", tag, "): ");
  };
  if (theirs.magic != kHelloMagic || theirs.version != kHelloVersion) {
    MESHCOMM_THROW(ErrorCode::RemoteError, where(), "the peer's hello has magic ", theirs.magic, " version ",
                   theirs.version, " (expected ", kHelloMagic, " version ", kHelloVersion,
                   "): a different meshcomm build or a tag collision");
  }
  if (theirs.rank != peer || theirs.peer != rank) {
    MESHCOMM_THROW(ErrorCode::RemoteError, where(), "the peer says it is rank ", theirs.rank,
                   " connecting to rank ", theirs.peer, "; the two sides' connect() calls do not match");
  }
  if (theirs.transport != mine.transport) {
    MESHCOMM_THROW(ErrorCode::RemoteError, where(), "this rank chose transport ", transportName(transport),
                   " but the peer chose ", transportName(static_cast<Transport>(theirs.transport)),
                   "; set MESHCOMM_TRANSPORT to the same value on every rank");
  }
  if (transport == Transport::CudaIpc && theirs.hostId != mine.hostId) {
    MESHCOMM_THROW(ErrorCode::RemoteError, where(),
                   "CUDA IPC needs both ranks on one host, but the host ids differ (", mine.hostId, " vs ",
                   theirs.hostId, ")");
  }
  MESHCOMM_LOG(DEBUG, where(), transportName(transport), " connection agreed (local device ", mine.device,
               ", peer device ", theirs.device, ")");
}

OwnedStream::OwnedStream(int device) {
  CudaDeviceGuard guard(device);
  MESHCOMM_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
}

OwnedStream::~OwnedStream() {
  if (stream_ == nullptr) return;
  // Pending work still completes; the stream's resources are released after it.
  (void)cudaStreamDestroy(stream_);
}

void prepareWorkerThread(int device) {
  MESHCOMM_CUDA_CHECK(cudaSetDevice(device));
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  MESHCOMM_CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
}

void requireStreamWriteValue64(int rank, int device) {
  CUdevice cuDevice = 0;
  MESHCOMM_CU(cuDeviceGet, &cuDevice, device);
  int supported = 0;
  CUresult res = cuDriver().cuDeviceGetAttribute(&supported,
                                                 CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS, cuDevice);
  if (res != CUDA_SUCCESS) {
    // An older driver that does not know the attribute: let the first cuStreamWriteValue64 report it.
    MESHCOMM_LOG(DEBUG, "rank ", rank, ": cannot query 64-bit stream memory operations on device ", device);
    return;
  }
  if (supported == 0) {
    MESHCOMM_THROW(
        ErrorCode::CudaError, "rank ", rank, ": device ", device,
        " does not support 64-bit stream memory operations (cuStreamWriteValue64), which connections "
        "use to signal semaphores; a newer NVIDIA driver enables them");
  }
}

void checkPeerDestination(const ConnectionLabel& c, const char* op, const RegisteredMemory& dst,
                          uint64_t offset, uint64_t bytes) {
  MESHCOMM_REQUIRE(static_cast<bool>(dst), "rank ", c.rank, ": ", transportName(c.transport), " ", op,
                   " to peer ", c.peer, ": the destination is an empty RegisteredMemory");
  MESHCOMM_REQUIRE(dst.rank() == c.peer, "rank ", c.rank, ": ", transportName(c.transport), " ", op,
                   " to peer ", c.peer, ": the destination ", describe(dst),
                   " belongs to another rank than the connection's peer");
  MESHCOMM_REQUIRE(rangeWithin(offset, bytes, dst.size()), "rank ", c.rank, ": ", transportName(c.transport),
                   " ", op, " to peer ", c.peer, ": destination range [", offset, ", +", bytes,
                   " bytes) exceeds ", describe(dst));
}

void checkLocalSource(const ConnectionLabel& c, const RegisteredMemory& src, uint64_t offset,
                      uint64_t bytes) {
  MESHCOMM_REQUIRE(static_cast<bool>(src), "rank ", c.rank, ": ", transportName(c.transport),
                   " write to peer ", c.peer, ": the source is an empty RegisteredMemory");
  MESHCOMM_REQUIRE(src.isLocal() && src.data() != nullptr, "rank ", c.rank, ": ", transportName(c.transport),
                   " write to peer ", c.peer, ": the source ", describe(src), " is not this rank's memory");
  MESHCOMM_REQUIRE(rangeWithin(offset, bytes, src.size()), "rank ", c.rank, ": ", transportName(c.transport),
                   " write to peer ", c.peer, ": source range [", offset, ", +", bytes, " bytes) exceeds ",
                   describe(src));
}

void checkTokenAlignment(const ConnectionLabel& c, const RegisteredMemory& dst, uint64_t offset) {
  MESHCOMM_REQUIRE(offset % 8 == 0, "rank ", c.rank, ": ", transportName(c.transport),
                   " updateAndSync to peer ", c.peer, ": offset ", offset, " in ", describe(dst),
                   " is not 8-byte aligned");
}

double flushTimeoutSec(double timeoutSec) {
  if (timeoutSec >= 0) return timeoutSec;
  const int64_t sec = envInt("MESHCOMM_FLUSH_TIMEOUT");
  MESHCOMM_REQUIRE(sec > 0, "MESHCOMM_FLUSH_TIMEOUT=", sec, " must be a positive number of seconds");
  return static_cast<double>(sec);
}

}  // namespace meshcomm::internal
