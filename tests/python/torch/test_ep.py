"""meshcomm.ep (docs/ep.md) under torchrun: layout, dispatch (bf16, FP8 with float and int scales, with and
without top-k, expert alignment, num_worst_tokens, cached), combine (plain sum, weights, biases), async
finish with previous_event, CUDA-graph capture, bad arguments. Every rank builds every rank's seeded inputs
on the host, so each result is checked against a host reference without communication; token counts differ
per rank and some top-k entries are -1.

Run (one process per GPU): PYTHONPATH=<build>/python torchrun --nproc-per-node=<GPUs> -m pytest -q tests/python/torch
With MESHCOMM_EP_NODE_SIZE=L the same tests run the internode mode: nodes of L ranks, TCP between them.
"""

import os
import zlib

import pytest

HIDDEN = 1024  # bf16 elements per row (2 KiB)
TOPK = 4
EXPERTS_PER_RANK = 3


@pytest.fixture(scope="module")
def buf(world, ep):
    b = ep.Buffer(world.dist.group.WORLD, num_nvl_bytes=256 << 20, explicitly_destroy=True)
    yield b
    b.destroy()


def tokens_of(rank, salt):
    return 0 if salt.endswith("/empty") and rank == 1 else 96 + 37 * rank + zlib.crc32(salt.encode()) % 17


def inputs(world, rank, salt, num_experts):
    """Rank `rank`'s (x, topk_idx, topk_weights) on the host: small integers in x (exact sums in bf16), distinct
    experts per token, about one entry in eight dropped to -1."""
    torch = world.torch
    g = torch.Generator().manual_seed(zlib.crc32(f"{salt}/{rank}".encode()))
    t = tokens_of(rank, salt)
    x = torch.randint(-4, 5, (t, HIDDEN), generator=g).to(torch.bfloat16)
    idx = torch.rand(t, num_experts, generator=g).topk(TOPK, dim=1).indices.to(torch.int64)
    idx[torch.rand(t, TOPK, generator=g) < 0.125] = -1
    w = torch.rand(t, TOPK, generator=g).float() + 0.5
    return x, idx, w


def layout_of(world, idx, num_experts):
    torch = world.torch
    per = num_experts // world.size
    in_rank = torch.zeros(idx.size(0), world.size, dtype=torch.bool)
    for d in range(world.size):
        in_rank[:, d] = ((idx >= d * per) & (idx < (d + 1) * per)).any(1)
    valid = idx[idx >= 0]
    per_expert = torch.bincount(valid, minlength=num_experts).int()
    return in_rank.sum(0).int(), per_expert, in_rank


def expected_receive(world, salt, num_experts, alignment=1):
    """What this rank receives: rows by (source rank, source token), local top-k, weights, source indices,
    rank-prefix column, aligned per-local-expert counts."""
    torch = world.torch
    me, per = world.rank, num_experts // world.size
    xs, idxs, ws, src, prefix = [], [], [], [], []
    total = 0
    for s in range(world.size):
        x, idx, w = inputs(world, s, salt, num_experts)
        _, _, in_rank = layout_of(world, idx, num_experts)
        rows = in_rank[:, me].nonzero().flatten()
        local = idx[rows] - me * per
        local[(idx[rows] < 0) | (local < 0) | (local >= per)] = -1
        xs.append(x[rows]), idxs.append(local), src.append(rows.int())
        ws.append(torch.where(local >= 0, w[rows], torch.zeros_like(w[rows])))
        total += rows.numel()
        prefix.append(total)
    idx = torch.cat(idxs)
    counts = [int((idx == e).any(1).sum()) for e in range(per)]
    counts = [(c + alignment - 1) // alignment * alignment for c in counts]
    return torch.cat(xs), idx, torch.cat(ws), torch.cat(src), torch.tensor(prefix, dtype=torch.int32), counts


def gpu(world, t):
    return t.to(world.device)


def dispatch_inputs(world, buf, salt, num_experts):
    x, idx, w = inputs(world, world.rank, salt, num_experts)
    per_rank, _, per_expert, in_rank, _ = buf.get_dispatch_layout(gpu(world, idx), num_experts)
    return gpu(world, x), gpu(world, idx), gpu(world, w), per_rank, per_expert, in_rank


def assert_same(got, expected, what):
    got = got.cpu()
    assert got.shape == expected.shape, f"{what}: shape {tuple(got.shape)}, expected {tuple(expected.shape)}"
    assert bool((got == expected.to(got.dtype)).all()), f"{what}: differs from the host reference"


def test_the_deep_ep_peer_access_check_passes_on_this_node(world, ep):
    import importlib
    import sys

    sys.path.insert(0, ep.compat_path())
    try:
        importlib.import_module("deep_ep.utils").check_nvlink_connections(world.dist.group.WORLD)
    finally:
        sys.path.remove(ep.compat_path())


def test_layout_matches_the_host(world, buf):
    num_experts = EXPERTS_PER_RANK * world.size
    x, idx, w = inputs(world, world.rank, "layout", num_experts)
    per_rank, rdma, per_expert, in_rank, event = buf.get_dispatch_layout(gpu(world, idx), num_experts)
    ref_rank, ref_expert, ref_in = layout_of(world, idx, num_experts)
    assert event.event is None
    node_size = int(os.environ.get("MESHCOMM_EP_NODE_SIZE", "0")) or world.size  # one host: one node by default
    assert (buf.num_nvl_ranks, buf.num_rdma_ranks) == (node_size, world.size // node_size)
    if buf.num_rdma_ranks == 1:
        assert rdma is None
    else:  # tokens with at least one expert on each node
        assert_same(rdma, ref_in.view(-1, buf.num_rdma_ranks, node_size).any(2).sum(0).int(), "num_tokens_per_rdma_rank")
    assert_same(per_rank, ref_rank, "num_tokens_per_rank")
    assert_same(per_expert, ref_expert, "num_tokens_per_expert")
    assert_same(in_rank, ref_in, "is_token_in_rank")


@pytest.mark.parametrize("alignment", [1, 8])
@pytest.mark.parametrize("salt", ["bf16", "bf16/empty"])
def test_dispatch_then_combine(world, buf, salt, alignment):
    torch = world.torch
    num_experts = EXPERTS_PER_RANK * world.size
    x, idx, w, per_rank, per_expert, in_rank = dispatch_inputs(world, buf, salt, num_experts)
    recv_x, recv_idx, recv_w, counts, handle, event = buf.dispatch(
        x, topk_idx=idx, topk_weights=w, num_tokens_per_rank=per_rank, is_token_in_rank=in_rank,
        num_tokens_per_expert=per_expert, expert_alignment=alignment)
    ex_x, ex_idx, ex_w, ex_src, ex_prefix, ex_counts = expected_receive(world, salt, num_experts, alignment)
    assert event.event is None
    assert_same(recv_x, ex_x, "recv_x")
    assert_same(recv_idx, ex_idx, "recv_topk_idx")
    assert_same(recv_w, ex_w, "recv_topk_weights")
    assert counts == ex_counts, f"num_recv_tokens_per_expert_list {counts}, expected {ex_counts}"
    assert_same(handle[3], ex_src, "handle's recv_src_idx")
    assert_same(handle[0][:, world.rank], ex_prefix, "rank_prefix_matrix column")

    # Each rank returns its rows times (rank + 1): a token comes back as x * the sum of (d + 1) over its ranks.
    y = (recv_x.float() * (world.rank + 1)).to(torch.bfloat16)
    host_x, host_idx, host_w = inputs(world, world.rank, salt, num_experts)
    _, _, host_in = layout_of(world, host_idx, num_experts)
    factor = (host_in.float() * torch.arange(1, world.size + 1).float()).sum(1, keepdim=True)
    bias0 = torch.randint(-2, 3, host_x.shape).to(torch.bfloat16)
    bias1 = torch.randint(-2, 3, host_x.shape).to(torch.bfloat16)
    combined, combined_w, _ = buf.combine(y, handle, topk_weights=recv_w, bias=(gpu(world, bias0), gpu(world, bias1)))
    expected = (host_x.float() * factor + bias0.float() + bias1.float()).to(torch.bfloat16)
    assert_same(combined, expected, "combined_x")
    assert_same(combined_w, torch.where(host_idx >= 0, host_w, torch.zeros_like(host_w)), "combined_topk_weights")

    # The cached dispatch (combine's backward) moves new token rows along the same routes.
    again, none_idx, none_w, none_counts, none_handle, _ = buf.dispatch((x.float() * 2).to(torch.bfloat16), handle=handle)
    assert none_idx is None and none_w is None and none_counts is None and none_handle is None
    assert_same(again, (ex_x.float() * 2).to(torch.bfloat16), "cached dispatch recv_x")


@pytest.mark.parametrize("scale_kind", ["float", "float-column-major", "int"])
def test_fp8_rows_carry_their_scales(world, buf, scale_kind):
    torch = world.torch
    num_experts = EXPERTS_PER_RANK * world.size
    salt = f"fp8/{scale_kind}"
    x, idx, w, per_rank, per_expert, in_rank = dispatch_inputs(world, buf, salt, num_experts)

    def fp8_of(rank):
        hx, _, _ = inputs(world, rank, salt, num_experts)
        g = torch.Generator().manual_seed(zlib.crc32(f"{salt}/scales/{rank}".encode()))
        scales = torch.rand(hx.size(0), HIDDEN // 128, generator=g) + 0.25
        if scale_kind == "int":
            scales = torch.randint(0, 1 << 30, (hx.size(0), HIDDEN // 128), generator=g, dtype=torch.int32)
        return hx.float().to(torch.float8_e4m3fn), scales

    fx, fs = fp8_of(world.rank)
    scales = gpu(world, fs)
    if scale_kind == "float-column-major":
        scales = scales.t().contiguous().t()
    (recv_fx, recv_s), *_ = buf.dispatch(
        (gpu(world, fx), scales), topk_idx=idx, topk_weights=w, num_tokens_per_rank=per_rank,
        is_token_in_rank=in_rank, num_tokens_per_expert=per_expert)
    ex_x, ex_s = [], []
    for s in range(world.size):
        sx, ss = fp8_of(s)
        _, sidx, _ = inputs(world, s, salt, num_experts)
        rows = layout_of(world, sidx, num_experts)[2][:, world.rank].nonzero().flatten()
        ex_x.append(sx[rows].view(torch.uint8)), ex_s.append(ss[rows])
    assert recv_s.dtype == fs.dtype
    assert_same(recv_fx.view(torch.uint8), torch.cat(ex_x), "recv_x (fp8 bytes)")
    assert_same(recv_s, torch.cat(ex_s), "recv_x scales")


def test_dispatch_without_topk(world, buf):
    num_experts = EXPERTS_PER_RANK * world.size
    x, idx, w, per_rank, per_expert, in_rank = dispatch_inputs(world, buf, "no-topk", num_experts)
    recv_x, recv_idx, recv_w, counts, handle, _ = buf.dispatch(
        x, num_tokens_per_rank=per_rank, is_token_in_rank=in_rank)
    ex_x, *_ = expected_receive(world, "no-topk", num_experts)
    assert recv_idx is None and recv_w is None and counts == []
    assert_same(recv_x, ex_x, "recv_x")
    combined, combined_w, _ = buf.combine(recv_x, handle)
    host_x, host_idx, _ = inputs(world, world.rank, "no-topk", num_experts)
    copies = layout_of(world, host_idx, num_experts)[2].sum(1, keepdim=True).float()
    assert combined_w is None
    assert_same(combined, (host_x.float() * copies).to(world.torch.bfloat16), "combined_x")


def test_num_worst_tokens_pads_without_a_host_wait(world, buf):
    torch = world.torch
    num_experts = EXPERTS_PER_RANK * world.size
    x, idx, w, per_rank, per_expert, in_rank = dispatch_inputs(world, buf, "worst", num_experts)
    worst = max(tokens_of(r, "worst") for r in range(world.size)) * world.size
    recv_x, recv_idx, recv_w, counts, handle, _ = buf.dispatch(
        x, topk_idx=idx, topk_weights=w, num_tokens_per_rank=per_rank, is_token_in_rank=in_rank,
        num_tokens_per_expert=per_expert, num_worst_tokens=worst)
    ex_x, ex_idx, ex_w, *_ = expected_receive(world, "worst", num_experts)
    n = ex_x.size(0)
    assert counts == [] and recv_x.size(0) == worst
    assert_same(recv_x[:n], ex_x, "recv_x (received rows)")
    assert_same(recv_idx[:n], ex_idx, "recv_topk_idx (received rows)")
    assert_same(recv_idx[n:], torch.full((worst - n, TOPK), -1, dtype=torch.int64), "recv_topk_idx (padding)")
    assert_same(recv_w[:n], ex_w, "recv_topk_weights (received rows)")
    # The padded rows carry nothing back.
    combined, _, _ = buf.combine(recv_x, handle)
    host_x, host_idx, _ = inputs(world, world.rank, "worst", num_experts)
    copies = layout_of(world, host_idx, num_experts)[2].sum(1, keepdim=True).float()
    assert_same(combined, (host_x.float() * copies).to(torch.bfloat16), "combined_x")


def test_async_finish_after_a_previous_event(world, buf, ep):
    torch = world.torch
    num_experts = EXPERTS_PER_RANK * world.size
    x, idx, w = (gpu(world, t) for t in inputs(world, world.rank, "async", num_experts))
    previous = ep.Buffer.capture()
    per_rank, _, per_expert, in_rank, event = buf.get_dispatch_layout(
        idx, num_experts, previous_event=previous, async_finish=True, allocate_on_comm_stream=True)
    recv_x, recv_idx, recv_w, counts, handle, event = buf.dispatch(
        x, topk_idx=idx, topk_weights=w, num_tokens_per_rank=per_rank, is_token_in_rank=in_rank,
        num_tokens_per_expert=per_expert, previous_event=event, async_finish=True, allocate_on_comm_stream=True)
    assert event.event is not None
    event.current_stream_wait()
    ex_x, ex_idx, *_ = expected_receive(world, "async", num_experts)
    assert_same(recv_x, ex_x, "recv_x")
    assert_same(recv_idx, ex_idx, "recv_topk_idx")
    combined, _, event = buf.combine(recv_x, handle, async_finish=True)
    with event:
        pass
    host_x, host_idx, _ = inputs(world, world.rank, "async", num_experts)
    copies = layout_of(world, host_idx, num_experts)[2].sum(1, keepdim=True).float()
    assert_same(combined, (host_x.float() * copies).to(torch.bfloat16), "combined_x")


def test_a_captured_dispatch_and_combine_replay_with_fresh_inputs(world, buf):
    torch = world.torch
    num_experts = EXPERTS_PER_RANK * world.size
    worst = max(tokens_of(r, f"graph/{i}") for r in range(world.size) for i in range(3)) * world.size
    cap = max(tokens_of(world.rank, f"graph/{i}") for i in range(3))
    # Static tensors sized for the largest replay; each replay fills a prefix and marks the rest -1.
    static_x = torch.zeros(cap, HIDDEN, dtype=torch.bfloat16, device=world.device)
    static_idx = torch.full((cap, TOPK), -1, dtype=torch.int64, device=world.device)
    static_w = torch.zeros(cap, TOPK, dtype=torch.float32, device=world.device)

    def load(salt):
        x, idx, w = inputs(world, world.rank, salt, num_experts)
        static_x.zero_(), static_idx.fill_(-1), static_w.zero_()
        static_x[: x.size(0)].copy_(x), static_idx[: x.size(0)].copy_(idx), static_w[: x.size(0)].copy_(w)
        return x, idx

    def step():
        per_rank, _, per_expert, in_rank, _ = buf.get_dispatch_layout(static_idx, num_experts)
        recv_x, _, _, _, handle, _ = buf.dispatch(
            static_x, topk_idx=static_idx, topk_weights=static_w, num_tokens_per_rank=per_rank,
            is_token_in_rank=in_rank, num_tokens_per_expert=per_expert, num_worst_tokens=worst)
        return buf.combine(recv_x, handle)[0]

    load("graph/0")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step()  # warm-up outside the capture
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = step()
    for i in range(3):
        x, idx = load(f"graph/{i}")
        graph.replay()
        torch.cuda.synchronize()
        copies = layout_of(world, idx, num_experts)[2].sum(1, keepdim=True).float()
        assert_same(out[: x.size(0)], (x.float() * copies).to(torch.bfloat16), f"replay {i}: combined_x")


def test_bad_arguments_name_rank_op_and_argument(world, buf):
    torch = world.torch
    num_experts = EXPERTS_PER_RANK * world.size
    x, idx, w, per_rank, per_expert, in_rank = dispatch_inputs(world, buf, "errors", num_experts)
    with pytest.raises(RuntimeError, match=rf"rank {world.rank}: get_dispatch_layout: topk_idx has dtype"):
        buf.get_dispatch_layout(idx.int(), num_experts)
    with pytest.raises(ValueError, match=rf"rank {world.rank}: dispatch: num_worst_tokens=.* num_nvl_bytes"):
        buf.dispatch(x, topk_idx=idx, topk_weights=w, num_tokens_per_rank=per_rank, is_token_in_rank=in_rank,
                     num_tokens_per_expert=per_expert, num_worst_tokens=1 << 30)
    with pytest.raises(ValueError, match="topk_idx and topk_weights go together"):
        buf.dispatch(x, topk_idx=idx, num_tokens_per_rank=per_rank, is_token_in_rank=in_rank,
                     num_tokens_per_expert=per_expert)
    with pytest.raises(ValueError, match="allocate_on_comm_stream"):
        buf.get_dispatch_layout(idx, num_experts, allocate_on_comm_stream=True)
    fake_handle = (torch.zeros(world.size, world.size, dtype=torch.int32, device=world.device), None, None,
                   torch.zeros(5, dtype=torch.int32, device=world.device), in_rank, None)
    with pytest.raises(ValueError, match=rf"rank {world.rank}: combine: x must be \[5, hidden\]"):
        buf.combine(x[:3], fake_handle)
    with pytest.raises(RuntimeError, match=rf"rank {world.rank}: low_latency_dispatch: .*low_latency_mode=True"):
        buf.low_latency_dispatch(x, idx, 128, num_experts)
    # Nothing above reached the peers: a full dispatch still pairs up.
    recv_x, *_ = buf.dispatch(x, topk_idx=idx, topk_weights=w, num_tokens_per_rank=per_rank,
                              is_token_in_rank=in_rank, num_tokens_per_expert=per_expert)
    assert_same(recv_x, expected_receive(world, "errors", num_experts)[0], "recv_x after the refusals")


def test_the_local_buffer_tensor_is_the_data_area_and_writing_it_breaks_nothing(world, buf):
    torch = world.torch
    whole = buf.get_local_buffer_tensor(torch.int32)
    assert whole.device == world.device and whole.dtype == torch.int32
    assert 0 < whole.numel() * 4 <= buf.num_nvl_bytes
    part = buf.get_local_buffer_tensor(torch.bfloat16, torch.Size([64, 128]), offset=256)
    assert part.shape == (64, 128)
    part.fill_(3.0)
    torch.cuda.synchronize()
    assert int(whole[128:128 + 64 * 128 // 2].eq(0x40404040).sum()) == 64 * 128 // 2  # bf16 3.0 = 0x4040
    whole.fill_(-1)  # garbage everywhere in the data area: the protocol state lies outside it
    torch.cuda.synchronize()
    num_experts = EXPERTS_PER_RANK * world.size
    x, idx, w, per_rank, per_expert, in_rank = dispatch_inputs(world, buf, "local-buffer", num_experts)
    recv_x, *_ = buf.dispatch(x, topk_idx=idx, topk_weights=w, num_tokens_per_rank=per_rank,
                              is_token_in_rank=in_rank, num_tokens_per_expert=per_expert)
    assert_same(recv_x, expected_receive(world, "local-buffer", num_experts)[0], "recv_x after writing the area")
    with pytest.raises(ValueError, match="elements requested"):
        buf.get_local_buffer_tensor(torch.uint8, torch.Size([whole.numel() * 8]))


def test_ten_thousand_dispatch_combine_rounds_with_changing_routing_keep_memory_flat(world, buf):
    """Each round draws new routing and token counts on the GPU; every round's combine (of the received rows
    sent back unchanged) must equal x times the number of ranks each token went to, checked on the GPU."""

    torch = world.torch
    rounds = int(os.environ.get("MESHCOMM_EP_SOAK_ROUNDS", "10000"))
    num_experts = EXPERTS_PER_RANK * world.size
    g = torch.Generator(device=world.device).manual_seed(777 + world.rank)
    x_all = torch.randint(-4, 5, (192, HIDDEN), generator=g, device=world.device).to(torch.bfloat16)
    wrong = torch.zeros((), dtype=torch.int64, device=world.device)

    def one_round(i):
        tokens = 64 + (i * 37 + world.rank * 11) % 129  # 64..192, different per rank and round
        x = x_all[:tokens]
        idx = torch.rand(tokens, num_experts, generator=g, device=world.device).topk(TOPK, dim=1).indices
        idx[torch.rand(tokens, TOPK, generator=g, device=world.device) < 0.125] = -1
        per_rank, _, per_expert, in_rank, _ = buf.get_dispatch_layout(idx, num_experts)
        recv_x, _, _, _, handle, _ = buf.dispatch(
            x, topk_idx=idx, topk_weights=torch.ones(tokens, TOPK, device=world.device),
            num_tokens_per_rank=per_rank, is_token_in_rank=in_rank, num_tokens_per_expert=per_expert)
        combined, _, _ = buf.combine(recv_x, handle)
        expected = (x.float() * in_rank.sum(1, keepdim=True).float()).to(torch.bfloat16)
        wrong.add_((combined != expected).any(1).sum())

    for i in range(20):
        one_round(i)
    torch.cuda.synchronize()
    gpu_before = torch.cuda.memory_allocated(world.device)
    host_before = host_rss_bytes()
    for i in range(20, rounds):
        one_round(i)
    torch.cuda.synchronize()
    gpu_growth = torch.cuda.memory_allocated(world.device) - gpu_before
    host_growth = host_rss_bytes() - host_before
    assert int(wrong) == 0, f"{int(wrong)} tokens combined wrong over {rounds} rounds"
    assert gpu_growth <= 0, f"GPU memory grew by {gpu_growth} bytes over {rounds} rounds"
    assert host_growth < 64 << 20, f"host memory grew by {host_growth} bytes over {rounds} rounds"


def host_rss_bytes():

    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_a_receive_larger_than_the_buffer_is_refused_naming_its_size(world, ep):
    """A Buffer of 1 MiB holds a few hundred rows of 2 KiB: every rank's dispatch raises (nothing written)."""
    small = ep.Buffer(world.dist.group.WORLD, num_nvl_bytes=1 << 20, explicitly_destroy=True)
    try:
        num_experts = EXPERTS_PER_RANK * world.size
        x, idx, w, per_rank, per_expert, in_rank = dispatch_inputs(world, small, "overflow", num_experts)
        received = expected_receive(world, "overflow", num_experts)[0].size(0)
        with pytest.raises(RuntimeError, match=r"expert-parallel buffer too small: rank \d+ would receive \d+ rows"):
            small.dispatch(x, topk_idx=idx, topk_weights=w, num_tokens_per_rank=per_rank, is_token_in_rank=in_rank,
                           num_tokens_per_expert=per_expert)
        assert received > 0
    finally:
        small.destroy()


def test_an_expert_index_out_of_range_is_named(world, buf):
    """Last in this file: the device error stays reported on the Buffer's Comm. Every rank routes one entry to
    a missing expert; the layout skips it and the dispatch's wait for its receive count raises, naming it."""
    num_experts = EXPERTS_PER_RANK * world.size
    x, idx, w = (gpu(world, t) for t in inputs(world, world.rank, "bad-expert", num_experts))
    idx[0, 0] = num_experts + 5
    per_rank, _, per_expert, in_rank, _ = buf.get_dispatch_layout(idx, num_experts)
    with pytest.raises(RuntimeError, match=rf"rank {world.rank}: expert index {num_experts + 5} outside \[-1, {num_experts}\)"):
        buf.dispatch(x, topk_idx=idx, topk_weights=w, num_tokens_per_rank=per_rank, is_token_in_rank=in_rank,
                     num_tokens_per_expert=per_expert)
