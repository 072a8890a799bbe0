"""meshcomm.dsl on the CPU: each operation's plan JSON, each check's error, the shipped programs against their
golden plans, and every shipped program run on the host interpreter against the collective's definition."""
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

dsl = pytest.importorskip("meshcomm.dsl", reason="meshcomm is not importable (PYTHONPATH=<build>/python)")
from meshcomm.dsl import programs  # noqa: E402
from meshcomm.dsl.program import dumps_plan  # noqa: E402
from meshcomm.dsl.simulate import expected_outputs, output_view, run_calls, run_plan, units  # noqa: E402

GOLDEN = Path(__file__).parent / "golden"
CHUNK = {"buffer": "input", "index": 0, "size": 1}


def ref(buffer, index, size=1):
    return {"buffer": buffer, "index": index, "size": size}


def ops_of(plan, rank, tb=0):
    return plan["ranks"][rank]["threadblocks"][tb]["ops"]


# ---- every operation's JSON ------------------------------------------------------------------------------

def test_every_simple_operation_compiles_to_its_plan_op():
    with dsl.CollectiveProgram("every_op", dsl.AllReduce(2, chunks_per_rank=2)) as prog:
        a, b = dsl.Rank(0), dsl.Rank(1)
        a.scratch(2)
        b.scratch(2)
        ab, ba = dsl.MemoryChannel(dst=1, src=0), dsl.MemoryChannel(dst=0, src=1)
        pab, pba = dsl.PortChannel(dst=1, src=0), dsl.PortChannel(dst=0, src=1)
        a.copy(a.scratch()[0], a.input[0], tb=0)
        a.reduce(a.output[0], [a.input[0], a.scratch()[0]], tb=0)
        ab.put(b.scratch()[1], a.input[1], tb=0, signal=True)
        ab.get(a.scratch()[1], b.input[1], tb=0)
        pab.put(b.scratch()[0], a.scratch()[0], tb=1, signal=True, flush=True)
        ab.wait(tb=0, relaxed=True)
        a.barrier([0, 1])
        b.barrier([0, 1])
        ba.wait(tb=0)
        ba.signal(tb=0, relaxed=True)
        pba.wait(tb=1)
    plan = prog.to_json()
    assert plan["format"] == "meshcomm.plan" and plan["version"] == 1
    assert plan["ranks"][0]["channels"] == [{"type": "memory", "peer": 1, "index": 0},
                                            {"type": "port", "peer": 1, "index": 0}]
    assert ops_of(plan, 0, 0) == [
        {"op": "copy", "src": ref("input", 0), "dst": ref("scratch", 0)},
        {"op": "reduce", "srcs": [ref("input", 0), ref("scratch", 0)], "dst": ref("output", 0)},
        {"op": "put", "channel": 0, "src": ref("input", 1), "dst": ref("scratch", 1)},
        {"op": "signal", "channel": 0, "relaxed": False},
        {"op": "get", "channel": 0, "src": ref("input", 1), "dst": ref("scratch", 1)},
        {"op": "wait", "channel": 0, "relaxed": True},
        {"op": "barrier", "threadblocks": [0, 1]},
    ]
    assert ops_of(plan, 0, 1) == [
        {"op": "put", "channel": 1, "src": ref("scratch", 0), "dst": ref("scratch", 0)},
        {"op": "signal", "channel": 1, "relaxed": False},
        {"op": "flush", "channel": 1},
        {"op": "barrier", "threadblocks": [0, 1]},
    ]
    assert [op["op"] for op in ops_of(plan, 1, 0)] == ["barrier", "wait", "signal"]
    assert ops_of(plan, 1, 1) == [{"op": "barrier", "threadblocks": [0, 1]},
                                  {"op": "wait", "channel": 1, "relaxed": False}]


def test_packet_operations_compile_in_an_ll_program():
    with dsl.CollectiveProgram("packets", dsl.AllGather(2), protocol="LL", max_message_size=1 << 16) as prog:
        for r in range(2):
            me, peer = dsl.Rank(r), dsl.Rank(1 - r)
            me.scratch(2)
            peer.scratch(2)
            dsl.MemoryChannel(dst=1 - r, src=r).put_packets(peer.scratch()[r], me.input[0], tb=0)
            me.unpack_packets(me.output[1 - r], me.scratch()[1 - r], tb=0)
            me.copy(me.output[r], me.input[0], tb=0)
    plan = prog.to_json()
    assert plan["protocol"] == "LL"
    assert ops_of(plan, 1) == [
        {"op": "put_packets", "channel": 0, "src": ref("input", 0), "dst": ref("scratch", 1)},
        {"op": "unpack_packets", "src": ref("scratch", 0), "dst": ref("output", 0)},
        {"op": "copy", "src": ref("input", 0), "dst": ref("output", 1)},
    ]


def test_instances_replicate_blocks_channels_and_split_chunks():
    plan = programs.get("allgather_fullmesh")(2, instances=2).to_json()
    assert plan["instances"] == 2 and plan["chunks_per_unit"] == 2
    assert plan["input_chunks"] == 2 and plan["output_chunks"] == 4
    rank0 = plan["ranks"][0]
    assert rank0["channels"] == [{"type": "memory", "peer": 1, "index": 0}, {"type": "memory", "peer": 1, "index": 1}]
    assert [tb["id"] for tb in rank0["threadblocks"]] == [0, 1]
    # instance i takes the i-th half of every chunk range and its own channel
    assert rank0["threadblocks"][1]["ops"][1] == {"op": "put", "channel": 1, "src": ref("input", 1),
                                                  "dst": ref("output", 1)}


def test_instances_split_a_chunk_range_into_one_op_per_chunk():
    # Chunk c of instance i is chunk c * k + i: a range of two chunks is two ops in each instance, so the ops
    # that name the chunks one by one (the reduce) see the same data.
    def program(instances):
        with dsl.CollectiveProgram("ranges", dsl.AllReduce(2, chunks_per_rank=2), instances=instances) as prog:
            for r in range(2):
                me, ch = dsl.Rank(r), dsl.MemoryChannel(dst=1 - r, src=r)
                me.scratch(2)
                ch.put(dsl.Rank(1 - r).scratch()[0:2], me.input[0:2], tb=0, signal=True)
                ch.wait(tb=0)
                for j in range(2):
                    me.reduce(me.output[j], [me.input[j], me.scratch()[j]], tb=0)
        return prog

    assert [op["op"] for op in ops_of(program(1).to_json(), 0)][:2] == ["put", "signal"]
    plan = program(2).to_json()
    tb1 = plan["ranks"][0]["threadblocks"][1]["ops"]
    assert tb1[:3] == [{"op": "put", "channel": 1, "src": ref("input", 1), "dst": ref("scratch", 1)},
                       {"op": "put", "channel": 1, "src": ref("input", 3), "dst": ref("scratch", 3)},
                       {"op": "signal", "channel": 1, "relaxed": False}]
    inputs = [[1, 2, 3, 4, 5, 6, 7], [10, 20, 30, 40, 50, 60, 70]]
    assert run_plan(plan, 7, inputs) == expected_outputs("allreduce", inputs, 7)


def test_in_place_references_land_in_the_larger_buffer():
    with dsl.CollectiveProgram("ag_inplace", dsl.AllGather(2), inplace=True) as prog:
        for r in range(2):
            me, ch = dsl.Rank(r), dsl.MemoryChannel(dst=1 - r, src=r)
            ch.put(dsl.Rank(1 - r).output[r], me.input[0], tb=0, signal=True)
            ch.wait(tb=0)
    plan = prog.to_json()
    assert ops_of(plan, 1)[0] == {"op": "put", "channel": 0, "src": ref("output", 1), "dst": ref("output", 1)}
    n = 5
    inputs = [[1, 2, 3, 4, 5], [6, 7, 8, 9, 10]]
    assert run_plan(plan, n, inputs) == expected_outputs("allgather", inputs, n)


# ---- each check's error ----------------------------------------------------------------------------------

def two_ranks(name="p", spec=None, protocol="Simple"):
    return dsl.CollectiveProgram(name, spec or dsl.AllReduce(2), protocol=protocol,
                                 max_message_size=1 << 16 if protocol == "LL" else None)


def compile_error(build, match):
    with pytest.raises(dsl.DslError, match=match):
        build().to_json()


def test_chunk_outside_its_buffer_is_named():
    def build():
        with two_ranks() as prog:
            dsl.Rank(0).copy(dsl.Rank(0).output[0], dsl.Rank(0).input[1], tb=0)
        return prog
    compile_error(build, r"program p: rank 0, tb 0, op 0 \(copy\): src rank 0 input\[1:2\] is outside rank 0's "
                         r"input of 1 chunks")


def test_a_remote_chunk_of_the_wrong_rank_is_named():
    def build():
        with dsl.CollectiveProgram("p", dsl.AllReduce(3)) as prog:
            for r in range(3):
                for p in dsl.all_peers(r, 3):
                    dsl.MemoryChannel(dst=p, src=r)
            ch = dsl.MemoryChannel(dst=1, src=0)
            dsl.MemoryChannel(dst=0, src=1)
            ch.put(dsl.Rank(2).output[0], dsl.Rank(0).input[0], tb=0)
        return prog
    compile_error(build, r"rank 0, tb 0, op 0 \(put on memory channel 1 to rank 1\): dst rank 2 output\[0:1\] "
                         r"must be rank 1's")


def test_sizes_and_phases_must_agree():
    def sizes():
        with two_ranks(spec=dsl.AllReduce(2, chunks_per_rank=2)) as prog:
            me = dsl.Rank(0)
            me.copy(me.output[0:2], me.input[0:1], tb=0)
        return prog

    def phases():
        with two_ranks(spec=dsl.AllReduce(2, chunks_per_rank=2)) as prog:
            me = dsl.Rank(0)
            me.copy(me.output[0], me.input[1], tb=0)
        return prog
    compile_error(sizes, r"differ in size")
    compile_error(phases, r"lie at different positions in their units of 2 chunks")


def test_channel_kinds_are_checked():
    def get_on_port():
        with two_ranks() as prog:
            dsl.PortChannel(dst=0, src=1)
            ch = dsl.PortChannel(dst=1, src=0)  # PortChannel has no get(); a hand-made op is still checked
            ch._op("get", 0, src=dsl.Rank(1).input[0], dst=dsl.Rank(0).output[0])
        return prog

    def flush_on_memory():
        with two_ranks() as prog:
            dsl.MemoryChannel(dst=0, src=1)
            ch = dsl.MemoryChannel(dst=1, src=0)
            ch._op("flush", 0)
        return prog
    def port_put_from_input():
        with two_ranks() as prog:
            dsl.PortChannel(dst=0, src=1)
            dsl.Rank(1).scratch(1)
            dsl.PortChannel(dst=1, src=0).put(dsl.Rank(1).scratch()[0], dsl.Rank(0).input[0], tb=0)
        return prog
    compile_error(get_on_port, r"get on port channel 0 to rank 1\): get needs a memory channel")
    compile_error(flush_on_memory, r"flush needs a port channel")
    compile_error(port_put_from_input, r"src rank 0 input\[0:1\]: a put on a port channel moves scratch to the "
                                       r"peer's scratch")


def test_packets_need_ll_and_scratch():
    def simple():
        with two_ranks() as prog:
            dsl.MemoryChannel(dst=0, src=1)
            dsl.Rank(1).scratch(1)
            dsl.MemoryChannel(dst=1, src=0).put_packets(dsl.Rank(1).scratch()[0], dsl.Rank(0).input[0], tb=0)
        return prog

    def not_scratch():
        with two_ranks(protocol="LL") as prog:
            dsl.MemoryChannel(dst=0, src=1)
            dsl.MemoryChannel(dst=1, src=0).put_packets(dsl.Rank(1).output[0], dsl.Rank(0).input[0], tb=0)
        return prog
    compile_error(simple, r"LL packet operations need protocol='LL'")
    compile_error(not_scratch, r"packets go into the peer's scratch")


def test_an_unpaired_channel_is_named():
    def build():
        with two_ranks() as prog:
            dsl.MemoryChannel(dst=1, src=0)
        return prog
    compile_error(build, r"rank 0's memory channel 0 to rank 1 has no partner")


def test_signals_and_waits_must_match():
    def build():
        with two_ranks() as prog:
            a, b = dsl.MemoryChannel(dst=1, src=0), dsl.MemoryChannel(dst=0, src=1)
            a.signal(tb=0)
            a.signal(tb=0)
            b.wait(tb=0)
        return prog
    compile_error(build, r"rank 0 signals memory channel 0 to rank 1 2 time\(s\) and rank 1 waits on it 1 time")


def test_one_channel_direction_belongs_to_one_thread_block():
    def build():
        with two_ranks() as prog:
            a, b = dsl.MemoryChannel(dst=1, src=0), dsl.MemoryChannel(dst=0, src=1)
            a.signal(tb=0)
            a.signal(tb=1)
            b.wait(tb=0)
            b.wait(tb=0)
        return prog
    compile_error(build, r"come from several thread blocks")


def test_packets_never_sent_sent_twice_or_never_read_are_named():
    def never_sent():
        with two_ranks(protocol="LL") as prog:
            me = dsl.Rank(0)
            me.scratch(1)
            me.unpack_packets(me.output[0], me.scratch()[0], tb=0)
        return prog

    def sent_twice():
        with dsl.CollectiveProgram("p", dsl.AllReduce(3), protocol="LL", max_message_size=1 << 16) as prog:
            dsl.Rank(0).scratch(1)
            for src in (1, 2):
                dsl.MemoryChannel(dst=src, src=0)
                dsl.MemoryChannel(dst=0, src=src).put_packets(dsl.Rank(0).scratch()[0], dsl.Rank(src).input[0], tb=0)
            dsl.Rank(0).unpack_packets(dsl.Rank(0).output[0], dsl.Rank(0).scratch()[0], tb=0)
        return prog

    def never_read():
        with two_ranks(protocol="LL") as prog:
            dsl.Rank(1).scratch(1)
            dsl.MemoryChannel(dst=0, src=1)
            dsl.MemoryChannel(dst=1, src=0).put_packets(dsl.Rank(1).scratch()[0], dsl.Rank(0).input[0], tb=0)
        return prog
    compile_error(never_sent, r"waits for packets in rank 0 scratch\[0\], which no put_packets sends")
    compile_error(sent_twice, r"rank 2, tb 0, op 0 .*packets into rank 0 scratch\[0\] are also sent by program p: "
                              r"rank 1, tb 0, op 0")
    compile_error(never_read, r"packets into rank 1 scratch\[0\] are never read")


def test_a_deadlock_is_reported_with_its_cycle():
    def build():
        with two_ranks() as prog:
            a, b = dsl.MemoryChannel(dst=1, src=0), dsl.MemoryChannel(dst=0, src=1)
            a.wait(tb=0)
            a.signal(tb=0)
            b.wait(tb=0)
            b.signal(tb=0)
        return prog
    compile_error(build, r"deadlock: each waits for the next: rank \d, tb 0, op \d \((wait|signal) .*-> .*rank \d")


def test_a_deadlock_through_a_barrier_is_found():
    def build():
        with two_ranks() as prog:
            a, b = dsl.MemoryChannel(dst=1, src=0), dsl.MemoryChannel(dst=0, src=1)
            me = dsl.Rank(0)
            a.wait(tb=0)           # needs rank 1's signal, which comes after rank 1's wait ...
            me.barrier([0, 1])
            a.signal(tb=1)         # ... for this signal, which needs tb 0 past its wait: a cycle
            me.barrier([0, 1])     # tb 1's side of the barrier, after its signal
            b.wait(tb=0)
            b.signal(tb=0)
        return prog
    compile_error(build, r"deadlock")


def test_barrier_members_must_meet_equally():
    def build():
        with two_ranks() as prog:
            me = dsl.Rank(0)
            me.copy(me.output[0], me.input[0], tb=1)
            me.barrier([0, 1])
            prog.ops.append(prog.ops[-1].__class__("barrier", 0, 0, threadblocks=[0, 1]))
        return prog
    compile_error(build, r"each member must reach it the same number of times")


def test_thread_block_gaps_bad_ranks_and_multicast_are_refused():
    def gap():
        with two_ranks() as prog:
            dsl.Rank(0).copy(dsl.Rank(0).output[0], dsl.Rank(0).input[0], tb=1)
        return prog
    compile_error(gap, r"rank 0 uses thread blocks \[1\]; number them 0..n-1")
    with two_ranks():
        with pytest.raises(dsl.DslError, match=r"Rank: rank 2 outside 0..1"):
            dsl.Rank(2)
        with pytest.raises(dsl.DslError, match=r"multicast is off"):
            dsl.SwitchChannel([0, 1])
        with pytest.raises(dsl.DslError, match=r"a memory channel to itself"):
            dsl.MemoryChannel(dst=0, src=0)
    with pytest.raises(dsl.DslError, match=r"protocol 'LL128'"):
        dsl.CollectiveProgram("p", dsl.AllReduce(2), protocol="LL128")
    with pytest.raises(dsl.DslError, match=r"no CollectiveProgram is open"):
        dsl.Rank(0)


def test_an_ll_program_keeps_scratch_for_packets_and_names_its_size():
    def scratch_copy():
        with two_ranks(protocol="LL") as prog:
            me = dsl.Rank(0)
            me.scratch(1)
            me.copy(me.scratch()[0], me.input[0], tb=0)
        return prog
    compile_error(scratch_copy, r"copy\): dst rank 0 scratch\[0:1\]: an LL program's scratch holds packets only")
    with pytest.raises(dsl.DslError, match=r"an LL program needs max_message_size"):
        dsl.CollectiveProgram("p", dsl.AllReduce(2), protocol="LL")
    with pytest.raises(dsl.DslError, match=r"num_threads_per_block=1024; a multiple of 32 from 32 to 512"):
        dsl.CollectiveProgram("p", dsl.AllReduce(2), num_threads_per_block=1024)


def test_reduce_needs_two_sources():
    def build():
        with two_ranks() as prog:
            dsl.Rank(0).reduce(dsl.Rank(0).output[0], [dsl.Rank(0).input[0]], tb=0)
        return prog
    compile_error(build, r"reduce needs at least 2 sources, got 1")


# ---- shipped programs ------------------------------------------------------------------------------------

def shipped(num_ranks):
    return [(name, num_ranks) for name in programs.NAMES
            if __import__(f"meshcomm.dsl.programs.{name}", fromlist=["supports"]).supports(num_ranks)]


@pytest.mark.parametrize("name, num_ranks", shipped(4))
def test_shipped_programs_match_their_golden_plans(name, num_ranks):
    text = programs.get(name)(num_ranks).dumps()
    path = GOLDEN / f"{name}.r{num_ranks}.json"
    if os.environ.get("MESHCOMM_UPDATE_GOLDEN") == "1":
        path.write_text(text)
    assert path.exists(), f"{path} missing: MESHCOMM_UPDATE_GOLDEN=1 writes it"
    assert text == path.read_text(), f"{name} at {num_ranks} ranks no longer compiles to {path.name}"
    assert json.loads(text) == programs.get(name)(num_ranks).to_json()


@pytest.mark.parametrize("num_ranks", [2, 3, 4, 5, 8])
@pytest.mark.parametrize("instances", [1, 2])
@pytest.mark.parametrize("inplace", [False, True], ids=["out_of_place", "in_place"])
def test_shipped_programs_compute_their_collective_on_the_host_interpreter(num_ranks, instances, inplace):
    """Greedy and random interleavings of the blocks (seeds), out of place and, for the programs that run in
    place, in place: the caller's output equals the collective's definition every time."""
    rng = random.Random(num_ranks * 10 + instances)
    for name, _ in shipped(num_ranks):
        if inplace and not programs.runs_in_place(name):
            continue
        plan = programs.get(name)(num_ranks, instances=instances, inplace=inplace).to_json()
        assert plan["inplace"] == inplace
        for n in (1, 2, 3, 7, 33):
            for op in ("sum", "max"):
                inputs = [[rng.randint(-99, 99) for _ in range(units(plan["collective"], num_ranks)[0] * n)]
                          for _ in range(num_ranks)]
                want = expected_outputs(plan["collective"], inputs, n, op)
                for seed in (None, 1, 2, 3):
                    got = run_plan(plan, n, inputs, op, seed=seed)
                    got = [output_view(plan, n, r, g) for r, g in enumerate(got)]
                    assert got == want, (name, n, op, seed)


@pytest.mark.parametrize("num_ranks", [2, 3, 4])
def test_shipped_simple_programs_are_correct_with_line_rounded_chunks(num_ranks):
    """The executor rounds a Simple plan's chunk up to whole 128-byte lines, which leaves trailing chunks short or
    empty: the shipped Simple programs still compute their collective (lines of 4 and 32 elements, odd counts)."""
    rng = random.Random(num_ranks + 100)
    for name, _ in shipped(num_ranks):
        for instances in (1, 2):
            plan = programs.get(name)(num_ranks, instances=instances).to_json()
            if plan["protocol"] != "Simple":
                continue
            for n, line in ((3, 4), (33, 4), (70, 32), (1, 32)):
                inputs = [[rng.randint(-99, 99) for _ in range(units(plan["collective"], num_ranks)[0] * n)]
                          for _ in range(num_ranks)]
                want = expected_outputs(plan["collective"], inputs, n)
                for seed in (None, 5):
                    got = run_plan(plan, n, inputs, seed=seed, line=line)
                    assert [output_view(plan, n, r, g) for r, g in enumerate(got)] == want, (name, n, line, seed)


@pytest.mark.parametrize("num_ranks", [2, 3, 4])
def test_shipped_programs_stay_correct_over_back_to_back_calls(num_ranks):
    """Three calls in a row, random interleavings: scratch and semaphores carry over (an LL plan's packets
    alternate halves), each rank starts a call once its previous one ended and, for plans that put or get, after
    the executor's entry barrier; every call's output equals the collective's definition."""
    rng = random.Random(num_ranks)
    for name, _ in shipped(num_ranks):
        for inplace in ([False, True] if programs.runs_in_place(name) else [False]):
            plan = programs.get(name)(num_ranks, instances=2, inplace=inplace).to_json()
            n = 5
            calls = [[[rng.randint(-9, 9) for _ in range(units(plan["collective"], num_ranks)[0] * n)]
                      for _ in range(num_ranks)] for _ in range(3)]
            for seed in (None, 11, 12, 13):
                outs = run_calls(plan, n, calls, "sum", seed=seed)
                for c, inputs in enumerate(calls):
                    got = [output_view(plan, n, r, g) for r, g in enumerate(outs[c])]
                    assert got == expected_outputs(plan["collective"], inputs, n), (name, inplace, seed, c)


def test_a_program_that_cannot_run_in_place_says_so():
    assert not programs.runs_in_place("alltoall_fullmesh")
    with pytest.raises(dsl.DslError, match=r"alltoall_fullmesh does not run in place.*alltoall_allpairs_ll"):
        programs.get("alltoall_fullmesh")(4, inplace=True)


def test_random_interleavings_expose_an_in_place_race():
    """alltoall_fullmesh forced in place (its own refusal bypassed): a peer's put lands on a part this rank has
    not sent yet under some interleavings, so at least one seed gives a wrong result."""
    plan = programs.get("alltoall_fullmesh")(4).to_json()
    plan["inplace"] = True
    inputs = [[r * 100 + i for i in range(4 * 3)] for r in range(4)]
    want = expected_outputs("alltoall", inputs, 3)
    assert any(run_plan(plan, 3, inputs, seed=s) != want for s in range(20))


def test_the_interpreter_catches_a_broken_plan():
    plan = programs.get("allreduce_twoshot")(4).to_json()
    ops = plan["ranks"][2]["threadblocks"][0]["ops"]
    reduce_at = next(i for i, op in enumerate(ops) if op["op"] == "reduce")
    ops[reduce_at]["srcs"] = ops[reduce_at]["srcs"][:-1]  # forget one peer's contribution
    inputs = [[r + 1] * 24 for r in range(4)]  # 2 elements in each of the 12 chunks
    assert run_plan(plan, 24, inputs) != expected_outputs("allreduce", inputs, 24)
    signal_at = next(i for i, op in enumerate(ops) if i > reduce_at and op["op"] == "signal")
    del ops[signal_at]  # and drop a signal: a peer now waits for it forever
    with pytest.raises(dsl.DslError, match=r"stuck: .*wait"):
        run_plan(plan, 24, inputs)


def test_fill_instances_give_each_multiprocessor_one_block():
    """One block per multiprocessor, within the executor's block limit a rank, for every shipped program."""
    assert programs.fill_instances("allreduce_twoshot", 2, 132) == 128  # one block an instance; the limit
    assert programs.fill_instances("allreduce_twoshot", 4, 132) == 42  # three blocks an instance: 126
    assert programs.fill_instances("reduce_scatter_pipelined", 2, 132) == 64  # a put and a reduce block
    assert programs.fill_instances("allreduce_twoshot", 8, 4) == 1  # more blocks than multiprocessors: one
    for sms in (78, 132):
        for name, _ in shipped(4):
            k = programs.fill_instances(name, 4, sms)
            blocks = max(len(r["threadblocks"]) for r in programs.get(name)(4, instances=k).to_json()["ranks"])
            per_instance = blocks // k
            assert blocks <= min(sms, 128) < blocks + per_instance, (name, sms, k, blocks)


def test_max_instances_keep_the_blocks_within_the_executor_limit():
    """The largest count a shipped program compiles with; one more is refused by the compiler."""
    assert programs.max_instances("allreduce_twoshot", 2) == 128
    assert programs.max_instances("allgather_port", 4) == 42  # three blocks an instance: 126
    for name, _ in shipped(4):
        k = programs.max_instances(name, 4)
        programs.get(name)(4, instances=k).to_json()
        with pytest.raises(dsl.DslError, match="thread blocks"):
            programs.get(name)(4, instances=k + 1).to_json()


# ---- the command line ------------------------------------------------------------------------------------

def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "meshcomm.dsl", *args], capture_output=True, text=True)


def test_the_command_line_lists_compiles_and_simulates(tmp_path):
    listed = run_cli("list")
    assert listed.returncode == 0 and listed.stdout.split() == list(programs.NAMES)
    out = tmp_path / "ring.json"
    assert run_cli("compile", "allreduce_ring", "--ranks", "4", "-o", str(out)).returncode == 0
    assert json.loads(out.read_text()) == programs.get("allreduce_ring")(4).to_json()
    sim = run_cli("simulate", str(out), "--elements", "101")
    assert sim.returncode == 0 and "correct" in sim.stdout
    rs = tmp_path / "rs_inplace.json"
    assert run_cli("compile", "reduce_scatter_fullmesh", "--ranks", "4", "--inplace", "-o", str(rs)).returncode == 0
    assert json.loads(rs.read_text())["inplace"] is True
    sim = run_cli("simulate", str(rs), "--elements", "33", "--seeds", "3")
    assert sim.returncode == 0 and "3 random interleavings: correct" in sim.stdout
    filled = tmp_path / "twoshot_fill.json"
    assert run_cli("compile", "allreduce_twoshot", "--ranks", "4", "--instances", "fill", "--multiprocessors", "66",
                   "-o", str(filled)).returncode == 0
    assert json.loads(filled.read_text())["instances"] == 22
    bad = run_cli("compile", "allreduce_twoshot", "--ranks", "4", "--instances", "many")
    assert bad.returncode == 2 and "many" in bad.stderr
    refused = run_cli("compile", "alltoall_fullmesh", "--ranks", "4", "--inplace")
    assert refused.returncode == 2 and "does not run in place" in refused.stderr
    bad = run_cli("compile", "nope", "--ranks", "4")
    assert bad.returncode == 2 and "no shipped program 'nope'" in bad.stderr


def test_dumps_plan_is_json_of_the_plan():
    plan = programs.get("alltoall_fullmesh")(3).to_json()
    assert json.loads(dumps_plan(plan)) == plan
