"""meshcomm.ep.Buffer: MoE dispatch and combine inside one NVLink node, with DeepEP's V1 ``Buffer`` API.

    buf = Buffer(group, num_nvl_bytes=int(1e9))
    per_rank, _, per_expert, in_rank, _ = buf.get_dispatch_layout(topk_idx, num_experts)
    recv_x, recv_idx, recv_w, counts, handle, _ = buf.dispatch(
        x, topk_idx=topk_idx, topk_weights=topk_weights, num_tokens_per_rank=per_rank,
        is_token_in_rank=in_rank, num_tokens_per_expert=per_expert)
    combined_x, combined_w, _ = buf.combine(expert_out, handle, topk_weights=recv_w)

Every call runs on the Buffer's communication stream, which first waits for ``previous_event`` (or the
caller's stream); without ``async_finish`` the caller's stream then waits for it, with it the returned
EventOverlap carries the completion (docs/ep.md, "Streams"). The normal (high-throughput) mode runs on
meshcomm::ep::EpBuffer, the low-latency mode (``low_latency_mode=True``, NVLink alone) on
meshcomm::ep::LowLatencyBuffer. A group that spans nodes (MESHCOMM_EP_NODE_SIZE, or the ranks' hosts) runs the
normal mode across them: NVLink inside a node, PortChannels between nodes (docs/ep.md, "Internode").
"""

from typing import List, Optional, Tuple, Union

import torch
import torch.distributed as dist
import torch.utils.deterministic

from .config import NUM_MAX_NVL_PEERS, Config, combine_config, dispatch_config
from .events import EventHandle, EventOverlap

try:
    from .. import _torch_ep
except ImportError as e:  # a meshcomm built without torch
    raise ImportError(
        "meshcomm.ep: the extension meshcomm._torch_ep is missing (meshcomm was built without torch; see docs/ep.md)"
    ) from e

topk_idx_t = torch.int64  # dtype of every topk_idx (DeepEP's default)

_CPU_TIMEOUT_S = 100.0  # the host's wait for a dispatch's receive count (DeepEP's NUM_CPU_TIMEOUT_SECS)
_LOW_LATENCY_BLOCKS = 64  # the low-latency kernels' launch size (every block resident: 1 of 2 SMs on H100)

Handle = Tuple[torch.Tensor, None, None, torch.Tensor, torch.Tensor, None]


def _not_implemented(what: str):
    raise NotImplementedError(
        f"meshcomm.ep: {what} is not implemented yet; meshcomm.ep runs DeepEP's normal (high-throughput) "
        "intranode dispatch and combine (docs/ep.md)"
    )


class Buffer:
    """The communication region of one expert-parallel group (one rank per GPU, all in one node).

    ``num_nvl_bytes`` is the region each rank registers (every rank passes the same); it must hold the
    largest dispatch receive (up to T·R rows of hidden bytes plus metadata) and the combine slabs.
    The kernels' launch size is ``Buffer.num_sms`` at construction (every rank alike); a call's ``config``
    is checked but does not change it.
    """

    num_sms: int = 20

    def __init__(
        self,
        group: dist.ProcessGroup,
        num_nvl_bytes: int = 0,
        num_rdma_bytes: int = 0,
        low_latency_mode: bool = False,
        num_qps_per_rank: int = 24,
        allow_nvlink_for_low_latency_mode: bool = True,
        allow_mnnvl: bool = False,
        use_fabric: bool = False,
        explicitly_destroy: bool = False,
        enable_shrink: bool = False,
        comm=None,
    ):
        self.group = group
        self.rank = group.rank()
        self.group_size = group.size()
        where = f"meshcomm.ep.Buffer: rank {self.rank}"
        if low_latency_mode and not allow_nvlink_for_low_latency_mode:
            _not_implemented("the low-latency mode without NVLink (allow_nvlink_for_low_latency_mode=False)")
        if allow_mnnvl or use_fabric or enable_shrink or comm is not None:
            _not_implemented("allow_mnnvl, use_fabric, enable_shrink and an external comm")
        if self.group_size > NUM_MAX_NVL_PEERS:
            _not_implemented(f"a group of {self.group_size} ranks (meshcomm.ep runs at most {NUM_MAX_NVL_PEERS})")
        if num_nvl_bytes < 0 or (num_nvl_bytes == 0 and not low_latency_mode):
            raise ValueError(f"{where}: num_nvl_bytes={num_nvl_bytes}; the intranode mode needs a positive size")
        if num_nvl_bytes % 128 != 0:
            raise ValueError(f"{where}: num_nvl_bytes={num_nvl_bytes}; a multiple of 128 is needed (as in DeepEP)")
        if low_latency_mode and num_rdma_bytes <= 0:
            raise ValueError(
                f"{where}: num_rdma_bytes={num_rdma_bytes}; the low-latency mode needs the size "
                "Buffer.get_low_latency_rdma_size_hint gives"
            )
        self.num_nvl_bytes = num_nvl_bytes
        self.num_rdma_bytes = num_rdma_bytes  # the low-latency region, else the network region across nodes
        self.low_latency_mode = low_latency_mode
        self.explicitly_destroy = explicitly_destroy
        self._device = torch.device("cuda", torch.cuda.current_device())
        self._comm_stream = torch.cuda.Stream(self._device)
        # A dispatch's receive kernel runs on its own stream beside the send kernel (forked from the
        # communication stream before the send, joined back after the receive).
        self._recv_stream = torch.cuda.Stream(self._device)
        self._send_start = torch.cuda.Event()

        # rank 0's UniqueId through the group, then the collective construction of the region.
        box = [_torch_ep.create_unique_id(self.group_size) if self.rank == 0 else None]
        dist.broadcast_object_list(box, src=dist.get_global_rank(group, 0), group=group)
        region_bytes = (num_nvl_bytes + 255) // 256 * 256
        # Across nodes: the network region (pinned host memory) is num_rdma_bytes, or num_nvl_bytes when 0.
        network_bytes = (num_rdma_bytes if num_rdma_bytes > 0 and not low_latency_mode else num_nvl_bytes)
        network_bytes = (network_bytes + 255) // 256 * 256
        low_latency_bytes = (num_rdma_bytes + 255) // 256 * 256 if low_latency_mode else 0
        sms = torch.cuda.get_device_properties(self._device).multi_processor_count
        self._runtime = _torch_ep.EpRuntime(
            box[0], self.rank, self.group_size, self._device.index, region_bytes, Buffer.num_sms,
            low_latency_bytes, min(sms, _LOW_LATENCY_BLOCKS), network_bytes,
        )
        # Ranks per node: the group's size inside one node (DeepEP's NVL ranks; its RDMA ranks are the nodes).
        self.num_nvl_ranks = self._runtime.node_size() if region_bytes > 0 else self.group_size
        self.num_rdma_ranks = self.group_size // self.num_nvl_ranks

    # ---- lifetime -------------------------------------------------------------------------------------------
    def destroy(self) -> None:
        """Collective: waits for this rank's work, agrees with every peer, frees the region."""
        assert self.explicitly_destroy, "meshcomm.ep.Buffer.destroy: the Buffer was built with explicitly_destroy=False"
        self._release()

    def _release(self) -> None:
        runtime, self._runtime = getattr(self, "_runtime", None), None
        if runtime is not None:
            runtime.destroy()

    def __del__(self):
        if not getattr(self, "explicitly_destroy", True):
            self._release()

    def _live(self, op: str):
        if self._runtime is None:
            raise RuntimeError(f"meshcomm.ep.Buffer: rank {self.rank}: {op}: the Buffer was destroyed")
        return self._runtime

    # ---- DeepEP's static helpers ----------------------------------------------------------------------------
    @staticmethod
    def is_sm90_compiled() -> bool:
        return True

    @staticmethod
    def set_num_sms(new_num_sms: int) -> None:
        if new_num_sms <= 0 or new_num_sms % 2 != 0:
            raise ValueError(f"meshcomm.ep.Buffer.set_num_sms: {new_num_sms}; a positive even number is needed")
        Buffer.num_sms = new_num_sms

    @staticmethod
    def capture() -> EventOverlap:
        """An EventOverlap recorded on the current stream (for ``previous_event=``)."""
        return EventOverlap(EventHandle())

    @staticmethod
    def get_dispatch_config(num_ranks: int) -> Config:
        return dispatch_config(num_ranks, Buffer.num_sms)

    @staticmethod
    def get_combine_config(num_ranks: int) -> Config:
        return combine_config(num_ranks, Buffer.num_sms)

    @staticmethod
    def get_low_latency_rdma_size_hint(
        num_max_dispatch_tokens_per_rank: int, hidden: int, num_ranks: int, num_experts: int
    ) -> int:
        """The ``num_rdma_bytes`` the low-latency mode needs for this shape (meshcomm's layout, docs/ep.md)."""
        return int(_torch_ep.low_latency_bytes(num_max_dispatch_tokens_per_rank, hidden, num_ranks, num_experts))

    def get_comm_stream(self) -> torch.cuda.Stream:
        return self._comm_stream

    def get_local_buffer_tensor(
        self, dtype: torch.dtype, size: Optional[torch.Size] = None, offset: int = 0, use_rdma_buffer: bool = False
    ) -> torch.Tensor:
        """A view of this rank's data area (the rows dispatch receives into, then the combine slabs) as ``dtype``
        elements from element ``offset``; shaped ``size`` when given. The next dispatch or combine overwrites it."""
        op = "get_local_buffer_tensor"
        if use_rdma_buffer:
            _not_implemented("the RDMA buffer (internode mode)")
        tensor = self._live(op).local_data(dtype, offset)
        if size is None:
            return tensor
        size = torch.Size(size)
        if tensor.numel() < size.numel():
            raise ValueError(
                f"meshcomm.ep.Buffer: rank {self.rank}: {op}: {size.numel()} elements requested, the buffer holds "
                f"{tensor.numel()} from offset {offset}"
            )
        return tensor[: size.numel()].view(size)

    def internode_dispatch(self, *args, **kwargs):
        _not_implemented("internode dispatch")

    def internode_combine(self, *args, **kwargs):
        _not_implemented("internode combine")

    # ---- streams --------------------------------------------------------------------------------------------
    def _begin(self, op: str, previous_event, async_finish: bool, allocate_on_comm_stream: bool):
        """Orders the communication stream after the caller's work; returns (caller's stream, allocation stream)."""
        if allocate_on_comm_stream and (previous_event is None or not async_finish):
            raise ValueError(
                f"meshcomm.ep.Buffer: rank {self.rank}: {op}: allocate_on_comm_stream=True needs previous_event "
                "and async_finish=True (as in DeepEP)"
            )
        if torch.are_deterministic_algorithms_enabled() and torch.utils.deterministic.fill_uninitialized_memory:
            raise RuntimeError(
                f"meshcomm.ep.Buffer: rank {self.rank}: {op}: torch fills new tensors on the caller's stream "
                "(deterministic algorithms with fill_uninitialized_memory), racing the communication stream; "
                "set torch.utils.deterministic.fill_uninitialized_memory = False"
            )
        compute = torch.cuda.current_stream()
        if previous_event is not None:
            event = previous_event.event if isinstance(previous_event, EventOverlap) else previous_event
            if event is not None:
                self._comm_stream.wait_event(event.event if isinstance(event, EventHandle) else event)
        else:
            self._comm_stream.wait_stream(compute)
        return compute, (self._comm_stream if allocate_on_comm_stream else compute)

    def _finish(self, compute, launch, async_finish: bool, allocate_on_comm_stream: bool, tensors) -> EventOverlap:
        """After the kernels were enqueued on `launch`: with async_finish, keeps `tensors` alive for `launch` (and
        for the caller's stream when allocated on `launch`) and returns an event recorded there; otherwise the
        caller's stream waits for `launch` (nothing to wait for when they are one stream)."""
        if not async_finish:
            if launch != compute:
                compute.wait_stream(launch)
            return EventOverlap(None)
        for t in tensors:
            if isinstance(t, torch.Tensor):
                t.record_stream(launch)
                if allocate_on_comm_stream:
                    t.record_stream(compute)
        return EventOverlap(EventHandle(launch))

    def _check_config(self, op: str, config: Optional[Config]) -> None:
        if config is not None and not isinstance(config, Config):
            raise TypeError(f"meshcomm.ep.Buffer: rank {self.rank}: {op}: config must be a meshcomm.ep.Config")

    # ---- layout ---------------------------------------------------------------------------------------------
    def get_dispatch_layout(
        self,
        topk_idx: torch.Tensor,
        num_experts: int,
        previous_event: Optional[EventOverlap] = None,
        async_finish: bool = False,
        allocate_on_comm_stream: bool = False,
    ):
        """Local: ``(num_tokens_per_rank [R] i32, num_tokens_per_rdma_rank [nodes] i32 or None inside one node,
        num_tokens_per_expert [E] i32, is_token_in_rank [T,R] bool, event)``."""
        op = "get_dispatch_layout"
        runtime = self._live(op)
        if topk_idx.dim() != 2:
            raise ValueError(f"meshcomm.ep.Buffer: rank {self.rank}: {op}: topk_idx must be [tokens, topk]")
        shape = _torch_ep.Shape(16, 0, topk_idx.size(1), num_experts)
        compute, alloc = self._begin(op, previous_event, async_finish, allocate_on_comm_stream)
        with torch.cuda.stream(alloc):
            per_rank = torch.empty(self.group_size, dtype=torch.int32, device=self._device)
            per_expert = torch.empty(num_experts, dtype=torch.int32, device=self._device)
            in_rank = torch.empty(topk_idx.size(0), self.group_size, dtype=torch.bool, device=self._device)
        runtime.layout(topk_idx, shape, per_rank, per_expert, in_rank, self._comm_stream.cuda_stream)
        per_node = None
        if self.num_rdma_ranks > 1:
            with torch.cuda.stream(alloc):
                per_node = torch.empty(self.num_rdma_ranks, dtype=torch.int32, device=self._device)
            with torch.cuda.stream(self._comm_stream):
                torch.sum(in_rank.view(-1, self.num_rdma_ranks, self.num_nvl_ranks).any(2), 0, dtype=torch.int32, out=per_node)
        event = self._finish(
            compute, self._comm_stream, async_finish, allocate_on_comm_stream, (topk_idx, per_rank, per_node, per_expert, in_rank)
        )
        return per_rank, per_node, per_expert, in_rank, event

    # ---- dispatch -------------------------------------------------------------------------------------------
    def dispatch(
        self,
        x: Union[torch.Tensor, Tuple[torch.Tensor, torch.Tensor]],
        handle: Optional[Handle] = None,
        num_tokens_per_rank: Optional[torch.Tensor] = None,
        num_tokens_per_rdma_rank: Optional[torch.Tensor] = None,
        is_token_in_rank: Optional[torch.Tensor] = None,
        num_tokens_per_expert: Optional[torch.Tensor] = None,
        topk_idx: Optional[torch.Tensor] = None,
        topk_weights: Optional[torch.Tensor] = None,
        expert_alignment: int = 1,
        num_worst_tokens: int = 0,
        config: Optional[Config] = None,
        previous_event: Optional[EventOverlap] = None,
        async_finish: bool = False,
        allocate_on_comm_stream: bool = False,
    ):
        """``(recv_x, recv_topk_idx, recv_topk_weights, num_recv_tokens_per_expert_list, handle, event)``.

        ``x`` is ``[T, H]`` (bf16 or any element type) or ``(x_fp8 [T, H], scales [T, S] f32 or i32)``. Received
        rows are ordered by source rank, then source token. With ``handle`` (a cached dispatch, no top-k) the
        layout of that earlier dispatch is reused and only ``recv_x`` is returned (the rest are None).
        """
        op = "dispatch"
        runtime = self._live(op)
        where = f"meshcomm.ep.Buffer: rank {self.rank}: {op}"
        self._check_config(op, config)
        # num_tokens_per_rdma_rank (get_dispatch_layout's per-node counts) is implied by is_token_in_rank.
        x_data, x_scales = x if isinstance(x, tuple) else (x, None)
        if x_data.dim() != 2:
            raise ValueError(f"{where}: x must be [tokens, hidden], got {tuple(x_data.shape)}")
        scales, scale_dtype, scale_1d = _scales_as_float(where, x_scales, x_data.size(0))
        num_scales = 0 if scales is None else scales.size(1)
        hidden_bytes = x_data.size(1) * x_data.element_size()

        if handle is not None:
            if topk_idx is not None or topk_weights is not None:
                raise ValueError(f"{where}: a cached dispatch (handle=) takes no topk_idx/topk_weights")
            rank_prefix, _, _, recv_src_idx, is_token_in_rank, _ = handle
            num_recv = recv_src_idx.size(0)
            shape = _torch_ep.Shape(hidden_bytes, num_scales, 0, self.group_size)
        else:
            if num_tokens_per_rank is None or is_token_in_rank is None:
                raise ValueError(f"{where}: num_tokens_per_rank and is_token_in_rank are needed (get_dispatch_layout)")
            if (topk_idx is None) != (topk_weights is None):
                raise ValueError(f"{where}: topk_idx and topk_weights go together")
            if topk_idx is not None and num_tokens_per_expert is None:
                raise ValueError(f"{where}: num_tokens_per_expert is needed with topk_idx (get_dispatch_layout)")
            num_experts = num_tokens_per_expert.numel() if num_tokens_per_expert is not None else self.group_size
            topk = 0 if topk_idx is None else topk_idx.size(1)
            shape = _torch_ep.Shape(hidden_bytes, num_scales, topk, num_experts)
            if num_worst_tokens < 0:
                raise ValueError(f"{where}: num_worst_tokens={num_worst_tokens}")
            if num_worst_tokens > 0 and num_worst_tokens > runtime.dispatch_capacity(shape):
                raise ValueError(
                    f"{where}: num_worst_tokens={num_worst_tokens} rows do not fit num_nvl_bytes={self.num_nvl_bytes}"
                    f" (it holds {runtime.dispatch_capacity(shape)} rows of {hidden_bytes} bytes)"
                )

        compute, alloc = self._begin(op, previous_event, async_finish, allocate_on_comm_stream)
        stream = self._comm_stream.cuda_stream
        if handle is not None:
            with torch.cuda.stream(self._comm_stream):
                per_rank = is_token_in_rank.sum(0, dtype=torch.int32)
            # The receive kernel follows everything before the send on the communication stream (memory freed
            # there may back the outputs).
            self._send_start.record(self._comm_stream)
            runtime.dispatch_send(x_data, scales, None, None, is_token_in_rank, per_rank, None, shape, 1, stream)
            counts: List[int] = []
        else:
            per_rank = num_tokens_per_rank
            self._send_start.record(self._comm_stream)
            runtime.dispatch_send(
                x_data, scales, topk_idx, topk_weights, is_token_in_rank, num_tokens_per_rank, num_tokens_per_expert,
                shape, expert_alignment, stream,
            )
            if num_worst_tokens > 0:
                num_recv, counts = num_worst_tokens, []
            else:
                num_recv, per_local_expert = runtime.wait_receive_counts(_CPU_TIMEOUT_S)
                counts = list(per_local_expert) if num_tokens_per_expert is not None else []

        with torch.cuda.stream(alloc):
            recv_x = torch.empty(num_recv, x_data.size(1), dtype=x_data.dtype, device=self._device)
            recv_scales = (
                None if scales is None else torch.empty(num_recv, num_scales, dtype=torch.float32, device=self._device)
            )
            recv_src = torch.empty(num_recv, dtype=torch.int32, device=self._device)
            prefix = torch.empty(self.group_size, self.group_size, dtype=torch.int32, device=self._device)
            recv_topk_idx = recv_topk_weights = None
            if handle is None and topk_idx is not None:
                recv_topk_idx = torch.empty(num_recv, topk_idx.size(1), dtype=topk_idx_t, device=self._device)
                recv_topk_weights = torch.empty(num_recv, topk_idx.size(1), dtype=torch.float32, device=self._device)
        self._recv_stream.wait_event(self._send_start)
        runtime.dispatch_receive(
            recv_x, recv_scales, recv_topk_idx, recv_topk_weights, recv_src, prefix, shape, self._recv_stream.cuda_stream
        )
        self._comm_stream.wait_stream(self._recv_stream)

        event = self._finish(
            compute,
            self._comm_stream,
            async_finish,
            allocate_on_comm_stream,
            (x_data, scales, topk_idx, topk_weights, is_token_in_rank, per_rank, num_tokens_per_expert,
             recv_x, recv_scales, recv_src, prefix, recv_topk_idx, recv_topk_weights),
        )
        out_x = recv_x if recv_scales is None else (recv_x, _scales_back(recv_scales, scale_dtype, scale_1d))
        if handle is not None:
            return out_x, None, None, None, None, event
        new_handle: Handle = (prefix, None, None, recv_src, is_token_in_rank, None)
        return out_x, recv_topk_idx, recv_topk_weights, counts, new_handle, event

    # ---- combine --------------------------------------------------------------------------------------------
    def combine(
        self,
        x: torch.Tensor,
        handle: Handle,
        topk_weights: Optional[torch.Tensor] = None,
        bias: Union[torch.Tensor, Tuple[torch.Tensor, torch.Tensor], None] = None,
        config: Optional[Config] = None,
        previous_event: Optional[EventOverlap] = None,
        async_finish: bool = False,
        allocate_on_comm_stream: bool = False,
    ):
        """``(combined_x [T, H] bf16, combined_topk_weights [T, K] f32 or None, event)``: per token, the plain sum
        of the rows returned by the ranks it was dispatched to (fp32 accumulation), plus the biases."""
        op = "combine"
        runtime = self._live(op)
        where = f"meshcomm.ep.Buffer: rank {self.rank}: {op}"
        self._check_config(op, config)
        if not isinstance(handle, tuple) or len(handle) != 6 or handle[0] is None:
            raise ValueError(f"{where}: handle must be the 6-tuple an intranode dispatch returned")
        rank_prefix, _, _, recv_src_idx, is_token_in_rank, _ = handle
        if x.dim() != 2 or x.size(0) != recv_src_idx.size(0):
            raise ValueError(
                f"{where}: x must be [{recv_src_idx.size(0)}, hidden] (the dispatch's rows), got {tuple(x.shape)}"
            )
        if topk_weights is not None and (topk_weights.dim() != 2 or topk_weights.size(0) != x.size(0)):
            raise ValueError(f"{where}: topk_weights must be [{x.size(0)}, topk], got {tuple(topk_weights.shape)}")
        bias0, bias1 = bias if isinstance(bias, tuple) else (bias, None)
        tokens = is_token_in_rank.size(0)
        for b in (bias0, bias1):
            if b is not None and tuple(b.shape) != (tokens, x.size(1)):
                raise ValueError(f"{where}: bias must be [{tokens}, {x.size(1)}], got {tuple(b.shape)}")
        topk = 0 if topk_weights is None else topk_weights.size(1)
        shape = _torch_ep.Shape(x.size(1) * x.element_size(), 0, topk, self.group_size)
        compute, alloc = self._begin(op, previous_event, async_finish, allocate_on_comm_stream)
        with torch.cuda.stream(alloc):
            combined_x = torch.empty(tokens, x.size(1), dtype=x.dtype, device=self._device)
            combined_w = (
                None if topk_weights is None else torch.empty(tokens, topk, dtype=torch.float32, device=self._device)
            )
        runtime.combine(
            x, topk_weights, recv_src_idx, rank_prefix, is_token_in_rank, bias0, bias1, combined_x, combined_w,
            shape, self._comm_stream.cuda_stream,
        )
        event = self._finish(
            compute,
            self._comm_stream,
            async_finish,
            allocate_on_comm_stream,
            (x, topk_weights, recv_src_idx, rank_prefix, is_token_in_rank, bias0, bias1, combined_x, combined_w),
        )
        return combined_x, combined_w, event


    # ---- low-latency mode ------------------------------------------------------------------------------------
    def clean_low_latency_buffer(self, num_max_dispatch_tokens_per_rank: int, hidden: int, num_experts: int) -> None:
        """Checks that the shape fits; nothing needs cleaning (every flag carries its call's epoch)."""
        need = Buffer.get_low_latency_rdma_size_hint(num_max_dispatch_tokens_per_rank, hidden, self.group_size, num_experts)
        self._live("clean_low_latency_buffer")
        if need > self.num_rdma_bytes:
            raise ValueError(
                f"meshcomm.ep.Buffer: rank {self.rank}: clean_low_latency_buffer: the shape needs {need} bytes, "
                f"num_rdma_bytes is {self.num_rdma_bytes}"
            )

    def _low_latency_streams(self, op: str, async_finish: bool, return_recv_hook: bool):
        if async_finish and return_recv_hook:
            raise ValueError(f"meshcomm.ep.Buffer: rank {self.rank}: {op}: async_finish and return_recv_hook exclude each other")
        compute = torch.cuda.current_stream()
        if not async_finish:  # the caller's stream would wait for the kernels anyway: launch them there
            return compute, compute
        self._comm_stream.wait_stream(compute)
        return compute, self._comm_stream

    def low_latency_dispatch(
        self,
        x: torch.Tensor,
        topk_idx: torch.Tensor,
        num_max_dispatch_tokens_per_rank: int,
        num_experts: int,
        cumulative_local_expert_recv_stats: Optional[torch.Tensor] = None,
        dispatch_wait_recv_cost_stats: Optional[torch.Tensor] = None,
        use_fp8: bool = True,
        round_scale: bool = False,
        use_ue8m0: bool = False,
        async_finish: bool = False,
        return_recv_hook: bool = False,
    ):
        """``(recv_x [El, R*M, H] (fp8 with scales, or bf16), recv_count [El], handle, event, hook)``: every
        (token, expert) pair delivered to the expert's rank, rows by source rank then token; with
        ``return_recv_hook`` only the send runs now and ``hook()`` launches the receive."""
        op = "low_latency_dispatch"
        runtime = self._live(op)
        where = f"meshcomm.ep.Buffer: rank {self.rank}: {op}"
        M, R = num_max_dispatch_tokens_per_rank, self.group_size
        if x.dim() != 2 or num_experts % R != 0:
            raise ValueError(f"{where}: x must be [tokens, hidden] and num_experts ({num_experts}) a multiple of {R}")
        H, El = x.size(1), num_experts // R
        compute, launch = self._low_latency_streams(op, async_finish, return_recv_hook)
        dev = self._device
        recv_x = torch.empty(El, R * M, H, dtype=torch.float8_e4m3fn if use_fp8 else torch.bfloat16, device=dev)
        scales = None
        if use_fp8 and use_ue8m0:
            scales = torch.empty(El, H // 512, R * M, dtype=torch.int32, device=dev).transpose(1, 2)
        elif use_fp8:
            scales = torch.empty(El, H // 128, R * M, dtype=torch.float32, device=dev).transpose(1, 2)
        count = torch.empty(El, dtype=torch.int32, device=dev)
        src_info = torch.empty(El, R * M, dtype=torch.int32, device=dev)
        layout_range = torch.empty(El, R, dtype=torch.int64, device=dev)
        args = (x, topk_idx, recv_x, scales, count, src_info, layout_range, cumulative_local_expert_recv_stats,
                dispatch_wait_recv_cost_stats, M, num_experts, use_fp8, round_scale, use_ue8m0)
        phases = _torch_ep.LOW_LATENCY_SEND if return_recv_hook else _torch_ep.LOW_LATENCY_BOTH
        ticket = runtime.low_latency_dispatch(*args, phases, 0, launch.cuda_stream)
        hook = _receive_hook(runtime.low_latency_dispatch, args, ticket, launch) if return_recv_hook else _no_hook
        event = self._finish(compute, launch, async_finish, False, args[:9])
        handle = (src_info, layout_range, M, H, num_experts)
        return ((recv_x, scales) if use_fp8 else recv_x), count, handle, event, hook

    def low_latency_combine(
        self,
        x: torch.Tensor,
        topk_idx: torch.Tensor,
        topk_weights: torch.Tensor,
        handle: tuple,
        use_logfmt: bool = False,
        zero_copy: bool = False,
        async_finish: bool = False,
        return_recv_hook: bool = False,
        out: Optional[torch.Tensor] = None,
        combine_wait_recv_cost_stats: Optional[torch.Tensor] = None,
    ):
        """``(combined_x [T, H] bf16, event, hook)``: per token, the sum over its top-k of weight x the expert's
        output row (fp32 accumulation). ``zero_copy`` sends what was written into
        ``get_next_low_latency_combine_buffer(handle)`` instead of ``x``."""
        op = "low_latency_combine"
        runtime = self._live(op)
        where = f"meshcomm.ep.Buffer: rank {self.rank}: {op}"
        if use_logfmt:
            _not_implemented("use_logfmt (LogFMT-10 combine)")
        src_info, layout_range, M, H, E = handle
        R = self.group_size
        if not zero_copy and tuple(x.shape) != (E // R, R * M, H):
            raise ValueError(f"{where}: x must be [{E // R}, {R * M}, {H}] (the dispatch's layout), got {tuple(x.shape)}")
        compute, launch = self._low_latency_streams(op, async_finish, return_recv_hook)
        if out is None:
            out = torch.empty(topk_idx.size(0), H, dtype=torch.bfloat16, device=self._device)
        elif tuple(out.shape) != (topk_idx.size(0), H):
            raise ValueError(f"{where}: out must be [{topk_idx.size(0)}, {H}], got {tuple(out.shape)}")
        args = (None if zero_copy else x, src_info, layout_range, topk_idx, topk_weights, out,
                combine_wait_recv_cost_stats, M, H, E)
        phases = _torch_ep.LOW_LATENCY_SEND if return_recv_hook else _torch_ep.LOW_LATENCY_BOTH
        ticket = runtime.low_latency_combine(*args, phases, 0, launch.cuda_stream)
        hook = _receive_hook(runtime.low_latency_combine, args, ticket, launch) if return_recv_hook else _no_hook
        event = self._finish(compute, launch, async_finish, False, args[:7])
        return out, event, hook

    def get_next_low_latency_combine_buffer(self, handle: tuple) -> torch.Tensor:
        """The [El, R*M, H] bf16 buffer a ``zero_copy`` combine sends from (write the expert outputs into it)."""
        _, _, M, H, E = handle
        return self._live("get_next_low_latency_combine_buffer").low_latency_combine_source(M, H, E)


def _scales_as_float(where: str, scales: Optional[torch.Tensor], tokens: int):
    """The scales as a contiguous [T, S] float32 tensor (int32 UE8M0 scales travel as their bits)."""
    if scales is None:
        return None, None, False
    if scales.dtype not in (torch.float32, torch.int32):
        raise ValueError(f"{where}: x's scales must be float32 or int32, got {scales.dtype}")
    one_d = scales.dim() == 1
    s = scales.unsqueeze(1) if one_d else scales
    if s.dim() != 2 or s.size(0) != tokens:
        raise ValueError(f"{where}: x's scales must be [{tokens}, S], got {tuple(scales.shape)}")
    s = s.contiguous()
    return (s.view(torch.float32) if s.dtype == torch.int32 else s), scales.dtype, one_d


def _scales_back(recv: torch.Tensor, dtype, one_d: bool) -> torch.Tensor:
    out = recv.view(dtype) if dtype == torch.int32 else recv
    return out.squeeze(1) if one_d else out


def _no_hook() -> None:
    pass


def _receive_hook(launch_fn, args, ticket, stream):
    """DeepEP's recv hook: launches the receive phase of call `ticket` on the stream of its send."""

    def hook() -> None:
        launch_fn(*args, _torch_ep.LOW_LATENCY_RECEIVE, ticket, stream.cuda_stream)

    return hook
