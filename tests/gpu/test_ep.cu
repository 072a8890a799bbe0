// EpBuffer (include/meshcomm/ep/ep_buffer.hpp) across GPUs against a host reference that every rank builds
// from all ranks' seeded inputs: the layout, dispatch (rows in (source rank, token) order, local expert ids,
// weights, scales, source indices, the rank prefix matrix, the host's counts, -1 past the received rows) and
// combine (the sum over the ranks each token went to, weights included), over several calls with new data
// (the epochs advance), on poisoned outputs. LowLatencyBuffer likewise: the expert-major layout (counts,
// layout ranges, source tokens, BF16 rows or FP8 bytes and scales from the same cast on the host) and the
// weighted combine, with the phases launched together and apart, over calls that reuse both region halves.
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "gpu_test_env.hpp"
#include "meshcomm/comm.hpp"
#include "meshcomm/ep/ep_buffer.hpp"
#include "meshcomm/ep/low_latency_buffer.hpp"

namespace meshcomm::test {
namespace {

// One rank's inputs of one call, from a seed every rank can recompute.
struct RankInputs {
  int tokens;
  std::vector<int64_t> topkIdx;  // [tokens][topk]
  std::vector<float> weights;    // [tokens][topk]
  std::vector<float> scales;     // [tokens][scales]
  std::vector<__nv_bfloat16> x;  // [tokens][hidden]
};

RankInputs makeInputs(uint64_t seed, int rank, int tokens, int hidden, int topk, int scales, int experts) {
  Rng rng(seed ^ (0x9E3779B97F4A7C15ull * (rank + 1)));
  RankInputs in;
  in.tokens = tokens;
  std::vector<int> order(experts);
  for (int t = 0; t < tokens; ++t) {
    std::iota(order.begin(), order.end(), 0);
    for (int i = experts - 1; i > 0; --i) std::swap(order[i], order[rng.uniform(0, i)]);
    for (int k = 0; k < topk; ++k) {
      in.topkIdx.push_back(rng.uniform(0, 9) == 0 ? -1 : order[k]);  // some slots unused
      in.weights.push_back(static_cast<float>(rng.uniform(1, 64)) / 16.0f);
    }
    for (int c = 0; c < scales; ++c) in.scales.push_back(static_cast<float>(rng.uniform(1, 1000)));
    for (int h = 0; h < hidden; ++h)
      in.x.push_back(__float2bfloat16(static_cast<float>(rng.uniform(0, 12)) - 6.0f));
  }
  return in;
}

template <typename T>
std::vector<T> download(const GpuBuffer& b, size_t count) {
  std::vector<T> v(count);
  if (count) MESHCOMM_CUDA_CHECK(cudaMemcpy(v.data(), b.data(), count * sizeof(T), cudaMemcpyDeviceToHost));
  return v;
}

// A device copy of `v` (at least 16 bytes), kept alive by `keep`.
template <typename T>
GpuBuffer& upload(std::vector<std::shared_ptr<GpuBuffer>>& keep, const std::vector<T>& v) {
  keep.push_back(std::make_shared<GpuBuffer>(std::max<size_t>(16, v.size() * sizeof(T))));
  if (!v.empty()) copyToDevice(keep.back()->data(), v.data(), v.size() * sizeof(T));
  return *keep.back();
}

class Ep : public GpuTest {};

TEST_F(Ep, DispatchAndCombineMatchTheHostReference) {
  MESHCOMM_TEST_REQUIRE_RANKS(2);
  Comm& c = adopt(freshComm());
  const int R = worldSize(), me = rank();
  const int hidden = 256, topk = 4, nScales = 2, experts = 4 * R, El = experts / R;
  ep::EpBuffer& buf = keep<ep::EpBuffer>(c, size_t{64} << 20, 8);
  const ep::Shape shape{hidden * 2, nScales, topk, experts};
  for (int call = 0; call < 3; ++call) {
    const uint64_t seed = testSeed() + 1000 * call;
    std::vector<RankInputs> all;
    for (int r = 0; r < R; ++r)
      all.push_back(makeInputs(seed, r, 97 + 61 * r + 13 * call, hidden, topk, nScales, experts));
    const RankInputs& mine = all[me];
    const int T = mine.tokens;
    // Reference: which ranks each token goes to, counts, and this rank's received rows in (source, token)
    // order.
    auto ranksOf = [&](const RankInputs& in, int t) {
      std::vector<bool> to(R, false);
      for (int k = 0; k < topk; ++k)
        if (in.topkIdx[t * topk + k] >= 0) to[in.topkIdx[t * topk + k] / El] = true;
      return to;
    };
    std::vector<int> refPerRank(R, 0), refPerExpert(experts, 0);
    for (int t = 0; t < T; ++t) {
      const auto to = ranksOf(mine, t);
      for (int r = 0; r < R; ++r) refPerRank[r] += to[r];
      for (int k = 0; k < topk; ++k)
        if (mine.topkIdx[t * topk + k] >= 0) ++refPerExpert[mine.topkIdx[t * topk + k]];
    }
    struct RefRow {
      int src, token;
    };
    std::vector<RefRow> refRows;
    std::vector<int> refLocalExpert(El, 0);
    std::vector<std::vector<int>> received(R, std::vector<int>(R, 0));  // [src][dst]
    for (int s = 0; s < R; ++s) {
      for (int t = 0; t < all[s].tokens; ++t) {
        const auto to = ranksOf(all[s], t);
        for (int d = 0; d < R; ++d) received[s][d] += to[d];
        if (!to[me]) continue;
        refRows.push_back({s, t});
        for (int k = 0; k < topk; ++k) {
          const int64_t e = all[s].topkIdx[t * topk + k];
          if (e >= me * El && e < (me + 1) * El) ++refLocalExpert[e - me * El];
        }
      }
    }
    std::vector<std::shared_ptr<GpuBuffer>> bufs;
    GpuBuffer& dTopk = upload(bufs, mine.topkIdx);
    GpuBuffer& dWeights = upload(bufs, mine.weights);
    GpuBuffer& dScales = upload(bufs, mine.scales);
    GpuBuffer& dX = upload(bufs, mine.x);
    GpuBuffer dPerRank(sizeof(int) * R), dPerExpert(sizeof(int) * experts), dInRank(std::max(16, T * R));
    buf.layout(static_cast<const int64_t*>(dTopk.data()), T, shape,
               {static_cast<int*>(dPerRank.data()), static_cast<int*>(dPerExpert.data()),
                static_cast<bool*>(dInRank.data())},
               stream());
    syncAndCheck();
    EXPECT_EQ(download<int>(dPerRank, R), refPerRank) << "call " << call;
    EXPECT_EQ(download<int>(dPerExpert, experts), refPerExpert) << "call " << call;

    ep::DispatchInputs in;
    in.tokens = T;
    in.x = dX.data();
    in.scales = static_cast<const float*>(dScales.data());
    in.topkIdx = static_cast<const int64_t*>(dTopk.data());
    in.topkWeights = static_cast<const float*>(dWeights.data());
    in.tokenInRank = static_cast<const bool*>(dInRank.data());
    in.tokensPerRank = static_cast<const int*>(dPerRank.data());
    in.tokensPerExpert = static_cast<const int*>(dPerExpert.data());
    if (call == 1) {
      // A dispatch whose receive never runs (as when the caller fails between the two calls), sending only
      // the first half of the tokens: the next receive must take its own send's rows, not these.
      ep::DispatchInputs half = in;
      half.tokens = T / 2;
      buf.dispatchSend(half, shape, stream());
      (void)buf.waitReceiveCounts(60);
    }
    buf.dispatchSend(in, shape, stream());
    const ep::ReceiveCounts counts = buf.waitReceiveCounts(60);
    ASSERT_EQ(counts.rows, static_cast<int64_t>(refRows.size())) << "call " << call;
    EXPECT_EQ(counts.perLocalExpert, refLocalExpert) << "call " << call;
    const int64_t cap = counts.rows + 5;  // rows past the received ones get topk -1
    GpuBuffer oX(cap * hidden * 2 + 16), oScales(cap * nScales * 4 + 16), oTopk(cap * topk * 8 + 16),
        oWeights(cap * topk * 4 + 16), oSrc(cap * 4 + 16), oPrefix(R * R * 4), oRows(16);
    MESHCOMM_CUDA_CHECK(cudaMemsetAsync(oX.data(), 0x7f, oX.size(), stream()));
    MESHCOMM_CUDA_CHECK(cudaMemsetAsync(oTopk.data(), 0x7f, oTopk.size(), stream()));
    ep::DispatchOutputs out;
    out.capacityRows = cap;
    out.x = oX.data();
    out.scales = static_cast<float*>(oScales.data());
    out.topkIdx = static_cast<int64_t*>(oTopk.data());
    out.topkWeights = static_cast<float*>(oWeights.data());
    out.srcIdx = static_cast<int*>(oSrc.data());
    out.rankPrefix = static_cast<int*>(oPrefix.data());
    out.receivedRows = static_cast<int*>(oRows.data());
    buf.dispatchReceive(out, shape, stream());
    syncAndCheck();
    const auto gx = download<__nv_bfloat16>(oX, cap * hidden);
    const auto gTopk = download<int64_t>(oTopk, cap * topk);
    const auto gW = download<float>(oWeights, cap * topk);
    const auto gScales = download<float>(oScales, cap * nScales);
    const auto gSrc = download<int>(oSrc, cap);
    const auto gPrefix = download<int>(oPrefix, R * R);
    uint64_t bad = 0;
    for (size_t i = 0; i < refRows.size(); ++i) {
      const RankInputs& src = all[refRows[i].src];
      const int t = refRows[i].token;
      if (gSrc[i] != t) ++bad;
      if (std::memcmp(&gx[i * hidden], &src.x[t * hidden], hidden * 2) != 0) ++bad;
      for (int c2 = 0; c2 < nScales; ++c2)
        if (gScales[i * nScales + c2] != src.scales[t * nScales + c2]) ++bad;
      for (int k = 0; k < topk; ++k) {
        const int64_t e = src.topkIdx[t * topk + k];
        const bool local = e >= me * El && e < (me + 1) * El;
        if (gTopk[i * topk + k] != (local ? e - me * El : -1)) ++bad;
        if (gW[i * topk + k] != (local ? src.weights[t * topk + k] : 0.0f)) ++bad;
      }
    }
    for (int64_t i = counts.rows; i < cap; ++i)
      for (int k = 0; k < topk; ++k)
        if (gTopk[i * topk + k] != -1) ++bad;
    for (int i = 0; i < R; ++i)
      for (int j = 0; j < R; ++j) {
        int sum = 0;
        for (int s = 0; s <= i; ++s) sum += received[s][j];
        if (gPrefix[i * R + j] != sum) ++bad;
      }
    EXPECT_EQ(bad, 0u) << "call " << call << ": dispatch outputs differ from the reference in " << bad
                       << " places";

    // Combine with identity experts: each token comes back once from every rank it went to.
    GpuBuffer cX(std::max(16, T * hidden * 2)), cW(std::max(16, T * topk * 4));
    MESHCOMM_CUDA_CHECK(cudaMemsetAsync(cX.data(), 0x7f, cX.size(), stream()));
    ep::CombineInputs ci;
    ci.rows = static_cast<int>(counts.rows);
    ci.y = oX.data();
    ci.topkWeights = static_cast<const float*>(oWeights.data());
    ci.srcIdx = static_cast<const int*>(oSrc.data());
    ci.rankPrefix = static_cast<const int*>(oPrefix.data());
    ci.tokens = T;
    ci.tokenInRank = static_cast<const bool*>(dInRank.data());
    buf.combine(ci, shape, {cX.data(), static_cast<float*>(cW.data())}, stream());
    syncAndCheck();
    const auto gc = download<__nv_bfloat16>(cX, static_cast<size_t>(T) * hidden);
    const auto gcw = download<float>(cW, static_cast<size_t>(T) * topk);
    uint64_t badCombine = 0;
    for (int t = 0; t < T; ++t) {
      const auto to = ranksOf(mine, t);
      const int n = static_cast<int>(std::count(to.begin(), to.end(), true));
      for (int h = 0; h < hidden; ++h)
        if (__bfloat162float(gc[t * hidden + h]) != n * __bfloat162float(mine.x[t * hidden + h]))
          ++badCombine;
      for (int k = 0; k < topk; ++k) {
        const float expected = mine.topkIdx[t * topk + k] >= 0 ? mine.weights[t * topk + k] : 0.0f;
        if (gcw[t * topk + k] != expected) ++badCombine;
      }
    }
    EXPECT_EQ(badCombine, 0u) << "call " << call << ": combine differs from the reference in " << badCombine
                              << " places";
    bootstrap().barrier();
  }
  c.checkError();
}

// The low-latency kernel's FP8 cast of one token on the host (scale 448 / amax per 128 channels, saturating;
// the inverse scale as amax * (1 / 448), DeepEP's arithmetic, so the bits match).
void castRowToFp8(const __nv_bfloat16* x, int hidden, uint8_t* q, float* scaleInv) {
  for (int g = 0; g < hidden / 128; ++g) {
    float amax = 0.0f;
    for (int i = 0; i < 128; ++i) amax = std::max(amax, std::fabs(__bfloat162float(x[g * 128 + i])));
    amax = std::max(amax, 1e-4f);
    const float scale = 448.0f / amax;
    scaleInv[g] = amax * (1.0f / 448.0f);
    for (int i = 0; i < 128; i += 2) {
      const __nv_fp8x2_storage_t pair = __nv_cvt_float2_to_fp8x2(
          make_float2(__bfloat162float(x[g * 128 + i]) * scale, __bfloat162float(x[g * 128 + i + 1]) * scale),
          __NV_SATFINITE, __NV_E4M3);
      std::memcpy(q + g * 128 + i, &pair, 2);
    }
  }
}

TEST_F(Ep, LowLatencyDispatchAndCombineMatchTheHostReference) {
  MESHCOMM_TEST_REQUIRE_RANKS(2);
  Comm& c = adopt(freshComm());
  const int R = worldSize(), me = rank();
  const int M = 64, hidden = 512, topk = 4, experts = 3 * R, El = experts / R, RM = R * M, G = hidden / 128;
  const ep::LowLatencyShape shape{M, hidden, experts, topk};
  ep::LowLatencyBuffer& buf =
      keep<ep::LowLatencyBuffer>(c, ep::LowLatencyBuffer::bytesFor(M, hidden, R, experts), 8);
  GpuBuffer stats(sizeof(int) * El);
  std::vector<int> statsRef(El, 0);
  for (int call = 0; call < 5; ++call) {
    const bool fp8 = call % 2 == 1, split = call >= 3;
    const uint64_t seed = testSeed() + 1000 * call;
    std::vector<RankInputs> all;
    for (int r = 0; r < R; ++r)
      all.push_back(makeInputs(seed, r, M - 7 * r - call, hidden, topk, 0, experts));
    const RankInputs& mine = all[me];
    std::vector<std::shared_ptr<GpuBuffer>> bufs;
    GpuBuffer& dX = upload(bufs, mine.x);
    GpuBuffer& dTopk = upload(bufs, mine.topkIdx);
    GpuBuffer& dWeights = upload(bufs, mine.weights);
    GpuBuffer oX(static_cast<size_t>(El) * RM * hidden * 2), oScales(sizeof(float) * El * G * RM),
        oCount(sizeof(int) * El), oSrc(sizeof(int) * El * RM), oRange(sizeof(int64_t) * El * R);
    MESHCOMM_CUDA_CHECK(cudaMemsetAsync(oSrc.data(), 0x7f, oSrc.size(), stream()));
    ep::LowLatencyDispatchArgs a;
    a.tokens = mine.tokens;
    a.x = dX.data();
    a.topkIdx = static_cast<const int64_t*>(dTopk.data());
    a.fp8 = fp8;
    a.recvX = oX.data();
    a.recvScales = oScales.data();
    a.recvCount = static_cast<int32_t*>(oCount.data());
    a.srcInfo = static_cast<int32_t*>(oSrc.data());
    a.layoutRange = static_cast<int64_t*>(oRange.data());
    a.cumulativeRecvStats = static_cast<int32_t*>(stats.data());
    if (split) {
      const uint64_t ticket = buf.dispatch(a, shape, ep::kLowLatencySend, 0, stream());
      buf.dispatch(a, shape, ep::kLowLatencyReceive, ticket, stream());
    } else {
      buf.dispatch(a, shape, ep::kLowLatencyBoth, 0, stream());
    }
    syncAndCheck();
    const auto gCount = download<int>(oCount, El);
    const auto gSrc = download<int>(oSrc, static_cast<size_t>(El) * RM);
    const auto gRange = download<int64_t>(oRange, static_cast<size_t>(El) * R);
    const auto gX = download<uint8_t>(oX, static_cast<size_t>(El) * RM * hidden * 2);
    const auto gScales = download<float>(oScales, static_cast<size_t>(El) * G * RM);
    uint64_t bad = 0;
    std::vector<uint8_t> q(hidden);
    std::vector<float> sInv(G);
    for (int el = 0; el < El; ++el) {
      const int64_t e = static_cast<int64_t>(me) * El + el;
      int row = 0;
      for (int s = 0; s < R; ++s) {
        const int begin = row;
        for (int t = 0; t < all[s].tokens; ++t) {
          bool chosen = false;
          for (int k = 0; k < topk; ++k) chosen |= all[s].topkIdx[t * topk + k] == e;
          if (!chosen) continue;
          const int64_t at = static_cast<int64_t>(el) * RM + row;
          if (gSrc[at] != t) ++bad;
          const __nv_bfloat16* x = &all[s].x[static_cast<size_t>(t) * hidden];
          if (fp8) {
            castRowToFp8(x, hidden, q.data(), sInv.data());
            if (std::memcmp(&gX[at * hidden], q.data(), hidden) != 0) ++bad;
            for (int g = 0; g < G; ++g)
              if (gScales[(static_cast<int64_t>(el) * G + g) * RM + row] != sInv[g]) ++bad;
          } else if (std::memcmp(&gX[at * hidden * 2], x, hidden * 2) != 0) {
            ++bad;
          }
          ++row;
        }
        if (gRange[el * R + s] != ((static_cast<int64_t>(begin) << 32) | (row - begin))) ++bad;
      }
      if (gCount[el] != row) ++bad;
      statsRef[el] += row;
    }
    EXPECT_EQ(bad, 0u) << "call " << call << (fp8 ? " (fp8)" : " (bf16)") << ": dispatch differs in " << bad
                       << " places";
    EXPECT_EQ(download<int>(stats, El), statsRef) << "call " << call << ": cumulative receive statistics";
    if (!fp8) {
      // Experts return their rows as they came; the owner sums weight x row over its top-k.
      GpuBuffer out(std::max<size_t>(16, static_cast<size_t>(mine.tokens) * hidden * 2));
      ep::LowLatencyCombineArgs ca;
      ca.y = oX.data();
      ca.srcInfo = a.srcInfo;
      ca.layoutRange = a.layoutRange;
      ca.tokens = mine.tokens;
      ca.topkIdx = a.topkIdx;
      ca.topkWeights = static_cast<const float*>(dWeights.data());
      ca.out = out.data();
      if (split) {
        const uint64_t ticket = buf.combine(ca, shape, ep::kLowLatencySend, 0, stream());
        buf.combine(ca, shape, ep::kLowLatencyReceive, ticket, stream());
      } else {
        buf.combine(ca, shape, ep::kLowLatencyBoth, 0, stream());
      }
      syncAndCheck();
      const auto gOut = download<__nv_bfloat16>(out, static_cast<size_t>(mine.tokens) * hidden);
      uint64_t badCombine = 0;
      for (int t = 0; t < mine.tokens; ++t) {
        float w = 0.0f;
        for (int k = 0; k < topk; ++k)
          if (mine.topkIdx[t * topk + k] >= 0) w += mine.weights[t * topk + k];
        for (int h = 0; h < hidden; ++h) {
          const float want = __bfloat162float(__float2bfloat16(w * __bfloat162float(mine.x[t * hidden + h])));
          if (__bfloat162float(gOut[t * hidden + h]) != want) ++badCombine;
        }
      }
      EXPECT_EQ(badCombine, 0u) << "call " << call << ": combine differs in " << badCombine << " places";
    }
    bootstrap().barrier();
  }
  c.checkError();
}

}  // namespace
}  // namespace meshcomm::test
