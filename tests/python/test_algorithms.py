"""build_default_algorithms() and AlgorithmCollection (no GPU needed)."""

import pytest

import meshcomm
from meshcomm import Collective


def test_every_collective_has_a_default_algorithm():
    collection = meshcomm.build_default_algorithms()
    names = collection.names()
    assert len(names) == len(set(names)) == len(collection) > 0
    for c in Collective:
        assert collection.for_collective(c), f"no default algorithm for {c}"
    for a in collection:
        # Built-in names start with their collective's name: the bound collective is the C++ one.
        assert a.name.startswith(meshcomm.collective_name(a.collective)), a


def test_registration_order_is_the_fallback_order():
    collection = meshcomm.build_default_algorithms()
    assert [a.name for a in collection.for_collective(Collective.ALLREDUCE)] == [
        "allreduce_oneshot_ll", "allreduce_twoshot_ll", "allreduce_rsag", "allreduce_zerocopy"]
    assert [a.name for a in collection.for_collective(Collective.BARRIER)] == ["barrier_channels"]
    # The LL stream algorithms of gather/scatter come after sendrecv_ll in registration (their packet
    # regions must not shrink its capacity), so after the rooted ones in their collectives.
    assert [a.name for a in collection.for_collective(Collective.GATHER)] == [
        "gather_ll", "gather_scratch", "gather_stream"]
    assert [a.name for a in collection.for_collective(Collective.SCATTER)] == [
        "scatter_ll", "scatter_scratch", "scatter_stream"]
    names = collection.names()
    assert names.index("sendrecv_ll") < names.index("gather_stream") < names.index("scatter_stream")


def test_lookup():
    collection = meshcomm.build_default_algorithms()
    rsag = collection["allreduce_rsag"]
    assert rsag.name == "allreduce_rsag" and rsag.collective == Collective.ALLREDUCE
    assert repr(rsag) == "<meshcomm.Algorithm 'allreduce_rsag' (allreduce)>"
    assert "allreduce_rsag" in collection and "no_such" not in collection
    assert collection.find("no_such") is None
    with pytest.raises(KeyError, match="no algorithm named 'no_such'"):
        collection["no_such"]


def test_each_build_is_fresh():
    a, b = meshcomm.build_default_algorithms(), meshcomm.build_default_algorithms()
    assert a.names() == b.names()
    assert a["allreduce_rsag"] is not b["allreduce_rsag"]


def test_add_and_duplicates():
    source = meshcomm.build_default_algorithms()
    mine = meshcomm.AlgorithmCollection()
    assert len(mine) == 0
    mine.add(source["alltoall_ll"])
    assert mine.names() == ["alltoall_ll"] and mine["alltoall_ll"] is source["alltoall_ll"]
    with pytest.raises(meshcomm.InvalidUsageError, match="an algorithm named 'alltoall_ll' is already registered"):
        mine.add(source["alltoall_ll"])
