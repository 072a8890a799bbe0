"""The error every check of meshcomm.dsl raises: it names the program and, where one is at fault, the rank,
the thread block and the operation."""


class DslError(ValueError):
    """A program that cannot compile to a valid plan."""
