"""One rank of a multi-process test (started by rank_launcher.run_ranks): argv = scenario rank n [args].
Prints 'RESULT <json>' and exits 0, or raises (exit 1, traceback on stderr)."""

import json
import sys

import meshcomm
from bootstrap_exercise import exercise


def bootstrap_uid(rank, n, uid_hex):
    uid = meshcomm.UniqueId(bytes.fromhex(uid_hex))
    return exercise(meshcomm.TcpBootstrap(rank, n, uid, timeout=60))


def bootstrap_env(rank, n):
    env = meshcomm.RankEnv.from_env()
    result = exercise(meshcomm.TcpBootstrap.from_env())
    result["rank_env"] = [env.rank, env.world_size, env.local_rank, env.local_world_size, env.source]
    return result


def gpu_collectives(rank, n):
    import gpu_checks

    return gpu_checks.run_all(rank, n)


def gpu_single(rank, n):
    import gpu_checks

    return gpu_checks.run_single()


def gpu_dlpack(rank, n):
    import gpu_checks

    return gpu_checks.run_dlpack()


def gpu_native(rank, n, cache_dir):
    import gpu_checks

    return gpu_checks.run_native(rank, n, cache_dir)


def gpu_plans(rank, n):
    import plan_checks

    return plan_checks.run_plans(rank, n)


def gpu_plan_trace(rank, n, calls):
    import plan_checks

    return plan_checks.run_traced(rank, n, int(calls))


def torch_watchdog(rank, n, case):
    import watchdog_checks

    return watchdog_checks.run(rank, n, case)


SCENARIOS = {
    "bootstrap_uid": bootstrap_uid,
    "bootstrap_env": bootstrap_env,
    "gpu_collectives": gpu_collectives,
    "gpu_single": gpu_single,
    "gpu_dlpack": gpu_dlpack,
    "gpu_native": gpu_native,
    "gpu_plans": gpu_plans,
    "gpu_plan_trace": gpu_plan_trace,
    "torch_watchdog": torch_watchdog,
}

if __name__ == "__main__":
    scenario, rank, n, *args = sys.argv[1:]
    result = SCENARIOS[scenario](int(rank), int(n), *args)
    print("RESULT " + json.dumps(result), flush=True)
