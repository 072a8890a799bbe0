"""meshcomm.ep's low-latency mode (docs/ep.md, "Low-latency mode") under torchrun: dispatch (BF16, FP8, FP8 with
power-of-two and UE8M0 scales) into the expert-major layout, combine (weighted), the recv-hook split with two
calls outstanding, zero-copy combine, CUDA-graph replay, statistics, and the refusals. Every rank builds every
rank's seeded inputs on the host, so each result is checked against a host reference (the FP8 cast included,
bit for bit).

Run (one process per GPU): PYTHONPATH=<build>/python torchrun --nproc-per-node=<GPUs> -m pytest -q tests/python/torch
"""

import zlib

import pytest

M = 48  # num_max_dispatch_tokens_per_rank
HIDDEN = 1024  # a multiple of 512 (UE8M0 packs four scales per int32)
TOPK = 4
EXPERTS_PER_RANK = 3


@pytest.fixture(scope="module")
def buf(world, ep):
    experts = EXPERTS_PER_RANK * world.size
    size = ep.Buffer.get_low_latency_rdma_size_hint(M, HIDDEN, world.size, experts)
    b = ep.Buffer(world.dist.group.WORLD, num_rdma_bytes=size, low_latency_mode=True,
                  num_qps_per_rank=EXPERTS_PER_RANK, explicitly_destroy=True)
    yield b
    b.destroy()


def experts_of(world):
    return EXPERTS_PER_RANK * world.size


def inputs(world, rank, salt):
    """Rank `rank`'s (x [T, H] bf16, topk_idx [T, K], topk_weights [T, K]) on the host: T <= M varies by rank,
    distinct experts per token, about one entry in eight -1."""
    torch = world.torch
    g = torch.Generator().manual_seed(zlib.crc32(f"ll/{salt}/{rank}".encode()))
    t = M - 5 * rank if not salt.endswith("/empty") or rank != 1 else 0
    x = (torch.randn(t, HIDDEN, generator=g) * 3).to(torch.bfloat16)
    idx = torch.rand(t, experts_of(world), generator=g).topk(TOPK, dim=1).indices.to(torch.int64)
    idx[torch.rand(t, TOPK, generator=g) < 0.125] = -1
    w = torch.rand(t, TOPK, generator=g) + 0.25
    return x, idx, w


def fp8_cast(torch, x, round_scale):
    """The kernel's cast on the host: per 128 channels amax (floor 1e-4), scale 448/amax (a true division: torch's
    scalar / tensor multiplies by the reciprocal) and its inverse amax * (1/448), or powers of two."""
    t = x.size(0)
    g = x.float().view(t, HIDDEN // 128, 128)
    amax = g.abs().amax(-1).clamp(min=1e-4)
    inv_max = torch.tensor(1.0 / 448.0, dtype=torch.float32)  # DeepEP's arithmetic, in fp32
    if round_scale:
        mantissa, exponent = torch.frexp(amax * inv_max)  # x = m * 2^e, m in [0.5, 1): ceil(log2 x) exactly
        e = (exponent - (mantissa == 0.5).int()).float()
        scale_inv, scale = torch.exp2(e), torch.exp2(-e)
    else:
        scale_inv, scale = amax * inv_max, torch.full_like(amax, 448.0) / amax
    q = (g * scale.unsqueeze(-1)).clamp(-448.0, 448.0).to(torch.float8_e4m3fn).view(t, HIDDEN)
    return q, scale_inv


def expected(world, salt):
    """Per local expert: the (source rank, token) pairs in order, and the per-source counts."""
    me, per = world.rank, EXPERTS_PER_RANK
    pairs = [[] for _ in range(per)]
    counts = [[0] * world.size for _ in range(per)]
    for s in range(world.size):
        _, idx, _ = inputs(world, s, salt)
        for el in range(per):
            tokens = (idx == me * per + el).any(1).nonzero().flatten().tolist()
            pairs[el] += [(s, t) for t in tokens]
            counts[el][s] = len(tokens)
    return pairs, counts


def gpu(world, t):
    return t.to(world.device)


def dispatch(world, buf, salt, **kwargs):
    x, idx, _ = inputs(world, world.rank, salt)
    return buf.low_latency_dispatch(gpu(world, x), gpu(world, idx), M, experts_of(world), **kwargs)


def check_layout(world, salt, count, handle):
    pairs, counts = expected(world, salt)
    src_info, layout_range = handle[0].cpu(), handle[1].cpu()
    for el in range(EXPERTS_PER_RANK):
        n = len(pairs[el])
        assert int(count[el]) == n, f"expert {el}: recv_count {int(count[el])}, expected {n}"
        begin = 0
        for s in range(world.size):
            r = int(layout_range[el, s])
            assert (r >> 32, r & 0xFFFFFFFF) == (begin, counts[el][s]), f"expert {el} source {s}: layout_range"
            begin += counts[el][s]
        assert src_info[el, :n].tolist() == [t for _, t in pairs[el]], f"expert {el}: src_info"
    return pairs


@pytest.mark.parametrize("salt", ["bf16", "bf16/empty"])
def test_bf16_dispatch_then_weighted_combine(world, buf, salt):
    torch = world.torch
    stats = torch.zeros(EXPERTS_PER_RANK, dtype=torch.int32, device=world.device)
    recv_x, count, handle, event, hook = dispatch(world, buf, salt, use_fp8=False,
                                                  cumulative_local_expert_recv_stats=stats)
    hook()
    assert event.event is None and recv_x.dtype == torch.bfloat16
    pairs = check_layout(world, salt, count.cpu(), handle)
    host = [inputs(world, s, salt)[0] for s in range(world.size)]
    for el in range(EXPERTS_PER_RANK):
        n = len(pairs[el])
        want = torch.stack([host[s][t] for s, t in pairs[el]]) if n else torch.empty(0, HIDDEN, dtype=torch.bfloat16)
        assert torch.equal(recv_x[el, :n].cpu(), want), f"expert {el}: rows differ"
    assert stats.cpu().tolist() == [len(p) for p in pairs]

    # Expert e returns its rows times (e + 1); the owner sums weight * row over its top-k.
    scale = torch.arange(EXPERTS_PER_RANK, device=world.device) + world.rank * EXPERTS_PER_RANK + 1
    y = (recv_x.float() * scale.view(-1, 1, 1)).to(torch.bfloat16)
    x, idx, w = inputs(world, world.rank, salt)
    combined, event, hook = buf.low_latency_combine(y, gpu(world, idx), gpu(world, w), handle)
    hook()
    factor = torch.where(idx >= 0, w * (idx + 1).float(), torch.zeros_like(w)).sum(1, keepdim=True)
    want = (x.float() * factor).to(torch.bfloat16)
    assert torch.allclose(combined.cpu().float(), want.float(), rtol=1e-2, atol=1e-2), "combined_x"


@pytest.mark.parametrize("round_scale, ue8m0", [(False, False), (True, False), (True, True)])
def test_fp8_dispatch_matches_the_host_cast(world, buf, round_scale, ue8m0):
    torch = world.torch
    salt = f"fp8/{round_scale}/{ue8m0}"
    (recv_x, scales), count, handle, event, _ = dispatch(world, buf, salt, use_fp8=True, round_scale=round_scale,
                                                         use_ue8m0=ue8m0, async_finish=True)
    event.current_stream_wait()
    pairs = check_layout(world, salt, count.cpu(), handle)
    casts = [fp8_cast(torch, inputs(world, s, salt)[0], round_scale) for s in range(world.size)]
    scales = scales.contiguous().cpu()
    for el in range(EXPERTS_PER_RANK):
        n = len(pairs[el])
        if n == 0:
            continue
        want_q = torch.stack([casts[s][0][t] for s, t in pairs[el]])
        want_s = torch.stack([casts[s][1][t] for s, t in pairs[el]])
        assert torch.equal(recv_x[el, :n].cpu().view(torch.uint8), want_q.view(torch.uint8)), f"expert {el}: fp8"
        if ue8m0:
            got = scales[el, :n].view(torch.uint8).view(n, HIDDEN // 128)
            want = ((want_s.view(torch.int32) >> 23) & 0xFF).to(torch.uint8)
            assert torch.equal(got, want), f"expert {el}: UE8M0 scales"
        else:
            assert torch.equal(scales[el, :n], want_s), f"expert {el}: scales"


def test_two_calls_outstanding_then_hooks_in_reverse_order(world, buf):
    torch = world.torch
    first = dispatch(world, buf, "hook/0", use_fp8=False, return_recv_hook=True)
    second = dispatch(world, buf, "hook/1", use_fp8=False, return_recv_hook=True)
    with pytest.raises(RuntimeError, match=rf"rank {world.rank}: low_latency_dispatch: call \d+ still awaits"):
        dispatch(world, buf, "hook/2", use_fp8=False, return_recv_hook=True)
    second[4]()
    first[4]()
    with pytest.raises(RuntimeError, match="has no receive pending"):
        first[4]()
    torch.cuda.synchronize()
    for salt, (recv_x, count, handle, _, _) in (("hook/0", first), ("hook/1", second)):
        pairs = check_layout(world, salt, count.cpu(), handle)
        host = [inputs(world, s, salt)[0] for s in range(world.size)]
        for el in range(EXPERTS_PER_RANK):
            n = len(pairs[el])
            if n:
                assert torch.equal(recv_x[el, :n].cpu(), torch.stack([host[s][t] for s, t in pairs[el]])), salt


def test_zero_copy_combine_sends_the_buffer(world, buf):
    torch = world.torch
    recv_x, count, handle, _, hook = dispatch(world, buf, "zero-copy", use_fp8=False)
    source = buf.get_next_low_latency_combine_buffer(handle)
    assert tuple(source.shape) == tuple(recv_x.shape) and source.dtype == torch.bfloat16
    source.copy_(recv_x)
    x, idx, w = inputs(world, world.rank, "zero-copy")
    combined, _, _ = buf.low_latency_combine(torch.empty(0), gpu(world, idx), gpu(world, w), handle, zero_copy=True)
    factor = torch.where(idx >= 0, w, torch.zeros_like(w)).sum(1, keepdim=True)
    assert torch.allclose(combined.cpu().float(), (x.float() * factor), rtol=1e-2, atol=1e-2)


def test_a_captured_dispatch_and_combine_replay_with_fresh_inputs(world, buf):
    torch = world.torch
    static_x = torch.zeros(M, HIDDEN, dtype=torch.bfloat16, device=world.device)
    static_idx = torch.full((M, TOPK), -1, dtype=torch.int64, device=world.device)
    static_w = torch.zeros(M, TOPK, dtype=torch.float32, device=world.device)

    def load(salt):
        x, idx, w = inputs(world, world.rank, salt)
        static_x.zero_(), static_idx.fill_(-1), static_w.zero_()
        static_x[: x.size(0)].copy_(x), static_idx[: x.size(0)].copy_(idx), static_w[: x.size(0)].copy_(w)
        return x, idx, w

    def step():
        recv_x, _, handle, _, _ = buf.low_latency_dispatch(static_x, static_idx, M, experts_of(world), use_fp8=False)
        return buf.low_latency_combine(recv_x, static_idx, static_w, handle)[0]

    load("graph/0")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = step()
    for i in range(3):
        x, idx, w = load(f"graph/{i}")
        graph.replay()
        torch.cuda.synchronize()
        factor = torch.where(idx >= 0, w, torch.zeros_like(w)).sum(1, keepdim=True)
        assert torch.allclose(out[: x.size(0)].cpu().float(), x.float() * factor, rtol=1e-2, atol=1e-2), f"replay {i}"


def test_refusals_name_rank_op_and_argument(world, buf):
    torch = world.torch
    x, idx, w = (gpu(world, t) for t in inputs(world, world.rank, "refusals"))
    big = torch.zeros(M + 1, HIDDEN, dtype=torch.bfloat16, device=world.device)
    big_idx = torch.zeros(M + 1, TOPK, dtype=torch.int64, device=world.device)
    with pytest.raises(RuntimeError, match=rf"rank {world.rank}: low_latency_dispatch: {M + 1} tokens"):
        buf.low_latency_dispatch(big, big_idx, M, experts_of(world))
    with pytest.raises(RuntimeError, match="use_ue8m0 needs"):
        buf.low_latency_dispatch(x, idx, M, experts_of(world), use_fp8=True, round_scale=False, use_ue8m0=True)
    with pytest.raises(RuntimeError, match=rf"rank {world.rank}: low_latency_dispatch: topk_idx has dtype"):
        buf.low_latency_dispatch(x, idx.int(), M, experts_of(world))
    with pytest.raises(RuntimeError, match="need .* bytes, the buffer has"):
        buf.low_latency_dispatch(x, idx, M * 64, experts_of(world))
    with pytest.raises(NotImplementedError, match="use_logfmt"):
        buf.low_latency_combine(x, idx, w, (None, None, M, HIDDEN, experts_of(world)), use_logfmt=True)
    with pytest.raises(RuntimeError, match="without low_latency_mode|no normal-mode region"):
        buf.get_dispatch_layout(idx, experts_of(world))
    # Nothing above reached the peers: a full dispatch still pairs up.
    recv_x, count, handle, _, _ = buf.low_latency_dispatch(x, idx, M, experts_of(world), use_fp8=False)
    check_layout(world, "refusals", count.cpu(), handle)
