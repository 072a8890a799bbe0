// Exchanges shared by the faces (see exchange.hpp).
#include "exchange.hpp"

#include <c10/util/Exception.h>

#include <type_traits>

namespace meshcomm::torch_backend {

void exchangeLists(Comm& comm, const std::vector<at::Tensor>& inputs, const std::vector<at::Tensor>& outputs,
                   cudaStream_t stream) {
  const int rank = comm.rank();
  asGroup(comm, [&](Comm& c) {
    for (int p = 0; p < c.size(); ++p) {
      if (p == rank) continue;
      const Elements send = movementView(inputs[p]);
      const Elements recv = movementView(outputs[p]);
      c.send(send.data, send.count, send.dtype, p, stream);
      c.recv(recv.data, recv.count, recv.dtype, p, stream);
    }
  });
  outputs[rank].copy_(inputs[rank], /*non_blocking=*/true);
}

template <typename Split>
void splitsToCounts(const OpContext& ctx, const char* argument, const std::vector<Split>& splits,
                    const at::Tensor& t, size_t viewCount, int size, std::vector<size_t>& counts,
                    std::vector<size_t>& displs) {
  TORCH_CHECK(t.dim() >= 1, "meshcomm: rank ", ctx.rank, ": ", ctx.op, ": ", argument,
              ": needs a tensor of at least one dimension");
  const int64_t rows = t.size(0);
  counts.assign(size, 0);
  displs.assign(size, 0);
  if (splits.empty()) {
    TORCH_CHECK(rows % size == 0, "meshcomm: rank ", ctx.rank, ": ", ctx.op, ": ", argument, ": ", rows,
                " rows do not split evenly over ", size, " ranks");
  } else {
    TORCH_CHECK(splits.size() == static_cast<size_t>(size), "meshcomm: rank ", ctx.rank, ": ", ctx.op, ": ",
                argument, ": ", splits.size(), " split sizes, expected one per rank (", size, ")");
    uint64_t sum = 0;
    for (Split s : splits) {
      if constexpr (std::is_signed_v<Split>) {
        TORCH_CHECK(s >= 0, "meshcomm: rank ", ctx.rank, ": ", ctx.op, ": ", argument,
                    ": negative split size ", s);
      }
      TORCH_CHECK(static_cast<uint64_t>(s) <= static_cast<uint64_t>(rows), "meshcomm: rank ", ctx.rank, ": ",
                  ctx.op, ": ", argument, ": split size ", s, " exceeds the tensor's ", rows, " rows");
      sum += static_cast<uint64_t>(s);
    }
    TORCH_CHECK(sum == static_cast<uint64_t>(rows), "meshcomm: rank ", ctx.rank, ": ", ctx.op, ": ", argument,
                ": split sizes sum to ", sum, " but the tensor has ", rows, " rows");
  }
  const size_t perRow = rows > 0 ? viewCount / static_cast<size_t>(rows) : 0;
  size_t offset = 0;
  for (int p = 0; p < size; ++p) {
    const size_t r = splits.empty() ? static_cast<size_t>(rows / size) : static_cast<size_t>(splits[p]);
    counts[p] = r * perRow;
    displs[p] = offset;
    offset += counts[p];
  }
}

template void splitsToCounts<int64_t>(const OpContext&, const char*, const std::vector<int64_t>&,
                                      const at::Tensor&, size_t, int, std::vector<size_t>&,
                                      std::vector<size_t>&);
template void splitsToCounts<uint64_t>(const OpContext&, const char*, const std::vector<uint64_t>&,
                                       const at::Tensor&, size_t, int, std::vector<size_t>&,
                                       std::vector<size_t>&);

}  // namespace meshcomm::torch_backend
