"""DataType conversion that needs no torch import: torch dtypes are matched by name (str(dtype))."""

from ._meshcomm import DataType, ErrorCode, InvalidUsageError, data_type_name

# str(torch.<dtype>) -> DataType. torch prints canonical names ("torch.float32" for torch.float); the
# aliases are accepted for hand-written names.
_TORCH_NAMES = {
    "torch.float32": DataType.FLOAT32,
    "torch.float": DataType.FLOAT32,
    "torch.float16": DataType.FLOAT16,
    "torch.half": DataType.FLOAT16,
    "torch.bfloat16": DataType.BFLOAT16,
    "torch.float64": DataType.FLOAT64,
    "torch.double": DataType.FLOAT64,
    "torch.int8": DataType.INT8,
    "torch.uint8": DataType.UINT8,
    "torch.int32": DataType.INT32,
    "torch.int": DataType.INT32,
    "torch.uint32": DataType.UINT32,
    "torch.int64": DataType.INT64,
    "torch.long": DataType.INT64,
    "torch.uint64": DataType.UINT64,
    "torch.float8_e4m3fn": DataType.FLOAT8_E4M3,
    "torch.float8_e5m2": DataType.FLOAT8_E5M2,
}

_TORCH_CANONICAL = {}
for _name, _dtype in _TORCH_NAMES.items():
    _TORCH_CANONICAL.setdefault(_dtype, _name)

# nccl-tests names ("float", "bfloat16", ...), as data_type_name() prints them.
_MESHCOMM_NAMES = {data_type_name(d): d for d in DataType}


def to_data_type(dtype) -> DataType:
    """A DataType from a DataType, a nccl-tests name ('bfloat16'), or a torch dtype or its name.

    Raises InvalidUsageError naming the dtype when meshcomm has no such element type.
    """
    if isinstance(dtype, DataType):
        return dtype
    name = str(dtype)
    found = _TORCH_NAMES.get(name)
    if found is None:
        found = _MESHCOMM_NAMES.get(name)
    if found is None:
        known = ", ".join(sorted(set(_TORCH_NAMES) | set(_MESHCOMM_NAMES)))
        error = InvalidUsageError(f"invalid usage: dtype {name!r} has no meshcomm DataType (known: {known})")
        error.code = ErrorCode.INVALID_USAGE
        raise error
    return found


def torch_dtype_name(dtype: DataType) -> str:
    """The torch name of a DataType ('torch.bfloat16'), e.g. for getattr(torch, name.split('.')[1])."""
    return _TORCH_CANONICAL[to_data_type(dtype)]
