// torchcomms hints (see hints.hpp).
#include "hints.hpp"

#include <c10/util/Exception.h>

#include <cstdint>
#include <mutex>
#include <set>

namespace meshcomm::torch_backend {

namespace {

constexpr const char* kPrefix = "meshcomm::";

bool addressedToMeshcomm(const std::string& key) {
  return key.rfind(kPrefix, 0) == 0;
}

std::string bareKey(const std::string& key) {
  return addressedToMeshcomm(key) ? key.substr(std::string(kPrefix).size()) : key;
}

// One warning per foreign key and process.
void ignoreForeign(int rank, const char* where, const std::string& key) {
  static std::mutex mutex;
  static std::set<std::string> warned;
  std::lock_guard<std::mutex> lock(mutex);
  if (!warned.insert(key).second) return;
  TORCH_WARN("meshcomm: rank ", rank, ": ", where, ": ignoring hint '", key,
             "' (not meshcomm's; meshcomm's hints are prefixed meshcomm::, docs/torchcomms.md)");
}

uint64_t nonNegative(int rank, const std::string& key, const std::string& value, uint64_t max) {
  const bool digits =
      !value.empty() && value.size() <= 19 && value.find_first_not_of("0123456789") == std::string::npos;
  const uint64_t v = digits ? std::stoull(value) : 0;
  TORCH_CHECK(digits && v <= max, "meshcomm: rank ", rank, ": init: hint ", key, "='", value,
              "' is not an integer in [0, ", max, "]");
  return v;
}

}  // namespace

CommSettings commSettings(int rank, const Hints& hints) {
  CommSettings s;
  for (const auto& [key, value] : hints) {
    const std::string k = bareKey(key);
    if (k == "scratch_bytes") {
      s.resources.scratchBytes = nonNegative(rank, key, value, uint64_t{1} << 40);
    } else if (k == "packet_bytes") {
      s.resources.packetBytes = nonNegative(rank, key, value, uint64_t{1} << 40);
    } else if (k == "channels_per_peer") {
      s.resources.channelsPerPeer = static_cast<int>(nonNegative(rank, key, value, 64));
    } else if (k == "persistent_store") {
      TORCH_CHECK(value == "true" || value == "false", "meshcomm: rank ", rank, ": init: hint ", key, "='",
                  value, "' is not true or false");
    } else if (addressedToMeshcomm(key)) {
      TORCH_CHECK(false, "meshcomm: rank ", rank, ": init: unknown hint '", key,
                  "' (meshcomm honours scratch_bytes, packet_bytes, channels_per_peer, persistent_store)");
    } else {
      ignoreForeign(rank, "init", key);
    }
  }
  return s;
}

void checkOpHints(const OpContext& ctx, const Hints& hints) {
  for (const auto& [key, value] : hints) {
    TORCH_CHECK(!addressedToMeshcomm(key), "meshcomm: rank ", ctx.rank, ": ", ctx.op, ": unknown hint '", key,
                "' (meshcomm ops take no hints)");
    ignoreForeign(ctx.rank, ctx.op, key);
  }
}

}  // namespace meshcomm::torch_backend
