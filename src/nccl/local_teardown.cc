#include "nccl/local_teardown.hpp"

#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "base/logging.hpp"
#include "meshcomm/comm.hpp"

namespace meshcomm::nccl {

namespace {

struct Job {
  std::vector<std::unique_ptr<Comm>> parked;
  int handedOver = 0;
  bool aborted = false;
};
struct Registry {
  std::mutex mu;
  std::map<std::string, Job> jobs;
};

Registry& registry() {
  static Registry* r = new Registry();  // never destroyed: parked comms may outlive static destruction order
  return *r;
}

void tearDown(std::unique_ptr<Comm>& comm, bool abort) noexcept {
  try {
    if (abort) comm->abort();
  } catch (const std::exception& e) {
    MESHCOMM_LOG(WARN, "ncclCommAbort: ", e.what());
  }
  comm.reset();  // ~Comm logs, never throws
}

}  // namespace

void destroyWithLocalPeers(const std::string& jobKey, int localRanks, std::unique_ptr<Comm> comm,
                           bool abort) {
  if (abort) tearDown(comm, true);
  if (localRanks <= 1) {
    if (comm) tearDown(comm, false);
    return;
  }
  std::vector<std::unique_ptr<Comm>> all;
  bool jobAborted = false;
  {
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mu);
    Job& job = r.jobs[jobKey];
    if (comm) job.parked.push_back(std::move(comm));
    job.aborted = job.aborted || abort;
    if (++job.handedOver < localRanks) return;
    all = std::move(job.parked);
    jobAborted = job.aborted;
    r.jobs.erase(jobKey);
  }
  std::vector<std::thread> threads;
  threads.reserve(all.size());
  for (auto& c : all) {
    try {
      threads.emplace_back([&c, jobAborted] { tearDown(c, jobAborted); });
    } catch (const std::exception& e) {  // no thread: tear down here (may wait for the barrier's timeout)
      MESHCOMM_LOG(WARN, "ncclCommDestroy: cannot start a teardown thread: ", e.what());
      tearDown(c, jobAborted);
    }
  }
  for (auto& t : threads) t.join();
}

}  // namespace meshcomm::nccl
