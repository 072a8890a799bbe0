"""The shipped programs: each module defines ``program(num_ranks, instances=1, inplace=False) ->
CollectiveProgram`` and ``supports(num_ranks)``; ``IN_PLACE = False`` marks one that refuses ``inplace=True``.
The plans are generated from these sources (``python -m meshcomm.dsl compile NAME --ranks R``), never edited by
hand."""
import importlib
from typing import Callable, Dict

from ..checks import MAX_THREAD_BLOCKS
from ..program import CollectiveProgram

NAMES = (
    "allreduce_allpairs_ll",
    "allreduce_twoshot",
    "allreduce_ring",
    "allgather_fullmesh",
    "reduce_scatter_fullmesh",
    "alltoall_fullmesh",
    "allreduce_hierarchical",
    "allgather_allpairs_ll",
    "reduce_scatter_allpairs_ll",
    "alltoall_allpairs_ll",
    "reduce_scatter_pipelined",
    "allreduce_twoshot_pipelined",
    "allgather_port",
)


def get(name: str) -> Callable[[int], CollectiveProgram]:
    if name not in NAMES:
        raise KeyError(f"no shipped program {name!r}; the shipped programs are {', '.join(NAMES)}")
    return importlib.import_module(f"{__name__}.{name}").program


def runs_in_place(name: str) -> bool:
    """Whether the shipped program compiles in place (input and output one buffer, NCCL's in-place layout)."""
    get(name)
    return getattr(importlib.import_module(f"{__name__}.{name}"), "IN_PLACE", True)


def _blocks_per_instance(name: str, num_ranks: int) -> int:
    plan = get(name)(num_ranks).to_json()
    return max(len(r["threadblocks"]) for r in plan["ranks"])


def max_instances(name: str, num_ranks: int) -> int:
    """The largest instance count the shipped program compiles with: its blocks times the count stay within
    the executor's MAX_THREAD_BLOCKS a rank."""
    return max(1, MAX_THREAD_BLOCKS // _blocks_per_instance(name, num_ranks))


def fill_instances(name: str, num_ranks: int, multiprocessors: int) -> int:
    """The instance count that gives the shipped program one CUDA block per multiprocessor (at most the
    executor's MAX_THREAD_BLOCKS a rank): a Simple program's bandwidth grows with its blocks."""
    return max(1, min(multiprocessors, MAX_THREAD_BLOCKS) // _blocks_per_instance(name, num_ranks))


def compile_all(num_ranks: int) -> Dict[str, dict]:
    """Every shipped program that supports num_ranks, compiled."""
    plans = {}
    for name in NAMES:
        module = importlib.import_module(f"{__name__}.{name}")
        if module.supports(num_ranks):
            plans[name] = module.program(num_ranks).to_json()
    return plans
