"""PlanAlgorithm: plans compiled by meshcomm.dsl load as Algorithms (CPU), and every shipped program runs on the
executor on 2 and 4 GPUs with results equal to the collective's definition (skipped, with the reason, without
the GPUs)."""
import json

import pytest
from rank_launcher import assert_all_ok, run_ranks

import meshcomm
from meshcomm.dsl import programs

GPUS = meshcomm.cuda_device_count()


def test_shipped_plans_load_as_algorithms():
    for name in programs.NAMES:
        alg = programs.get(name)(4).to_algorithm()
        assert isinstance(alg, meshcomm.Algorithm) and alg.name == name and alg.num_ranks == 4
        assert alg.protocol == programs.get(name)(4).protocol
    assert repr(programs.get("allgather_fullmesh")(2).to_algorithm()) == \
        "<meshcomm.PlanAlgorithm 'allgather_fullmesh' (allgather, 2 ranks)>"


def test_a_bad_plan_is_refused_naming_its_path(tmp_path):
    plan = programs.get("allreduce_twoshot")(2).to_json()
    plan["ranks"][1]["threadblocks"][0]["ops"][0]["src"]["index"] = 9
    with pytest.raises(meshcomm.InvalidUsageError, match=r'plan "allreduce_twoshot": ranks\[1\].threadblocks\[0\]'
                                                        r'.ops\[0\].src.index: 9 is outside'):
        meshcomm.PlanAlgorithm.from_json(json.dumps(plan))
    path = tmp_path / "plan.json"
    path.write_text(programs.get("alltoall_fullmesh")(2).dumps())
    assert meshcomm.PlanAlgorithm.load(str(path)).name == "alltoall_fullmesh"
    with pytest.raises(meshcomm.Error, match=r"plan file '.*missing.json'"):
        meshcomm.PlanAlgorithm.load(str(tmp_path / "missing.json"))


@pytest.mark.parametrize("n", [2, 4])
def test_every_shipped_plan_runs_on_the_executor(n):
    if GPUS < n:
        pytest.skip(f"needs {n} CUDA GPUs, found {GPUS} (cuda_device_count())")
    results = run_ranks(n, "gpu_plans", from_env=True, timeout=600)
    assert_all_ok(results)
    expected = {name for name in programs.NAMES
                if __import__(f"meshcomm.dsl.programs.{name}", fromlist=["supports"]).supports(n)}
    for r in results:
        assert set(r.result["ran"]) == expected and all(v > 0 for v in r.result["ran"].values())


@pytest.mark.parametrize("n", [2])
def test_executor_trace_records_every_op_of_every_block(n, tmp_path, monkeypatch):
    """MESHCOMM_TRACE: each rank writes one file per traced plan; every call of every block has start, (the
    prologue where the plan runs one), staged, one event per op in order, and end, in time order."""
    if GPUS < n:
        pytest.skip(f"needs {n} CUDA GPUs, found {GPUS} (cuda_device_count())")
    from meshcomm import trace

    calls = 3
    monkeypatch.setenv("MESHCOMM_TRACE", str(tmp_path / "t"))
    results = run_ranks(n, "gpu_plan_trace", args=(calls,), from_env=True, timeout=300)
    assert_all_ok(results)
    for r in results:
        for name, ops_per_block in r.result["ops"].items():
            files = sorted(tmp_path.glob(f"t.plan-{name}.*.rank{r.rank}.json"))
            assert len(files) == 1, f"rank {r.rank} {name}: trace files {files}"
            t = trace.load(str(files[0]))
            assert t.dropped == 0 and t.rank == r.rank
            lines = trace.timelines(t)
            assert len({call for call, _ in lines}) == calls
            for (call, block), line in lines.items():
                names = [t.name(event, arg) for _, event, arg in line]
                body = [x for x in names if x not in ("start", "prologue", "staged", "end")]
                assert names[0] == "start" and names[-1] == "end" and "staged" in names, names
                assert ("prologue" in names) == name.startswith("allreduce_twoshot"), names
                assert [int(x.split("#")[1]) for x in body] == list(range(ops_per_block[block])), names
                assert [x for x, _, _ in line] == sorted(x for x, _, _ in line)
            assert trace.summarize([t])["call"]["count"] == calls
