"""meshcomm.ep without GPUs (docs/ep.md): Config's checks and DeepEP's size-hint formula, EventOverlap without
an event, and the Buffer's refusals that need no communication (low-latency and internode modes, bad sizes).
A meshcomm built without torch has no meshcomm._torch_ep: the import says so. GPU runs:
tests/python/torch/test_ep.py."""

import importlib
import importlib.util
import os

import pytest


def ep_built():
    spec = importlib.util.find_spec("meshcomm")
    if spec is None:
        return False
    folder = os.path.dirname(spec.origin)
    return any(name.startswith("_torch_ep") for name in os.listdir(folder))


@pytest.fixture
def ep():
    if not ep_built():
        pytest.skip("meshcomm was built without torch: no meshcomm._torch_ep")
    return importlib.import_module("meshcomm.ep")


def test_without_torch_the_import_names_the_missing_extension():
    if ep_built():
        pytest.skip("this build has meshcomm._torch_ep")
    with pytest.raises(ImportError) as info:
        importlib.import_module("meshcomm.ep")
    assert "_torch_ep" in str(info.value) or "torch" in str(info.value), str(info.value)


def test_the_nvl_size_hint_is_deepeps(ep):
    # DeepEP V1: C·R·(2·R_rdma+3)·4 + C·R·Trecv·(hidden + 8 + 128·8 + 128·4 + 128·4), rounded up to 128.
    hidden_bytes, ranks = 7168 * 2, 8
    expected = 10 * 8 * 5 * 4 + 10 * 8 * 256 * (hidden_bytes + 8 + 1024 + 512 + 512)
    expected = (expected + 127) // 128 * 128
    assert ep.Config(20, 6, 256, 6, 128).get_nvl_buffer_size_hint(hidden_bytes, ranks) == expected
    assert ep.Config(24, 8, 512).get_nvl_buffer_size_hint(4096, 4) == (
        (12 * 4 * 5 * 4 + 12 * 4 * 512 * (4096 + 8 + 2048) + 127) // 128 * 128
    )
    assert ep.Config().get_rdma_buffer_size_hint(hidden_bytes, ranks) == 0


def test_configs_per_rank_count_follow_buffer_num_sms(ep):
    saved = ep.Buffer.num_sms
    try:
        ep.Buffer.set_num_sms(24)
        assert ep.Buffer.get_dispatch_config(8).num_sms == 24
        assert ep.Buffer.get_combine_config(2).num_max_nvl_chunked_send_tokens == 10
        with pytest.raises(ValueError, match="positive even"):
            ep.Buffer.set_num_sms(7)
        with pytest.raises(ValueError, match="16 ranks"):
            ep.Buffer.get_dispatch_config(16)
    finally:
        ep.Buffer.num_sms = saved


@pytest.mark.parametrize(
    "args, message",
    [
        ((7,), "num_sms=7"),
        ((0,), "num_sms=0"),
        ((20, 0), "num_max_nvl_chunked_send_tokens=0"),
        ((20, 300, 256), "exceeds"),
    ],
)
def test_config_rejects_bad_fields_by_name(ep, args, message):
    with pytest.raises(ValueError, match=message):
        ep.Config(*args)


def test_an_overlap_without_event_waits_for_nothing(ep):
    overlap = ep.EventOverlap(None)
    with overlap as entered:
        assert entered is overlap
    with pytest.raises(AssertionError, match="async_finish"):
        overlap.current_stream_wait()


class FakeGroup:
    """What the Buffer reads from a process group before it communicates."""

    def __init__(self, rank, size):
        self._rank, self._size = rank, size

    def rank(self):
        return self._rank

    def size(self):
        return self._size


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        (dict(low_latency_mode=True), ValueError, "num_rdma_bytes=0"),
        (dict(num_rdma_bytes=1 << 20, low_latency_mode=True, allow_nvlink_for_low_latency_mode=False),
         NotImplementedError, "without NVLink"),
        (dict(num_nvl_bytes=1 << 20, allow_mnnvl=True), NotImplementedError, "allow_mnnvl"),
        (dict(num_nvl_bytes=1 << 20, use_fabric=True), NotImplementedError, "use_fabric"),
        (dict(num_nvl_bytes=0), ValueError, "num_nvl_bytes=0"),
        (dict(num_nvl_bytes=1000), ValueError, "multiple of 128"),
    ],
)
def test_the_buffer_refuses_what_it_cannot_run_before_communicating(ep, kwargs, error, message):
    with pytest.raises(error, match=message):
        ep.Buffer(FakeGroup(1, 4), **kwargs)


def test_a_group_larger_than_a_node_is_refused(ep):
    with pytest.raises(NotImplementedError, match="16 ranks"):
        ep.Buffer(FakeGroup(0, 16), num_nvl_bytes=1 << 20)


def test_the_constructor_takes_deepeps_v1_parameters_in_order(ep):
    import inspect

    names = list(inspect.signature(ep.Buffer.__init__).parameters)[1:]
    assert names == ["group", "num_nvl_bytes", "num_rdma_bytes", "low_latency_mode", "num_qps_per_rank",
                     "allow_nvlink_for_low_latency_mode", "allow_mnnvl", "use_fabric", "explicitly_destroy",
                     "enable_shrink", "comm"]


def test_the_low_latency_size_hint_is_the_region_layout(ep):
    # Two halves of E*M messages (16-byte header + 2H) and of E*M combine rows (2H), after 256-aligned flags.
    M, H, R, E = 128, 7168, 4, 288
    flags = (2 * 1024 * 8 * 2 + 2 * 2 * 8 * 8 + 255) // 256 * 256  # counts, ready words, credits per half
    assert ep.Buffer.get_low_latency_rdma_size_hint(M, H, R, E) == flags + 2 * E * M * (16 + 2 * H) + 2 * E * M * 2 * H


def test_topk_idx_t_is_int64(ep):
    import torch

    assert ep.topk_idx_t == torch.int64


def test_the_deep_ep_package_reexports_meshcomm_ep(ep):
    import sys

    saved = list(sys.path)
    try:
        sys.path.insert(0, ep.compat_path())
        deep_ep = importlib.import_module("deep_ep")
        utils = importlib.import_module("deep_ep.utils")
        assert deep_ep.__file__.startswith(ep.compat_path()), deep_ep.__file__
        assert deep_ep.Buffer is ep.Buffer and deep_ep.Config is ep.Config
        assert utils.EventOverlap is ep.EventOverlap and utils.EventHandle is ep.EventHandle
        assert importlib.import_module("deep_ep.buffer").Buffer is ep.Buffer
    finally:
        sys.path[:] = saved
        for name in [n for n in sys.modules if n == "deep_ep" or n.startswith("deep_ep.")]:
            del sys.modules[name]


def test_install_deep_ep_writes_and_removes_a_pth_file(ep, tmp_path):
    import site
    import sys

    tool = importlib.import_module("meshcomm.ep.install_deep_ep")
    if tool.other_deep_ep() is not None:
        pytest.skip(f"DeepEP's deep_ep is importable here ({tool.other_deep_ep()})")
    tool.main(["--site-dir", str(tmp_path)])
    pth = tmp_path / tool.PTH_NAME
    assert pth.read_text().strip() == ep.compat_path()
    saved = list(sys.path)
    try:
        site.addsitedir(str(tmp_path))  # what the interpreter does with site-packages at start-up
        assert importlib.import_module("deep_ep").Buffer is ep.Buffer
    finally:
        sys.path[:] = saved
        for name in [n for n in sys.modules if n == "deep_ep" or n.startswith("deep_ep.")]:
            del sys.modules[name]
    tool.main(["--site-dir", str(tmp_path), "--remove"])
    assert not pth.exists()
