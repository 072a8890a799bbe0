"""to_data_type / torch_dtype_name: torch dtypes by name, without importing torch."""

import pytest

import meshcomm
from meshcomm import DataType, to_data_type, torch_dtype_name

TORCH = {
    "torch.float32": DataType.FLOAT32, "torch.float": DataType.FLOAT32, "torch.float16": DataType.FLOAT16,
    "torch.half": DataType.FLOAT16, "torch.bfloat16": DataType.BFLOAT16, "torch.float64": DataType.FLOAT64,
    "torch.double": DataType.FLOAT64, "torch.int8": DataType.INT8, "torch.uint8": DataType.UINT8,
    "torch.int32": DataType.INT32, "torch.int": DataType.INT32, "torch.uint32": DataType.UINT32,
    "torch.int64": DataType.INT64, "torch.long": DataType.INT64, "torch.uint64": DataType.UINT64,
    "torch.float8_e4m3fn": DataType.FLOAT8_E4M3, "torch.float8_e5m2": DataType.FLOAT8_E5M2,
}


class FakeTorchDtype:
    """Stands in for a torch.dtype: meshcomm only looks at str()."""

    def __init__(self, name):
        self.name = name

    def __str__(self):
        return self.name


@pytest.mark.parametrize("name,expected", sorted(TORCH.items()))
def test_torch_names(name, expected):
    assert to_data_type(name) == expected
    assert to_data_type(FakeTorchDtype(name)) == expected


def test_nccl_tests_names_and_data_types_pass_through():
    for dtype in DataType:
        assert to_data_type(dtype) is dtype
        assert to_data_type(meshcomm.data_type_name(dtype)) == dtype


def test_torch_dtype_name_round_trips():
    for dtype in DataType:
        name = torch_dtype_name(dtype)
        assert name.startswith("torch.")
        assert to_data_type(name) == dtype
    assert torch_dtype_name(DataType.FLOAT32) == "torch.float32"
    assert torch_dtype_name(DataType.FLOAT8_E4M3) == "torch.float8_e4m3fn"


@pytest.mark.parametrize("name", ["torch.bool", "torch.complex64", "torch.float8_e4m3fnuz", "fp32", ""])
def test_unsupported_dtypes_name_themselves(name):
    with pytest.raises(meshcomm.InvalidUsageError) as info:
        to_data_type(name)
    assert str(info.value).startswith(f"invalid usage: dtype {name!r} has no meshcomm DataType")
    assert info.value.code == meshcomm.ErrorCode.INVALID_USAGE
