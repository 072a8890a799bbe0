"""Config: DeepEP's per-call tuning record and its buffer-size hints.

meshcomm's dispatch needs no chunk sizes (rows are written once at their final place, docs/ep.md), so the
chunk fields only feed the size hints, which keep DeepEP's formulas: code that sizes its Buffer from them
(Megatron-core's fused_a2a does) gets the number it got with DeepEP. meshcomm's region must hold the largest
receive; a dispatch that does not fit raises an error naming ``num_nvl_bytes`` and the bytes needed.
"""

NUM_MAX_NVL_PEERS = 8  # ranks one NVLink region serves (one node)
_NUM_MAX_TOPK = 128  # DeepEP's per-token metadata allowance in its hint


class Config:
    """``Config(num_sms, nvl_send_chunk, nvl_recv_chunk, rdma_send_chunk, rdma_recv_chunk)``, DeepEP's fields."""

    def __init__(
        self,
        num_sms: int = 20,
        num_max_nvl_chunked_send_tokens: int = 6,
        num_max_nvl_chunked_recv_tokens: int = 256,
        num_max_rdma_chunked_send_tokens: int = 6,
        num_max_rdma_chunked_recv_tokens: int = 256,
    ):
        if num_sms <= 0 or num_sms % 2 != 0:
            raise ValueError(f"meshcomm.ep.Config: num_sms={num_sms}; a positive even number is needed")
        for name, value in (
            ("num_max_nvl_chunked_send_tokens", num_max_nvl_chunked_send_tokens),
            ("num_max_nvl_chunked_recv_tokens", num_max_nvl_chunked_recv_tokens),
            ("num_max_rdma_chunked_send_tokens", num_max_rdma_chunked_send_tokens),
            ("num_max_rdma_chunked_recv_tokens", num_max_rdma_chunked_recv_tokens),
        ):
            if value <= 0:
                raise ValueError(f"meshcomm.ep.Config: {name}={value}; a positive number is needed")
        if num_max_nvl_chunked_send_tokens > num_max_nvl_chunked_recv_tokens:
            raise ValueError(
                f"meshcomm.ep.Config: num_max_nvl_chunked_send_tokens={num_max_nvl_chunked_send_tokens} exceeds "
                f"num_max_nvl_chunked_recv_tokens={num_max_nvl_chunked_recv_tokens}"
            )
        self.num_sms = num_sms
        self.num_max_nvl_chunked_send_tokens = num_max_nvl_chunked_send_tokens
        self.num_max_nvl_chunked_recv_tokens = num_max_nvl_chunked_recv_tokens
        self.num_max_rdma_chunked_send_tokens = num_max_rdma_chunked_send_tokens
        self.num_max_rdma_chunked_recv_tokens = num_max_rdma_chunked_recv_tokens

    def __repr__(self) -> str:
        return (
            f"Config({self.num_sms}, {self.num_max_nvl_chunked_send_tokens}, {self.num_max_nvl_chunked_recv_tokens}, "
            f"{self.num_max_rdma_chunked_send_tokens}, {self.num_max_rdma_chunked_recv_tokens})"
        )

    def get_nvl_buffer_size_hint(self, hidden_bytes: int, num_ranks: int) -> int:
        """DeepEP's NVLink buffer size for ``hidden_bytes`` rows over ``num_ranks`` ranks (128-byte multiple)."""
        channels = self.num_sms // 2
        rdma_ranks = max(num_ranks // NUM_MAX_NVL_PEERS, 1)
        nvl_ranks = min(num_ranks, NUM_MAX_NVL_PEERS)
        per_token = hidden_bytes + 8 + _NUM_MAX_TOPK * 8 + _NUM_MAX_TOPK * 4 + _NUM_MAX_TOPK * 4
        total = channels * nvl_ranks * (2 * rdma_ranks + 3) * 4
        total += channels * nvl_ranks * self.num_max_nvl_chunked_recv_tokens * rdma_ranks * per_token
        return (total + 127) // 128 * 128

    def get_rdma_buffer_size_hint(self, hidden_bytes: int, num_ranks: int) -> int:
        """0 inside one node (no RDMA buffer is used); meshcomm.ep does not run across nodes yet."""
        if num_ranks <= NUM_MAX_NVL_PEERS:
            return 0
        raise NotImplementedError(
            f"meshcomm.ep.Config.get_rdma_buffer_size_hint: {num_ranks} ranks; meshcomm.ep runs inside one node "
            f"(at most {NUM_MAX_NVL_PEERS} ranks) for now"
        )


# DeepEP's recommended configurations per rank count (they size the hints).
_DISPATCH_CHUNKS = {2: (24, 256), 4: (6, 256), 8: (6, 256)}
_COMBINE_CHUNKS = {2: (10, 256), 4: (9, 256), 8: (4, 256)}


def _config_for(table, num_ranks: int, num_sms: int) -> Config:
    if not 1 <= num_ranks <= NUM_MAX_NVL_PEERS:
        raise ValueError(f"meshcomm.ep: {num_ranks} ranks; 1 to {NUM_MAX_NVL_PEERS} ranks of one node are supported")
    send, recv = table.get(num_ranks, (6, 256))
    return Config(num_sms, send, recv, 6, 128)


def dispatch_config(num_ranks: int, num_sms: int) -> Config:
    return _config_for(_DISPATCH_CHUNKS, num_ranks, num_sms)


def combine_config(num_ranks: int, num_sms: int) -> Config:
    return _config_for(_COMBINE_CHUNKS, num_ranks, num_sms)
