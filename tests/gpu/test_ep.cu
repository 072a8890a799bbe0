// EpBuffer (include/meshcomm/ep/ep_buffer.hpp) across GPUs against a host reference that every rank builds
// from all ranks' seeded inputs: the layout, dispatch (rows in (source rank, token) order, local expert ids,
// weights, scales, source indices, the rank prefix matrix, the host's counts, -1 past the received rows) and
// combine (the sum over the ranks each token went to, weights included), over several calls with new data
// (the epochs advance), on poisoned outputs; and a receive that does not fit the buffer is reported, not
// written.
#include <cuda_bf16.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "gpu_test_env.hpp"
#include "meshcomm/comm.hpp"
#include "meshcomm/ep/ep_buffer.hpp"

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

}  // namespace
}  // namespace meshcomm::test
