"""meshcomm.dsl: write a collective in Python, compile it to an execution plan (JSON) that meshcomm's executor
runs (docs/dsl.md). Pure Python: compiling needs no GPU.

    from meshcomm import dsl
    with dsl.CollectiveProgram("my_allgather", dsl.AllGather(4)) as program:
        ...
    plan = program.to_json()
"""
from .collectives import AllGather, AllReduce, AllToAll, CollectiveSpec, ReduceScatter
from .errors import DslError
from .operations import MemoryChannel, PortChannel, Rank, SwitchChannel, all_peers
from .program import PLAN_FORMAT, PLAN_VERSION, Chunk, CollectiveProgram

__all__ = [
    "AllGather", "AllReduce", "AllToAll", "Chunk", "CollectiveProgram", "CollectiveSpec", "DslError",
    "MemoryChannel", "PLAN_FORMAT", "PLAN_VERSION", "PortChannel", "Rank", "ReduceScatter", "SwitchChannel",
    "all_peers",
]
