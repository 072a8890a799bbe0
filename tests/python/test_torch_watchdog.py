"""The torch backend's watchdog on 2 GPUs (docs/torch.md "Watchdog"): each case runs watchdog_checks.py as two
processes with torchrun's variables. Skipped, with the reason, without torch and the meshcomm torch extension
or with fewer than 2 GPUs."""

import importlib.util
import signal

import pytest
from rank_launcher import run_ranks

import meshcomm


def torch_backend_missing():
    spec = importlib.util.find_spec("torch")
    if spec is None or spec.origin is None:  # a directory named torch is no torch
        return "torch is not installed"
    if importlib.util.find_spec("meshcomm._torch_backend") is None:
        return "meshcomm was built without its torch extension (meshcomm._torch_backend)"
    if meshcomm.cuda_device_count() < 2:
        return f"needs 2 CUDA GPUs, found {meshcomm.cuda_device_count()}"
    return None


pytestmark = pytest.mark.skipif(torch_backend_missing() is not None, reason=str(torch_backend_missing()))


def test_async_op_past_the_group_timeout_aborts_the_group_and_later_use_raises(monkeypatch):
    monkeypatch.setenv("MESHCOMM_TORCH_ASYNC_ERROR_HANDLING", "2")
    r0, r1 = run_ranks(2, "torch_watchdog", args=("async-timeout",), from_env=True, timeout=240)
    assert r0.returncode == 0 and r1.returncode == 0, r0.describe() + "\n" + r1.describe()
    got = r0.result
    assert got["error_before"] == "ErrorType.SUCCESS" and got["failure_before"] is None, got
    assert got["error_after"] == "ErrorType.TIMEOUT", got
    assert got["failure"].startswith("timeout: rank 0: allreduce #"), got
    assert 2.9 <= got["seconds"] <= 10, f"the 3 s timeout was found after {got['seconds']} s"
    for where in ("next_op", "wait"):
        assert "DistBackendError" in got[where], got
        assert "the process group failed earlier (found by its watchdog)" in got[where], got
        assert "allreduce #" in got[where] and "did not complete within its timeout of 3000 ms" in got[where], got
    assert "meshcomm: rank 0: watchdog: timeout: rank 0: allreduce #" in r0.stderr, r0.stderr
    assert "MESHCOMM_TORCH_ASYNC_ERROR_HANDLING=2 (clean up only)" in r0.stderr, r0.stderr


def test_device_timeout_of_a_blocking_op_is_found_without_an_end_event(monkeypatch):
    monkeypatch.setenv("MESHCOMM_TORCH_ASYNC_ERROR_HANDLING", "2")
    monkeypatch.setenv("MESHCOMM_DEVICE_TIMEOUT_MS", "1500")
    r0, r1 = run_ranks(2, "torch_watchdog", args=("device-error",), from_env=True, timeout=240)
    assert r0.returncode == 0 and r1.returncode == 0, r0.describe() + "\n" + r1.describe()
    got = r0.result
    assert got["error_after"] == "ErrorType.TIMEOUT", got
    assert "waiting for peer 1 timed out" in got["failure"], got
    assert 1.4 <= got["seconds"] <= 10, f"the 1.5 s device timeout was found after {got['seconds']} s"
    assert "DistBackendError" in got["next_op"], got
    assert "rank 0: allreduce: the process group failed earlier" in got["next_op"], got
    assert "waiting for peer 1 timed out" in got["next_op"], got


def test_default_mode_takes_the_process_down():
    r0, r1 = run_ranks(2, "torch_watchdog", args=("teardown",), from_env=True, timeout=240)
    assert r0.returncode == -signal.SIGABRT, r0.describe()
    assert "meshcomm: rank 0: watchdog: timeout: rank 0: allreduce #" in r0.stderr, r0.stderr
    assert "MESHCOMM_TORCH_ASYNC_ERROR_HANDLING=3 (skip clean up): Aborting process due to timeout" in r0.stderr, r0.stderr
    assert "RESULT" not in r0.stdout, "rank 0 went on after its group failed"
    assert r1.returncode == 0, r1.describe()
