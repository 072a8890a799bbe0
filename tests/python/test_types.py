"""Enums, names and ReduceOpSpec as bound from include/meshcomm/types.hpp and algorithm.hpp."""

import pytest

import meshcomm
from meshcomm import Collective, DataType, ReduceOp, ReduceOpSpec

SIZES = {
    DataType.FLOAT32: 4, DataType.FLOAT16: 2, DataType.BFLOAT16: 2, DataType.FLOAT64: 8, DataType.INT8: 1,
    DataType.UINT8: 1, DataType.INT32: 4, DataType.UINT32: 4, DataType.INT64: 8, DataType.UINT64: 8,
    DataType.FLOAT8_E4M3: 1, DataType.FLOAT8_E5M2: 1,
}


def test_every_data_type_has_its_size_and_name():
    assert set(DataType) == set(SIZES)
    for dtype, size in SIZES.items():
        assert meshcomm.data_type_size(dtype) == size
    assert meshcomm.data_type_name(DataType.FLOAT32) == "float"
    assert meshcomm.data_type_name(DataType.BFLOAT16) == "bfloat16"
    assert meshcomm.data_type_name(DataType.FLOAT8_E4M3) == "f8e4m3"
    assert len({meshcomm.data_type_name(d) for d in DataType}) == len(SIZES)


def test_reduce_ops_and_names():
    assert [op.name for op in ReduceOp] == ["SUM", "PROD", "MIN", "MAX", "AVG", "PREMUL_SUM"]
    assert [meshcomm.reduce_op_name(op) for op in ReduceOp] == ["sum", "prod", "min", "max", "avg", "premulsum"]


def test_collective_members_are_the_cpp_names():
    assert len(Collective) == 11
    for c in Collective:
        assert c.name.lower() == meshcomm.collective_name(c)
    assert Collective.REDUCE_SCATTER.value == 2
    assert Collective.ALLTOALLV.value == 8


def test_reduce_op_spec():
    spec = ReduceOpSpec(ReduceOp.MAX)
    assert spec.op == ReduceOp.MAX and spec.device_scalar == 0
    pre = ReduceOpSpec.pre_mul_sum(0.5)
    assert (pre.op, pre.host_scalar, pre.device_scalar) == (ReduceOp.PREMUL_SUM, 0.5, 0)
    dev = ReduceOpSpec.pre_mul_sum_device(0x7F0000001000)
    assert (dev.op, dev.device_scalar) == (ReduceOp.PREMUL_SUM, 0x7F0000001000)
    assert repr(pre) == "ReduceOpSpec(premulsum, 0.5)"
    assert repr(dev) == "ReduceOpSpec(premulsum, device scalar)"


def test_error_codes():
    assert [c.name for c in meshcomm.ErrorCode] == [
        "INVALID_USAGE", "SYSTEM_ERROR", "CUDA_ERROR", "TIMEOUT", "REMOTE_ERROR", "INTERNAL_ERROR"]


def test_wrong_types_raise_type_error():
    with pytest.raises(TypeError):
        meshcomm.data_type_size("float")
