"""Collective specs: the rank count and the chunk counts of each rank's input and output buffers.

Chunk counts are in units of ``n``, the elements one rank contributes per destination (alltoall) or in all,
times ``chunks_per_rank`` (U) chunks per unit: allreduce input = output = 1 unit, allgather input 1 and output R,
reduce-scatter input R and output 1, alltoall input = output = R units."""
from dataclasses import dataclass
from typing import Tuple

from .errors import DslError


@dataclass(frozen=True)
class CollectiveSpec:
    name: str  # the plan's "collective"
    num_ranks: int
    chunks_per_rank: int
    input_units: int
    output_units: int

    def __post_init__(self):
        if not 1 <= self.num_ranks <= 64:
            raise DslError(f"{self.name}: num_ranks={self.num_ranks}; 1 to 64 ranks")
        if self.chunks_per_rank < 1:
            raise DslError(f"{self.name}: chunks_per_rank={self.chunks_per_rank}; at least 1")

    @property
    def input_chunks(self) -> int:
        return self.input_units * self.chunks_per_rank

    @property
    def output_chunks(self) -> int:
        return self.output_units * self.chunks_per_rank

    def inplace_offset(self, rank: int) -> int:
        """In place, the smaller buffer lies inside the larger at this chunk offset (0 when they are equal)."""
        if self.input_units == self.output_units:
            return 0
        return rank * min(self.input_chunks, self.output_chunks)

    @property
    def inplace_buffer(self) -> str:
        """The buffer an in-place program uses for both: the larger one."""
        return "output" if self.output_units > self.input_units else "input"


def AllReduce(num_ranks: int, chunks_per_rank: int = 1) -> CollectiveSpec:
    return CollectiveSpec("allreduce", num_ranks, chunks_per_rank, 1, 1)


def AllGather(num_ranks: int, chunks_per_rank: int = 1) -> CollectiveSpec:
    return CollectiveSpec("allgather", num_ranks, chunks_per_rank, 1, num_ranks)


def ReduceScatter(num_ranks: int, chunks_per_rank: int = 1) -> CollectiveSpec:
    return CollectiveSpec("reduce_scatter", num_ranks, chunks_per_rank, num_ranks, 1)


def AllToAll(num_ranks: int, chunks_per_rank: int = 1) -> CollectiveSpec:
    return CollectiveSpec("alltoall", num_ranks, chunks_per_rank, num_ranks, num_ranks)


# The plan's "collective" name -> its spec factory.
SPECS = {"allreduce": AllReduce, "allgather": AllGather, "reduce_scatter": ReduceScatter, "alltoall": AllToAll}


def units(collective: str, num_ranks: int) -> Tuple[int, int]:
    """Units of n in each rank's input and output for a plan's collective (the specs' definition)."""
    spec = SPECS[collective](num_ranks)
    return spec.input_units, spec.output_units
