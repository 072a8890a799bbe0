#include "meshcomm/env.hpp"

#include <cstdlib>
#include <cstring>

#include "base/bounded_text.hpp"
#include "meshcomm/errors.hpp"

namespace meshcomm {

const std::vector<EnvVarInfo>& envRegistry() {
  static const std::vector<EnvVarInfo> registry = {
      {"MESHCOMM_LOG_LEVEL", EnvType::String, "WARN",
       "Host log level: ERROR, WARN, INFO or DEBUG (any other value: building a Communicator fails naming "
       "it)."},
      {"MESHCOMM_BOOTSTRAP_TIMEOUT", EnvType::Int, "120",
       "Seconds any blocking bootstrap operation (connect, send, recv, collectives) may take before it fails "
       "with an error naming rank, peer and operation; must be positive (createUniqueId and TcpBootstrap "
       "refuse 0 or less)."},
      {"MESHCOMM_BOOTSTRAP_ADDR", EnvType::String, "",
       "host:port of the bootstrap root when ranks start from the environment. Default: MASTER_ADDR and "
       "MASTER_PORT+1 (MASTER_PORT itself is usually torch's TCPStore)."},
      {"MESHCOMM_BOOTSTRAP_SECRET", EnvType::String, "",
       "32 hex digits: the 128-bit secret ranks started from the environment prove to each other. "
       "meshcomm-run sets a random one; without it a secret is derived from the launch variables."},
      {"MESHCOMM_SOCKET_IFNAME", EnvType::String, "",
       "Network interface whose IPv4 address a UniqueId advertises (default: first non-loopback, else lo)."},
      {"MESHCOMM_BOOTSTRAP_MAX_MESSAGE", EnvType::Int, "1073741824",
       "Largest bootstrap message in bytes a rank accepts, a positive integer (anything else fails naming "
       "the "
       "variable); a longer length prefix closes the sender's connection. The messages a peer has waiting "
       "unreceived may add up to twice this many bytes (and 65536 messages)."},
      {"MESHCOMM_TRANSPORT", EnvType::String, "auto",
       "Transport for peer connections: auto (CUDA IPC on the same host, TCP otherwise) or tcp (forces TCP "
       "everywhere, to test the inter-node path on one host)."},
      {"MESHCOMM_DEVICE_TIMEOUT_MS", EnvType::Int, "30000",
       "Milliseconds a device-side spin-wait may last before it records (rank, peer, operation) and gives "
       "up; "
       "0 disables the timeout."},
      {"MESHCOMM_FLUSH_TIMEOUT", EnvType::Int, "120",
       "Seconds Connection::flush() without an explicit timeout waits for the connection's earlier "
       "operations "
       "before it fails naming rank and peer (a positive number)."},
      {"MESHCOMM_FIFO_SIZE", EnvType::Int, "512", "Entries in each PortChannel FIFO (a power of two)."},
      {"MESHCOMM_TCP_CHUNK", EnvType::Int, "4194304",
       "Bytes of the pinned staging buffer used per TCP connection for device-memory transfers."},
      {"MESHCOMM_TCP_TIMEOUT", EnvType::Int, "120",
       "Seconds a TCP connection may wait for progress of one chunk (send, receive, flush ack send) before "
       "it "
       "fails with an error naming rank and peer."},
      {"MESHCOMM_SCRATCH_BYTES", EnvType::Int, "134217728",
       "Bytes of registered scratch memory per rank that the scratch reduction pipelines share (mapped on "
       "every peer)."},
      {"MESHCOMM_PACKET_BYTES", EnvType::Int, "335544320",
       "Bytes of the registered packet buffer per rank (mapped on every peer): the data-movement engine's "
       "stream buffers take half, LL algorithms reserve their regions of the rest."},
      {"MESHCOMM_CHANNELS_PER_PEER", EnvType::Int, "128",
       "MemoryChannels (each with its own semaphore pair) the collectives build to every peer."},
      {"MESHCOMM_ALGO_TABLE", EnvType::String, "",
       "Path of a JSON algorithm selection table (docs/collectives.md) used instead of the built-in one; "
       "every "
       "rank must load the same table (checked at Comm creation) and every rule must name a registered "
       "algorithm "
       "of its collective."},
      {"MESHCOMM_PLAN_DIR", EnvType::String, "",
       "Directory of execution plans (*.json, written with meshcomm.dsl) that every communicator adds to its "
       "algorithms after the built-in ones, so MESHCOMM_ALGO_TABLE and MESHCOMM_ALGO can name them; every "
       "rank must find the same plans (checked at Comm creation)."},
      {"MESHCOMM_EP_NODE_SIZE", EnvType::Int, "0",
       "Ranks per node of meshcomm.ep's normal mode: nodes are blocks of this many consecutive ranks, "
       "NVLink inside a node, PortChannels over TCP between nodes (a divisor of the group size; on one host "
       "it emulates several nodes). 0: the nodes of the bootstrap's host ids."},
      {"MESHCOMM_EP_RECEIVE_BLOCKS", EnvType::Int, "0",
       "Blocks of a meshcomm.ep normal-mode dispatch that copy received rows out, beside the blocks that "
       "send "
       "(together num_sms). 0: half of num_sms. docs/ep.md, \"Intranode dispatch\"."},
      {"MESHCOMM_TRACE", EnvType::String, "",
       "File prefix of device event traces (docs/trace.md): the plan executor and meshcomm.ep's "
       "normal-mode kernels record timestamped events, written at teardown to "
       "<prefix>.<component>.<k>.rank<r>.json. Unset: off."},
      {"MESHCOMM_TRACE_EVENTS", EnvType::Int, "262144",
       "Events a device trace holds per component and rank (16 bytes each); later events are dropped and "
       "counted."},
      {"MESHCOMM_ALGO", EnvType::String, "",
       "Forces algorithms per collective, e.g. allreduce=allreduce_rsag,alltoall=alltoall_scratch; a name "
       "that is not a registered algorithm of its collective fails the Comm's creation, and a forced "
       "algorithm that cannot run a call is an error."},
      {"MESHCOMM_TORCH_ASYNC_ERROR_HANDLING", EnvType::Int, "3",
       "What the torch backend's watchdog does when a process group fails (an op past its timeout, a device "
       "error): 0 record only (the next op or wait raises), 1 abort the group's Comm and terminate the "
       "process, 2 abort the Comm (the next op or wait raises DistBackendError), 3 terminate the process "
       "(torch's TORCH_NCCL_ASYNC_ERROR_HANDLING values and default)."},
      {"MESHCOMM_TORCH_WATCHDOG_INTERVAL_MS", EnvType::Int, "100",
       "Milliseconds between two checks of the torch backend's watchdog thread (one per process group); 0 "
       "starts no watchdog."},
  };
  return registry;
}

namespace {

const EnvVarInfo& lookup(const char* name, EnvType type) {
  for (const auto& v : envRegistry()) {
    if (std::strcmp(v.name, name) == 0) {
      if (v.type != type)
        MESHCOMM_THROW(ErrorCode::InternalError, "environment variable ", name, " read with wrong type");
      return v;
    }
  }
  MESHCOMM_THROW(ErrorCode::InternalError, "environment variable ", name,
                 " is not declared in the env registry");
}

const char* valueOrDefault(const EnvVarInfo& v) {
  const char* s = std::getenv(v.name);
  return (s && *s) ? s : v.defaultValue;
}

}  // namespace

int64_t envInt(const char* name) {
  const auto& v = lookup(name, EnvType::Int);
  const char* s = valueOrDefault(v);
  char* end = nullptr;
  errno = 0;
  long long x = std::strtoll(s, &end, 0);
  if (errno != 0 || end == s || *end != '\0') {
    MESHCOMM_THROW(ErrorCode::InvalidUsage, "environment variable ", name, "='", boundedText(s),
                   "' is not an integer");
  }
  return x;
}

bool envBool(const char* name) {
  const auto& v = lookup(name, EnvType::Bool);
  std::string s = valueOrDefault(v);
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (s == "1" || s == "true" || s == "yes" || s == "on") return true;
  if (s == "0" || s == "false" || s == "no" || s == "off" || s.empty()) return false;
  MESHCOMM_THROW(ErrorCode::InvalidUsage, "environment variable ", name, "='", boundedText(s),
                 "' is not a boolean");
}

std::string envString(const char* name) {
  return valueOrDefault(lookup(name, EnvType::String));
}

std::optional<std::string> envRaw(const char* name) {
  bool declared = false;
  for (const auto& v : envRegistry()) declared = declared || std::strcmp(v.name, name) == 0;
  if (!declared) MESHCOMM_THROW(ErrorCode::InternalError, "environment variable ", name, " is not declared");
  const char* s = std::getenv(name);
  if (s && *s) return std::string(s);
  return std::nullopt;
}

}  // namespace meshcomm
