"""What every bootstrap test does on each rank (threads or processes): an all-gather, a broadcast from the last
rank, a ring of tagged messages and a barrier. Returns what this rank saw; expected_exercise() is the truth."""


def exercise(bootstrap):
    r, n = bootstrap.rank, bootstrap.size
    gathered = bootstrap.all_gather(f"rank-{r:03d}".encode())
    root = n - 1
    broadcast = bootstrap.broadcast(f"root-data-{r:03d}".encode(), root)
    bootstrap.send(f"msg-{r:03d}-to-{(r + 1) % n:03d}".encode(), (r + 1) % n, 5)
    ring = bootstrap.recv(len("msg-000-to-000"), (r - 1) % n, 5)
    bootstrap.barrier()
    return {
        "rank": r,
        "size": n,
        "gathered": [g.decode() for g in gathered],
        "broadcast": broadcast.decode(),
        "ring": ring.decode(),
        "local_rank": bootstrap.local_rank,
        "n_ranks_per_node": bootstrap.n_ranks_per_node,
    }


def expected_exercise(rank, n):
    return {
        "rank": rank,
        "size": n,
        "gathered": [f"rank-{p:03d}" for p in range(n)],
        "broadcast": f"root-data-{n - 1:03d}",
        "ring": f"msg-{(rank - 1) % n:03d}-to-{rank:03d}",
        "local_rank": rank,  # every rank runs on this host, in rank order
        "n_ranks_per_node": n,
    }
