"""The GPU checks one rank runs for plans (rank_worker.py scenario gpu_plans): every shipped meshcomm.dsl program
that supports the world size, compiled, registered as a PlanAlgorithm and run through Algorithm.execute on
random small integers (exact in every dtype used), outputs poisoned first, odd and even counts, every reduce op
the executor runs, compiled with 1 and 3 instances; results compared element by element with the collective's
definition on the host (meshcomm.dsl.simulate.expected_outputs); the programs that run in place also once in
place (one buffer, NCCL's in-place layout, float32 sum). CUDA-graph replay is checked by
bench/torch/plans_bench.py (torch graphs)."""

import json
import random

import meshcomm
from gpu_checks import check, decode, encode
from meshcomm import DataType, ReduceOp
from meshcomm.dsl import programs
from meshcomm.dsl.simulate import expected_outputs, units

COUNTS = (1, 3, 1003, 70001)
OPS = {ReduceOp.SUM: "sum", ReduceOp.MAX: "max", ReduceOp.MIN: "min"}
POISON = -999.0
INSTANCES = (1, 3)  # one copy of each thread block, and three (chunks split three ways; odd counts)


def shipped_plan(name, n, instances, inplace=False):
    """The shipped program's plan with its size range opened (the range only steers the selector)."""
    plan = programs.get(name)(n, instances=instances, inplace=inplace).to_json()
    plan["name"] = f"{name}_x{instances}" + ("_inplace" if inplace else "")
    plan["min_message_size"] = 0
    return plan


def run_one(comm, alg, plan, rank, n, count, dtype, op):
    """Out of place: a send buffer and a poisoned receive buffer. In place: one buffer of max(in, out) units in
    NCCL's layout (allgather's input at unit `rank` of the output, reduce-scatter's output at unit `rank` of the
    input), poisoned where the input is not. Every buffer registered (plans may reach the peers' buffers)."""
    iu, ou = units(plan["collective"], n)
    esize = meshcomm.data_type_size(dtype)
    rng = [random.Random(f"{plan['name']}-{count}-{dtype}-{op}-{r}") for r in range(n)]
    rows = [[float(g.randint(-4, 4)) for _ in range(iu * count)] for g in rng]
    if plan["inplace"]:
        in_at, out_at = (rank * count if iu < ou else 0), (rank * count if iu > ou else 0)
        values = [POISON] * (max(iu, ou) * count)
        values[in_at:in_at + iu * count] = rows[rank]
        bufs = [meshcomm.GpuBuffer(len(values) * esize)]
        bufs[0].upload(encode(values, dtype))
        in_ptr, out_ptr = bufs[0].ptr + in_at * esize, bufs[0].ptr + out_at * esize
    else:
        out_at = 0
        bufs = [meshcomm.GpuBuffer(iu * count * esize), meshcomm.GpuBuffer(ou * count * esize)]
        bufs[0].upload(encode(rows[rank], dtype))
        bufs[1].upload(encode([POISON] * (ou * count), dtype))
        in_ptr, out_ptr = bufs[0].ptr, bufs[1].ptr
    regs = [comm.register_buffer(b.ptr, b.nbytes) for b in bufs]
    try:
        alg.execute(comm, in_ptr, out_ptr, iu * count * esize, ou * count * esize, dtype, op=op,
                    executor=meshcomm.Executor(comm))
        got = decode(bufs[-1].download(bufs[-1].nbytes), dtype)[out_at:out_at + ou * count]
        want = expected_outputs(plan["collective"], rows, count, OPS[op])[rank]
        check(f"{plan['name']} {meshcomm.data_type_name(dtype)} {OPS[op]} count={count}", got,
              decode(encode(want, dtype), dtype))
    finally:
        for index in regs:
            comm.deregister_buffer(index)


def run_plans(rank, n):
    comm = meshcomm.Comm.from_env()
    ran = {}
    for name in programs.NAMES:
        module = __import__(f"meshcomm.dsl.programs.{name}", fromlist=["supports"])
        if not module.supports(n):
            continue
        checked = 0
        for instances in INSTANCES:
            plan = shipped_plan(name, n, instances)
            alg = meshcomm.PlanAlgorithm.from_json(json.dumps(plan))
            comm.add_algorithm(alg)
            reduces = plan["collective"] in ("allreduce", "reduce_scatter")
            iu = units(plan["collective"], n)[0]
            for count in COUNTS:
                for dtype in (DataType.FLOAT32, DataType.BFLOAT16):
                    if count * iu * meshcomm.data_type_size(dtype) > plan["max_message_size"]:
                        continue  # an LL plan's packet region is sized for its largest message
                    for op in (OPS if reduces else [ReduceOp.SUM]):
                        run_one(comm, alg, plan, rank, n, count, dtype, op)
                        checked += 1
        if programs.runs_in_place(name):
            plan = shipped_plan(name, n, 1, inplace=True)
            alg = meshcomm.PlanAlgorithm.from_json(json.dumps(plan))
            comm.add_algorithm(alg)
            iu = units(plan["collective"], n)[0]
            for count in COUNTS:
                if count * iu * 4 <= plan["max_message_size"]:
                    run_one(comm, alg, plan, rank, n, count, DataType.FLOAT32, ReduceOp.SUM)
                    checked += 1
        ran[name] = checked
    comm.check_error()
    comm.close()
    return {"ran": ran}


TRACED = ("allreduce_allpairs_ll", "allreduce_twoshot")  # no prologue, and a prologue (peers' outputs)


def run_traced(rank, n, calls):
    """`calls` checked executions of each TRACED plan (2 instances) with MESHCOMM_TRACE set by the caller; the
    plans and the communicator are dropped before returning, which writes the trace files. Returns each plan's
    ops per block, for the caller's check of the files."""
    import gc

    comm = meshcomm.Comm.from_env()
    ops = {}
    for name in TRACED:
        plan = shipped_plan(name, n, 2)
        alg = meshcomm.PlanAlgorithm.from_json(json.dumps(plan))
        comm.add_algorithm(alg)
        count = 1003 if name.endswith("_ll") else 70001
        for _ in range(calls):
            run_one(comm, alg, plan, rank, n, count, DataType.FLOAT32, ReduceOp.SUM)
        ops[plan["name"]] = [len(tb["ops"]) for tb in plan["ranks"][rank]["threadblocks"]]
        del alg
    comm.check_error()
    comm.close()
    del comm
    gc.collect()
    return {"ops": ops}
