"""all_to_all_single on meshcomm process groups, with split sizes on the host or in device tensors."""

import torch
import torch.distributed as dist

from .. import _torch_backend


def get_backend(group=None):
    """The meshcomm backend of `group` (default: the default group) for CUDA tensors."""
    pg = group if group is not None else dist.distributed_c10d._get_default_group()
    backend = pg._get_backend(torch.device("cuda"))
    if not isinstance(backend, _torch_backend.MeshcommBackend):
        raise RuntimeError(
            f"meshcomm.torch: the process group's CUDA backend is {type(backend).__name__}, not meshcomm "
            "(create it with backend 'cpu:gloo,cuda:meshcomm' or 'meshcomm')"
        )
    return backend


def all_to_all_single_device_splits(output, input, output_split_sizes, input_split_sizes, group=None, async_op=False):
    """all_to_all_single whose split sizes (rows of dim 0 per rank) are int64/int32 tensors on the group's GPU.

    Counts and displacements are computed on the GPU: no host synchronisation, nothing to set up when the
    splits change, and the call can be captured in a CUDA graph (each replay reads the split tensors' current
    values). The split values are not checked on the host: they must add up to at most the rows of the tensors.
    """
    backend = get_backend(group)
    work = backend._all_to_all_single_device_splits(output, input, output_split_sizes, input_split_sizes, async_op)
    if async_op:
        return work
    work.wait()
    return None


def all_to_all_single(output, input, output_split_sizes=None, input_split_sizes=None, group=None, async_op=False):
    """Drop-in for torch.distributed.all_to_all_single. Split sizes may be lists (or CPU tensors), as in
    torch, or CUDA integer tensors (see all_to_all_single_device_splits)."""
    on_device = [isinstance(s, torch.Tensor) and s.is_cuda for s in (output_split_sizes, input_split_sizes)]
    if any(on_device):
        if not all(on_device):
            raise ValueError(
                "meshcomm.torch.all_to_all_single: output_split_sizes and input_split_sizes must both be CUDA "
                "tensors, or neither"
            )
        return all_to_all_single_device_splits(
            output, input, output_split_sizes, input_split_sizes, group=group, async_op=async_op
        )
    splits = [s.tolist() if isinstance(s, torch.Tensor) else s for s in (output_split_sizes, input_split_sizes)]
    return dist.all_to_all_single(output, input, splits[0], splits[1], group=group, async_op=async_op)
