#include "transport/cuda_ipc_connection.hpp"

#include <algorithm>
#include <chrono>
#include <thread>

#include "base/cu_driver.hpp"
#include "base/logging.hpp"
#include "core/internal.hpp"
#include "meshcomm/errors.hpp"
#include "meshcomm/gpu_utils.hpp"

namespace meshcomm {

CudaIpcConnection::CudaIpcConnection(int rank, int peer, int cudaDevice)
    : rank_(rank), peer_(peer), device_(cudaDevice), stream_(cudaDevice) {}

CudaIpcConnection::~CudaIpcConnection() {
  // Events may be destroyed while pending: CUDA releases them once they complete.
  for (const auto& p : pending_) (void)cudaEventDestroy(p.event);
  for (cudaEvent_t e : spareEvents_) (void)cudaEventDestroy(e);
}

void CudaIpcConnection::checkMapped(const char* op, const RegisteredMemory& dst) const {
  MESHCOMM_REQUIRE(dst.data() != nullptr, "rank ", rank_, ": CudaIpc ", op, " to peer ", peer_,
                   ": memory id ", dst.id(), " of rank ", dst.rank(),
                   " is not mapped on this rank (host memory, or received while MESHCOMM_TRANSPORT=tcp)");
}

void CudaIpcConnection::write(const RegisteredMemory& dst, uint64_t dstOffset, const RegisteredMemory& src,
                              uint64_t srcOffset, uint64_t bytes) {
  internal::checkPeerDestination(label(), "write", dst, dstOffset, bytes);
  internal::checkLocalSource(label(), src, srcOffset, bytes);
  checkMapped("write", dst);
  if (bytes == 0) return;
  char* to = static_cast<char*>(dst.data()) + dstOffset;
  const char* from = static_cast<const char*>(src.data()) + srcOffset;
  CudaDeviceGuard guard(device_);
  std::lock_guard<std::mutex> lock(mutex_);
  MESHCOMM_CUDA_CHECK(cudaMemcpyAsync(to, from, bytes, cudaMemcpyDefault, stream_.get()));
  ++issued_;
}

void CudaIpcConnection::updateAndSync(const RegisteredMemory& dst, uint64_t dstOffset, uint64_t value) {
  internal::checkPeerDestination(label(), "updateAndSync", dst, dstOffset, sizeof(uint64_t));
  internal::checkTokenAlignment(label(), dst, dstOffset);
  checkMapped("updateAndSync", dst);
  const auto address = reinterpret_cast<CUdeviceptr>(static_cast<char*>(dst.data()) + dstOffset);
  MESHCOMM_REQUIRE(address % 8 == 0, "rank ", rank_, ": CudaIpc updateAndSync to peer ", peer_,
                   ": the mapped token address of memory id ", dst.id(), " + ", dstOffset,
                   " is not 8-byte aligned");
  CudaDeviceGuard guard(device_);
  std::lock_guard<std::mutex> lock(mutex_);
  // Default flags: the write is ordered after a fence over the stream's earlier writes (the copies above).
  MESHCOMM_CU(cuStreamWriteValue64, stream_.get(), address, static_cast<cuuint64_t>(value),
              CU_STREAM_WRITE_VALUE_DEFAULT);
  ++issued_;
}

bool CudaIpcConnection::queryStreamDone() {
  cudaError_t err = cudaStreamQuery(stream_.get());
  if (err == cudaErrorNotReady) return false;
  MESHCOMM_CUDA_CHECK(err);
  retireTicketsUpTo(issued_);
  completed_ = issued_;
  return true;
}

void CudaIpcConnection::retireTicketsUpTo(uint64_t completed) {
  while (!pending_.empty() && pending_.front().ticket <= completed) {
    spareEvents_.push_back(pending_.front().event);
    pending_.pop_front();
  }
}

void CudaIpcConnection::flush(double requestedSec) {
  const double timeoutSec = internal::flushTimeoutSec(requestedSec);
  const auto start = std::chrono::steady_clock::now();
  CudaDeviceGuard guard(device_);
  for (int round = 0;; ++round) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (queryStreamDone()) return;
    }
    if (std::chrono::steady_clock::now() - start > std::chrono::duration<double>(timeoutSec)) {
      MESHCOMM_THROW(ErrorCode::Timeout, "rank ", rank_, ": CudaIpc flush to peer ", peer_,
                     " timed out after ", timeoutSec, "s (copies still pending on device ", device_, ")");
    }
    // Copies finish in microseconds to milliseconds: poll hot first, then give the core away.
    if (round < 1000) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }
}

bool CudaIpcConnection::poll() {
  CudaDeviceGuard guard(device_);
  std::lock_guard<std::mutex> lock(mutex_);
  return queryStreamDone();
}

cudaEvent_t CudaIpcConnection::takeEvent() {
  if (!spareEvents_.empty()) {
    cudaEvent_t e = spareEvents_.back();
    spareEvents_.pop_back();
    return e;
  }
  cudaEvent_t e = nullptr;
  MESHCOMM_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  return e;
}

uint64_t CudaIpcConnection::requestFlush() {
  CudaDeviceGuard guard(device_);
  std::lock_guard<std::mutex> lock(mutex_);
  // Tickets are operation counts: one already covering every issued operation is reused.
  if (issued_ == completed_ || issued_ == lastTicket_) return issued_;
  cudaEvent_t e = takeEvent();
  cudaError_t err = cudaEventRecord(e, stream_.get());
  if (err != cudaSuccess) {
    spareEvents_.push_back(e);
    MESHCOMM_CUDA_CHECK(err);
  }
  pending_.push_back({issued_, e});
  lastTicket_ = issued_;
  return issued_;
}

bool CudaIpcConnection::flushCompleted(uint64_t ticket) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (completed_ >= ticket) return true;
  CudaDeviceGuard guard(device_);
  while (!pending_.empty()) {
    cudaError_t err = cudaEventQuery(pending_.front().event);
    if (err == cudaErrorNotReady) break;
    MESHCOMM_CUDA_CHECK(err);
    completed_ = std::max(completed_, pending_.front().ticket);
    retireTicketsUpTo(completed_);
  }
  return completed_ >= ticket;
}

namespace internal {

std::shared_ptr<Connection> makeCudaIpcConnection(Communicator& comm, int peer, int tag) {
  exchangeHello(comm, peer, tag, Transport::CudaIpc);
  requireStreamWriteValue64(comm.rank(), comm.cudaDevice());
  return std::make_shared<CudaIpcConnection>(comm.rank(), peer, comm.cudaDevice());
}

}  // namespace internal
}  // namespace meshcomm
