"""Algorithm.execute's size rules (docs/python.md): buffer bytes -> element count per collective, and the
errors, checked without a Comm through meshcomm._meshcomm._execute_args (what execute builds)."""

import pytest

import meshcomm
from meshcomm import Collective as C
from meshcomm import DataType

rules = meshcomm._meshcomm._execute_args
F32, BF16 = DataType.FLOAT32, DataType.BFLOAT16


@pytest.mark.parametrize("collective,rank,n,in_bytes,out_bytes,dtype,extras,count,root", [
    (C.ALLREDUCE, 0, 4, 4096, 4096, F32, None, 1024, 0),
    (C.ALLREDUCE, 1, 2, 6, 8, BF16, None, 3, 0),  # a larger output is fine
    (C.REDUCE, 1, 2, 40, 0, F32, {"root": 0}, 10, 0),  # output unused off the root
    (C.BROADCAST, 0, 2, 0, 40, F32, {"root": 1}, 10, 1),  # input unused off the root
    (C.BROADCAST, 1, 2, 40, 40, F32, {"root": 1}, 10, 1),
    (C.ALLGATHER, 2, 4, 16, 64, F32, None, 4, 0),
    (C.GATHER, 3, 4, 16, 0, F32, {"root": 0}, 4, 0),
    (C.REDUCE_SCATTER, 0, 4, 64, 16, F32, None, 4, 0),
    (C.SCATTER, 2, 4, 0, 16, F32, {"root": 3}, 4, 3),
    (C.ALLTOALL, 0, 4, 64, 64, F32, None, 4, 0),
    (C.BARRIER, 0, 4, 0, 0, F32, None, 0, 0),
])
def test_counts(collective, rank, n, in_bytes, out_bytes, dtype, extras, count, root):
    assert rules(collective, rank, n, in_bytes, out_bytes, dtype, extras) == (count, root)


def test_alltoallv_takes_device_count_arrays_from_extras():
    arrays = {"send_counts": 0x1000, "send_displs": 0x2000, "recv_counts": 0x3000, "recv_displs": 0x4000}
    assert rules(C.ALLTOALLV, 0, 2, 64, 64, F32, arrays) == (0, 0)
    with pytest.raises(meshcomm.InvalidUsageError, match="extras: 'recv_displs' .* is required for alltoallv"):
        rules(C.ALLTOALLV, 0, 2, 64, 64, F32, {k: v for k, v in arrays.items() if k != "recv_displs"})


@pytest.mark.parametrize("collective,rank,n,in_bytes,out_bytes,dtype,extras,message", [
    (C.ALLREDUCE, 1, 2, 10, 12, F32, None,
     "rank 1: allreduce: execute: input_size: 10 bytes is not a whole number of float elements (4 bytes each)"),
    (C.ALLREDUCE, 0, 2, 16, 12, F32, None, "rank 0: allreduce: execute: output_size: 12 bytes is less than input_size (16 bytes)"),
    (C.ALLGATHER, 0, 4, 16, 60, F32, None,
     "rank 0: allgather: execute: output_size: 60 bytes is less than size x input_size (4 x 16 bytes)"),
    (C.REDUCE_SCATTER, 0, 4, 60, 16, F32, None,
     "rank 0: reduce_scatter: execute: input_size: 60 bytes is less than size x output_size (4 x 16 bytes)"),
    (C.BROADCAST, 1, 2, 8, 40, F32, {"root": 1}, "rank 1: broadcast: execute: input_size: 8 bytes is less than output_size"),
    (C.ALLTOALL, 0, 4, 24, 24, F32, None, "rank 0: alltoall: execute: input_size: 6 elements do not split evenly over 4 ranks"),
    (C.ALLREDUCE, 0, 2, 16, 16, F32, {"root": 0},
     "rank 0: allreduce: execute: extras: 'root' does not apply (this collective takes no extras)"),
    (C.GATHER, 0, 2, 16, 32, F32, {"rooot": 0}, "extras: 'rooot' does not apply (accepted: root)"),
    (C.SCATTER, 0, 2, 32, 16, F32, {"root": 2}, "rank 0: scatter: execute: extras: root 2 is not a rank (size 2)"),
    (C.SENDRECV, 0, 2, 0, 0, F32, None, "sendrecv runs through Comm.send/recv inside group_start/group_end"),
])
def test_errors(collective, rank, n, in_bytes, out_bytes, dtype, extras, message):
    with pytest.raises(meshcomm.InvalidUsageError) as info:
        rules(collective, rank, n, in_bytes, out_bytes, dtype, extras)
    assert message in str(info.value)
    assert str(info.value).startswith("invalid usage: rank ")
