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
    iu, ou = units(plan["collective"], n)
    esize = meshcomm.data_type_size(dtype)
    rng = [random.Random(f"{plan['name']}-{count}-{dtype}-{op}-{r}") for r in range(n)]
    rows = [[float(g.randint(-4, 4)) for _ in range(iu * count)] for g in rng]
    send, recv = meshcomm.GpuBuffer(iu * count * esize), meshcomm.GpuBuffer(ou * count * esize)
    send.upload(encode(rows[rank], dtype))
    recv.upload(encode([POISON] * (ou * count), dtype))
    regs = [comm.register_buffer(send.ptr, send.nbytes), comm.register_buffer(recv.ptr, recv.nbytes)]
    try:
        alg.execute(comm, send.ptr, recv.ptr, send.nbytes, recv.nbytes, dtype, op=op, executor=meshcomm.Executor(comm))
        got = decode(recv.download(recv.nbytes), dtype)
        want = expected_outputs(plan["collective"], rows, count, OPS[op])[rank]
        check(f"{plan['name']} {meshcomm.data_type_name(dtype)} {OPS[op]} count={count}", got,
              decode(encode(want, dtype), dtype))
    finally:
        for index in regs:
            comm.deregister_buffer(index)


def run_one_in_place(comm, alg, plan, rank, n, count, dtype, op):
    """One buffer of max(in, out) units, NCCL's in-place layout: allgather's input at unit `rank` of the
    output, reduce-scatter's output at unit `rank` of the input; the rest of the buffer poisoned where the
    collective writes."""
    iu, ou = units(plan["collective"], n)
    esize = meshcomm.data_type_size(dtype)
    rng = [random.Random(f"{plan['name']}-{count}-{dtype}-{op}-{r}") for r in range(n)]
    rows = [[float(g.randint(-4, 4)) for _ in range(iu * count)] for g in rng]
    units_ = max(iu, ou)
    values = [POISON] * (units_ * count)
    in_at = rank * count if iu < ou else 0
    values[in_at:in_at + iu * count] = rows[rank]
    buf = meshcomm.GpuBuffer(units_ * count * esize)
    buf.upload(encode(values, dtype))
    out_at = rank * count if iu > ou else 0
    regs = [comm.register_buffer(buf.ptr, buf.nbytes)]
    try:
        alg.execute(comm, buf.ptr + in_at * esize, buf.ptr + out_at * esize, iu * count * esize,
                    ou * count * esize, dtype, op=op, executor=meshcomm.Executor(comm))
        got = decode(buf.download(buf.nbytes), dtype)[out_at:out_at + ou * count]
        want = expected_outputs(plan["collective"], rows, count, OPS[op])[rank]
        check(f"{plan['name']} {meshcomm.data_type_name(dtype)} {OPS[op]} count={count} in place", got,
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
                    run_one_in_place(comm, alg, plan, rank, n, count, DataType.FLOAT32, ReduceOp.SUM)
                    checked += 1
        ran[name] = checked
    comm.check_error()
    comm.close()
    return {"ran": ran}
