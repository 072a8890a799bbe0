// The built-in selection table. Thresholds are nccl-tests message sizes (CollectiveArgs::messageBytes).
// Every rule names a built-in algorithm of its collective (a Comm rejects a table naming anything else); the
// fallback (first supporting algorithm in registration order) covers every collective without a rule.
// Crossovers come from meshcomm-tune on 4x H200, bf16 (bench/results/2026-11-21-h200x4-tuned-4K-4M.json); an
// LL algorithm whose packet region cannot hold a call (larger worlds) declines it and the next matching rule
// applies. alltoallv and sendrecv rules cannot bound the size (each rank sees its own): sendrecv_ll and
// alltoallv_ll choose LL or the pairwise engine per pair inside one algorithm (ll_stream.hpp); alltoallv_ll
// declines device-side counts, which then go to alltoallv_scratch. allreduce one-shot up to 256 KiB on 2 and
// 4 ranks: with the coalesced LL pack layout it runs 256 KiB on 4x H200 in 11.0-11.9 us, two-shot
// in 13.5-13.8 (meshcomm-tune); on 2 ranks both move the same bytes over the one link and one-shot saves a
// hop. Larger worlds keep two-shot above 128 KiB: one-shot's traffic per rank grows with n - 1 (not measured
// beyond 4 GPUs). allgather_ll and alltoall_ll up to 1 MiB (one LL packet per thread): 8.4-8.8 us at 1 MiB
// vs 11.2-11.6 for the *_scratch engines on 4x H200, 6.5-6.6 vs 9.8-9.9 on 2 (meshcomm-tune and
// bench/results/2026-11-22-h200x4-ll-packet-per-thread.md).
// gather_stream / scatter_stream (the collective as nccl-tests' strided group on sendrecv_ll's
// kernels) where nccl-tests on the shim, which runs exactly that group, beat gather_ll/_scratch and
// scatter_ll/_scratch under meshcomm-bench on 4x H200 (gather 1 MiB 5.8 vs 7.6 us, 4 MiB 11.5 vs
// 12.2; scatter 1-64 KiB 3.2-3.5 vs 3.3-3.6) and, natively forced, on 2x H200 (gather 1 MiB
// 5.1 vs 7.5 for gather_scratch, scatter 1 MiB 6.0 vs 6.7; gather 4 MiB 11.5 vs 11.0, so not there on 2).
// bench/results/2026-11-22-h200x2-gather-scatter-stream.md.
// allreduce_twoshot_ll and reduce_scatter_ll up to 1 MiB: at 1 MiB both were the fastest native algorithm of
// their collective (registered buffers included) on 2x H100, 4x H200 and 4x H100; on 4x H100 against NCCL,
// allreduce 1 MiB 1.05x (allreduce_rsag, chosen before: 0.82x), reduce_scatter 512 KiB / 1 MiB 1.14x / 1.12x
// (reduce_scatter_scratch: 0.82x / 0.92x); bench/results/2026-11-27-h100x4-ops-host-cost.md.
#include "collectives/default_table.hpp"

namespace meshcomm {

const char* defaultSelectionTable() {
  return R"json({"rules": [
  {"collective": "allreduce", "max_bytes": 131072, "algorithm": "allreduce_oneshot_ll"},
  {"collective": "allreduce", "max_bytes": 262144, "world_size": 2, "algorithm": "allreduce_oneshot_ll"},
  {"collective": "allreduce", "max_bytes": 262144, "world_size": 4, "algorithm": "allreduce_oneshot_ll"},
  {"collective": "allreduce", "max_bytes": 1048576, "algorithm": "allreduce_twoshot_ll"},
  {"collective": "allreduce", "min_bytes": 1048577, "max_bytes": 16777216, "algorithm": "allreduce_zerocopy"},
  {"collective": "allreduce", "algorithm": "allreduce_rsag"},
  {"collective": "reduce_scatter", "max_bytes": 1048576, "algorithm": "reduce_scatter_ll"},
  {"collective": "reduce_scatter", "algorithm": "reduce_scatter_scratch"},
  {"collective": "reduce", "max_bytes": 524288, "algorithm": "reduce_direct"},
  {"collective": "reduce", "algorithm": "reduce_chain"},
  {"collective": "allgather", "max_bytes": 1048576, "algorithm": "allgather_ll"},
  {"collective": "allgather", "algorithm": "allgather_scratch"},
  {"collective": "alltoall", "max_bytes": 1048576, "algorithm": "alltoall_ll"},
  {"collective": "alltoall", "algorithm": "alltoall_scratch"},
  {"collective": "alltoallv", "algorithm": "alltoallv_ll"},
  {"collective": "alltoallv", "algorithm": "alltoallv_scratch"},
  {"collective": "broadcast", "max_bytes": 65536, "algorithm": "broadcast_ll"},
  {"collective": "broadcast", "max_bytes": 262144, "algorithm": "broadcast_scratch"},
  {"collective": "broadcast", "algorithm": "broadcast_chain"},
  {"collective": "gather", "max_bytes": 262144, "algorithm": "gather_ll"},
  {"collective": "gather", "max_bytes": 1048576, "algorithm": "gather_stream"},
  {"collective": "gather", "max_bytes": 4194304, "world_size": 4, "algorithm": "gather_stream"},
  {"collective": "gather", "algorithm": "gather_scratch"},
  {"collective": "scatter", "max_bytes": 65536, "world_size": 4, "algorithm": "scatter_stream"},
  {"collective": "scatter", "max_bytes": 262144, "algorithm": "scatter_ll"},
  {"collective": "scatter", "max_bytes": 1048576, "world_size": 2, "algorithm": "scatter_stream"},
  {"collective": "scatter", "algorithm": "scatter_scratch"},
  {"collective": "sendrecv", "algorithm": "sendrecv_ll"},
  {"collective": "sendrecv", "algorithm": "sendrecv_scratch"}
]})json";
}

}  // namespace meshcomm
