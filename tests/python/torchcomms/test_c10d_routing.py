"""torch.distributed routed through torchcomms (torch 2.11, dist.config.use_torchcomms, as
TORCH_DISTRIBUTED_USE_TORCHCOMMS=1 sets it): init_process_group("cuda:meshcomm") builds the world with
torchcomms.new_comm("meshcomm"); c10d ops, split_group, new_group subsets, NCCL groups beside it, CPU groups
made with the routing off, and a clear refusal of a multi-backend group torch 2.11 cannot route.

Run: PYTHONPATH=<build>/python torchrun --nproc-per-node=<GPUs> -m pytest -q tests/python/torchcomms
(The module sets use_torchcomms itself and tears its world down at its end.)
"""

from datetime import timedelta

import pytest

from test_ops import same


class World:
    def __init__(self, comms, dist):
        self.comms, self.dist = comms, dist
        self.rank, self.size, self.device = comms.rank, comms.size, comms.device


@pytest.fixture(scope="module")
def world(comms):
    import torch.distributed as dist
    import torch.distributed.config as dist_config

    if not hasattr(dist_config, "use_torchcomms"):
        pytest.skip("this torch has no torchcomms routing (torch.distributed.config.use_torchcomms)")
    dist_config.use_torchcomms = True
    dist.init_process_group("cuda:meshcomm", device_id=comms.device, timeout=timedelta(seconds=300))
    yield World(comms, dist)
    dist.destroy_process_group()
    dist_config.use_torchcomms = False


def test_world_ops_run_on_meshcomm(world):
    comms, dist = world.comms, world.dist
    torch = comms.torch
    n = world.size
    backend = dist.group.WORLD._get_backend(torch.device("cuda"))
    assert backend.get_comm().get_backend() == "meshcomm"
    inputs = [comms.seeded(r, 4099, torch.float32, "routed") for r in range(n)]
    x = comms.gpu(inputs[world.rank])
    dist.all_reduce(x)
    gathered = torch.empty(4099 * n, device=world.device)
    dist.all_gather_into_tensor(gathered, comms.gpu(inputs[world.rank]))
    shard = torch.empty(4099, device=world.device)
    dist.reduce_scatter_tensor(shard, torch.cat([comms.gpu(inputs[world.rank])] * n))
    dist.broadcast(bc := comms.gpu(inputs[world.rank]), src=n - 1)
    torch.cuda.synchronize()
    same(x, sum(inputs), "dist.all_reduce")
    same(gathered, torch.cat(inputs), "dist.all_gather_into_tensor")
    same(shard, sum(inputs), "dist.reduce_scatter_tensor")
    same(bc, inputs[n - 1], "dist.broadcast")
    dist.barrier()


def test_cpu_groups_with_the_routing_off_and_multi_backend_groups_refused(world):
    comms, dist = world.comms, world.dist
    torch = comms.torch
    import torch.distributed.config as dist_config

    dist_config.use_torchcomms = False
    try:
        gloo = dist.new_group(backend="gloo")  # torch's ProcessGroupGloo beside the routed world
    finally:
        dist_config.use_torchcomms = True
    cpu = torch.full((5,), float(world.rank))
    dist.all_reduce(cpu, group=gloo)
    same(cpu, torch.full((5,), float(sum(range(world.size)))), "all_reduce of a CPU tensor on gloo")
    try:
        import torchcomms._comms_gloo  # noqa: F401
    except ImportError:
        return  # no torchcomms gloo backend: torch refuses the cpu part itself
    with pytest.raises(RuntimeError, match="cannot be routed through torchcomms by this torch"):
        dist.new_group(backend="cpu:gloo,cuda:meshcomm")


def test_all_to_all_single_with_splits(world):
    comms, dist = world.comms, world.dist
    torch = comms.torch
    n = world.size
    rows = [[(r + 2 * p) % 5 for p in range(n)] for r in range(n)]
    inputs = [comms.seeded(r, (sum(rows[r]), 3), torch.int32, "routed-a2a") for r in range(n)]
    recv = [rows[r][world.rank] for r in range(n)]
    out = torch.empty((sum(recv), 3), dtype=torch.int32, device=world.device)
    dist.all_to_all_single(out, comms.gpu(inputs[world.rank]), recv, rows[world.rank])
    torch.cuda.synchronize()
    expected = torch.cat([inputs[r][sum(rows[r][:world.rank]):sum(rows[r][:world.rank + 1])] for r in range(n)])
    same(out, expected, "dist.all_to_all_single with splits")


def test_split_group_and_new_group_subset(world):
    comms, dist = world.comms, world.dist
    torch = comms.torch
    n = world.size
    if n < 2:
        pytest.skip("needs 2 ranks")
    halves = [list(range(n // 2)), list(range(n // 2, n))]
    mine = halves[0] if world.rank < n // 2 else halves[1]
    group = dist.split_group(split_ranks=halves)
    x = torch.full((1031,), float(world.rank + 1), device=world.device)
    dist.all_reduce(x, group=group)
    torch.cuda.synchronize()
    same(x, torch.full((1031,), float(sum(r + 1 for r in mine))), "all_reduce in split_group")
    # A strict subset through new_group: torch 2.11 passes the backend no group rank or size; meshcomm reads
    # them from torch's group creation, so the group has its members only.
    members = [0, n - 1]
    sub = dist.new_group(members)
    if world.rank in members:
        comm = sub._get_backend(torch.device("cuda")).get_comm()
        assert comm.get_size() == 2 and comm.get_rank() == members.index(world.rank)
        y = torch.full((257,), float(world.rank + 1), device=world.device)
        dist.all_reduce(y, group=sub)
        torch.cuda.synchronize()
        same(y, torch.full((257,), float(sum(r + 1 for r in members))), "all_reduce in a new_group subset")


def test_nccl_group_beside_the_meshcomm_world(world):
    comms, dist = world.comms, world.dist
    torch = comms.torch
    nccl = dist.new_group(backend="cuda:nccl")
    assert nccl._get_backend(torch.device("cuda")).get_comm().get_backend() == "nccl"
    inputs = [comms.seeded(r, 65539, torch.bfloat16, "routed-mixed") for r in range(world.size)]
    results = []
    for group in (None, nccl):
        x = comms.gpu(inputs[world.rank])
        dist.all_reduce(x, group=group)
        torch.cuda.synchronize()
        results.append(x.cpu())
    same(results[0], sum(x.double() for x in inputs).to(torch.bfloat16), "meshcomm all_reduce")
    same(results[1], results[0], "NCCL vs meshcomm all_reduce")
