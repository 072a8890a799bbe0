"""GPU tests: skipped, with the reason, where the GPUs they need are missing. They run the checks of
gpu_checks.py in separate processes (one per GPU), so a CUDA failure cannot take the test runner down."""

import pytest
from rank_launcher import assert_all_ok, run_ranks

import meshcomm

GPUS = meshcomm.cuda_device_count()


def needs_gpus(n):
    return pytest.mark.skipif(GPUS < n, reason=f"needs {n} CUDA GPU(s), found {GPUS} (cuda_device_count())")


@needs_gpus(1)
def test_one_rank_comm_on_one_gpu():
    results = run_ranks(1, "gpu_single")
    assert_all_ok(results)
    assert results[0].result == {"ok": True}


@needs_gpus(1)
def test_gpu_buffer_is_a_zero_copy_dlpack_producer():
    results = run_ranks(1, "gpu_dlpack")
    assert_all_ok(results)
    if "skipped" in results[0].result:
        pytest.skip(results[0].result["skipped"])
    assert results[0].result == {"ok": True}


@needs_gpus(2)
def test_two_ranks_every_collective_and_every_default_algorithm():
    results = run_ranks(2, "gpu_collectives", from_env=True, timeout=600)
    assert_all_ok(results)
    defaults = set(meshcomm.build_default_algorithms().names())
    for r in results:
        got = r.result
        assert got["checked"] == ["all_reduce", "all_gather", "reduce_scatter", "broadcast/reduce/gather/scatter",
                                  "all_to_all", "all_to_allv", "send/recv/barrier"]
        assert set(got["comm_algorithms"]) == defaults
        assert set(got["executed"]) | {name for name, _ in got["declined"]} == defaults
        # Every collective ran through execute with at least one algorithm.
        ran = {meshcomm.build_default_algorithms()[name].collective for name in got["executed"]}
        assert ran == set(meshcomm.Collective), f"collectives never executed: {set(meshcomm.Collective) - ran}"
    # Both ranks declined the same algorithms (a one-sided decline would have hung).
    declined = [[name for name, _ in r.result["declined"]] for r in results]
    assert declined[0] == declined[1], declined


@needs_gpus(2)
def test_two_ranks_run_a_native_algorithm_built_by_compile_native(tmp_path):
    results = run_ranks(2, "gpu_native", args=(tmp_path,), from_env=True, timeout=600)
    assert_all_ok(results)
    assert [r.result["checked"] for r in results] == [33, 33]
