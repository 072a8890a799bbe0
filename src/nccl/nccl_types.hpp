// Pure translations between the NCCL API's types and meshcomm's (libmeshcomm_nccl.so; unit-tested on the
// CPU): data types, built-in reduction operators, error codes and their texts, the host value of a
// PreMulSum scalar given as raw element bytes, the checks of an ncclConfig_t and an ncclSimInfo_t, which
// rank creates each id of ncclCommInitRankScalable, and ncclGroupSimulateEnd's cost model.
#pragma once

#include <optional>
#include <string>

#include "meshcomm/algorithm.hpp"
#include "meshcomm/errors.hpp"
#include "meshcomm/nccl.h"
#include "meshcomm/types.hpp"

namespace meshcomm::nccl {

// The meshcomm type of an NCCL data type; nullopt for values outside ncclDataType_t.
std::optional<DataType> dataTypeOf(int ncclType);
// The built-in meshcomm operator of ncclSum..ncclAvg; nullopt otherwise (PreMulSum handles come from
// ncclRedOpCreatePreMulSum and are resolved per communicator).
std::optional<ReduceOp> builtinOpOf(int ncclOp);
// ncclResult_t of a meshcomm error code.
ncclResult_t resultOf(ErrorCode code);
// ncclGetErrorString's text.
const char* resultText(ncclResult_t r);
// The value of one element of `type` stored at `bytes` (host memory), as a double (exact for every type
// except 64-bit integers beyond 2^53).
double elementToDouble(const void* bytes, DataType type);
// Empty if `config` (may be null) is usable, else what is wrong (size/magic/version or an attribute).
std::string configProblem(const ncclConfig_t* config);
// Empty if `simInfo` is usable by ncclGroupSimulateEnd (set by NCCL_SIM_INFO_INITIALIZER), else what is
// wrong.
std::string simInfoProblem(const ncclSimInfo_t* simInfo);

// ncclCommInitRankScalable: NCCL associates id `id` of `nIds` with a block of consecutive ranks (the first
// nRanks % nIds blocks one rank larger) and documents that the block's first rank creates it. Returns that
// rank. Requires 1 <= nIds <= nRanks and 0 <= id < nIds.
int scalableIdCreator(int id, int nRanks, int nIds);

// ncclGroupSimulateEnd's estimate of one launch, in microseconds: latency + traffic / bandwidth, with the
// constants measured for `algorithm` on 4x H200 (docs/nccl.md lists them and their source); an algorithm
// without measurements gets those of its collective's large-message algorithm. `messageBytes` is
// CollectiveArgs::messageBytes (nccl-tests' size); the traffic is messageBytes times the bytes each rank
// moves per message byte (2(n-1)/n for allreduce, (n-1)/n for allgather, reduce_scatter, alltoall(v),
// gather and scatter, 1 for the others).
double estimateLaunchMicroseconds(Collective collective, const std::string& algorithm, size_t messageBytes,
                                  int nRanks);

}  // namespace meshcomm::nccl
