"""Host references shared by the torch face tests (tests/python/torch, tests/python/torchcomms)."""


def reference_reduce(torch, stacked, op):
    """The reduction `op` ("SUM", "MAX", "MIN", "PRODUCT", "AVG") over dim 0 of `stacked` (one row a rank)."""
    if op == "SUM":
        return stacked.sum(0)
    if op == "MAX":
        return stacked.max(0).values
    if op == "MIN":
        return stacked.min(0).values
    if op == "PRODUCT":
        return stacked.prod(0)
    if op == "AVG":
        return stacked.sum(0) / stacked.shape[0]
    raise ValueError(op)
