"""C++ errors arrive as meshcomm exceptions with the C++ text unchanged and the ErrorCode in .code."""

import builtins
import threading
import time

import pytest

import meshcomm
from meshcomm import ErrorCode


def test_hierarchy():
    classes = {
        meshcomm.InvalidUsageError, meshcomm.SystemCallError, meshcomm.CudaError, meshcomm.TimeoutError,
        meshcomm.RemoteError, meshcomm.InternalError,
    }
    for cls in classes:
        assert issubclass(cls, meshcomm.Error)
        assert cls.__module__ == "meshcomm"
    assert issubclass(meshcomm.Error, RuntimeError)
    assert issubclass(meshcomm.TimeoutError, builtins.TimeoutError)
    assert not issubclass(meshcomm.RemoteError, builtins.TimeoutError)


def test_invalid_unique_id_text_and_code():
    with pytest.raises(meshcomm.InvalidUsageError) as info:
        meshcomm.TcpBootstrap(0, 2, meshcomm.UniqueId())
    assert str(info.value) == (
        "invalid usage: rank 0: TcpBootstrap: the UniqueId is not a meshcomm id "
        "(bad magic; was it copied intact to every rank?)")
    assert info.value.code == ErrorCode.INVALID_USAGE


def test_bad_rank_is_rejected_before_any_network_use():
    uid = meshcomm.TcpBootstrap.create_unique_id(2)
    with pytest.raises(meshcomm.InvalidUsageError, match=r"^invalid usage: TcpBootstrap: rank 5"):
        meshcomm.TcpBootstrap(5, 2, uid, timeout=5)


def test_malformed_launcher_variable_is_named(monkeypatch):
    monkeypatch.setenv("RANK", "abc")
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(meshcomm.InvalidUsageError) as info:
        meshcomm.RankEnv.from_env()
    assert "RANK" in str(info.value) and "abc" in str(info.value)


def test_recv_timeout_is_a_timeout_error_and_releases_the_gil():
    uid = meshcomm.TcpBootstrap.create_unique_id(1)
    bootstrap = meshcomm.TcpBootstrap(0, 1, uid, timeout=0.5)
    ticks = []
    stop = threading.Event()

    def ticker():
        while not stop.is_set():
            ticks.append(time.monotonic())
            time.sleep(0.005)

    thread = threading.Thread(target=ticker)
    thread.start()
    try:
        start = time.monotonic()
        with pytest.raises(meshcomm.TimeoutError) as info:
            bootstrap.recv(4, 0, 7)
        waited = time.monotonic() - start
    finally:
        stop.set()
        thread.join()
    assert str(info.value).startswith("timeout: rank 0: bootstrap recv from peer 0 tag 7 timed out after")
    assert info.value.code == ErrorCode.TIMEOUT
    assert isinstance(info.value, builtins.TimeoutError)
    assert 0.4 < waited < 5
    # The other thread kept running while recv waited (the GIL was released): ~100 ticks in 0.5 s.
    assert len([t for t in ticks if start < t < start + waited]) > 20


def test_negative_tag_text():
    bootstrap = meshcomm.TcpBootstrap(0, 1, meshcomm.TcpBootstrap.create_unique_id(1), timeout=5)
    with pytest.raises(meshcomm.InvalidUsageError) as info:
        bootstrap.send(b"x", 0, -1)
    assert str(info.value).startswith("invalid usage: rank 0: bootstrap send(peer 0, tag -1")
