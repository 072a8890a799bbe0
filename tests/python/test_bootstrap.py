"""TcpBootstrap with 2 ranks on loopback: in 2 threads of this process, and in 2 processes (created id, and the
launcher environment through from_env). Each rank all-gathers, receives a broadcast, passes a ring message and
meets the others at a barrier (bootstrap_exercise.py)."""

import threading

import meshcomm
from bootstrap_exercise import exercise, expected_exercise
from rank_launcher import assert_all_ok, run_ranks


def test_two_ranks_in_two_threads():
    n = 2
    uid = meshcomm.TcpBootstrap.create_unique_id(n)
    results, errors = {}, []

    def rank_main(rank):
        try:
            results[rank] = exercise(meshcomm.TcpBootstrap(rank, n, uid, timeout=30))
        except Exception as e:  # reported by the assertion below
            errors.append((rank, e))

    threads = [threading.Thread(target=rank_main, args=(r,)) for r in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors, errors
    assert results == {r: expected_exercise(r, n) for r in range(n)}


def test_two_ranks_in_two_processes_with_a_created_id():
    uid = meshcomm.TcpBootstrap.create_unique_id(2)  # its root runs on a thread of this process
    results = run_ranks(2, "bootstrap_uid", args=[bytes(uid).hex()])
    assert_all_ok(results)
    assert [r.result for r in results] == [expected_exercise(r, 2) for r in range(2)]


def test_two_processes_from_the_launch_environment():
    results = run_ranks(2, "bootstrap_env", from_env=True)
    assert_all_ok(results)
    for rank, r in enumerate(results):
        got = r.result
        assert got.pop("rank_env") == [rank, 2, rank, 2, "torchrun"]
        assert got == expected_exercise(rank, 2)
