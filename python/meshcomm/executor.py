"""meshcomm.Executor: the ``executor`` argument of Algorithm.execute in the integration guide's DSL approach.
A plan (meshcomm.PlanAlgorithm) runs on its own executor kernel, so the object carries no state; it exists so
code written for that approach runs unchanged (docs/dsl.md)."""


class Executor:
    """Pass to ``algorithm.execute(..., executor=Executor(comm))``; ``None`` works as well."""

    _meshcomm_executor = True

    def __init__(self, comm=None):
        self.comm = comm
