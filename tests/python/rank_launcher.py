"""Runs a scenario of rank_worker.py as N processes on this host and collects what each rank reports."""

import json
import os
import secrets
import socket
import subprocess
import sys
from dataclasses import dataclass

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "rank_worker.py")


@dataclass
class RankResult:
    rank: int
    returncode: int
    stdout: str
    stderr: str

    @property
    def result(self):
        """The JSON object the worker printed on its 'RESULT ' line."""
        for line in self.stdout.splitlines():
            if line.startswith("RESULT "):
                return json.loads(line[len("RESULT "):])
        raise AssertionError(f"rank {self.rank} printed no RESULT line:\n{self.describe()}")

    def describe(self):
        return f"rank {self.rank} exit {self.returncode}\nstdout:\n{self.stdout}\nstderr:\n{self.stderr}"


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch_env(rank, n, port, secret):
    """The variables meshcomm-run sets: torchrun's rank layout plus the bootstrap root and secret."""
    return {
        "RANK": str(rank),
        "WORLD_SIZE": str(n),
        "LOCAL_RANK": str(rank),
        "LOCAL_WORLD_SIZE": str(n),
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
        "MESHCOMM_BOOTSTRAP_ADDR": f"127.0.0.1:{port + 1}",
        "MESHCOMM_BOOTSTRAP_SECRET": secret,
    }


def run_ranks(n, scenario, args=(), from_env=False, timeout=180):
    """Starts n workers running `scenario` (argv: scenario rank n *args); with from_env, each also gets the
    launch variables. Returns one RankResult per rank; kills every rank when the timeout passes."""
    base = dict(os.environ)
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                 "MESHCOMM_BOOTSTRAP_ADDR", "MESHCOMM_BOOTSTRAP_SECRET"):
        base.pop(name, None)
    port, secret = free_port(), secrets.token_hex(16)
    procs = []
    for rank in range(n):
        env = dict(base)
        if from_env:
            env.update(launch_env(rank, n, port, secret))
        cmd = [sys.executable, WORKER, scenario, str(rank), str(n), *map(str, args)]
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    results = []
    try:
        for rank, p in enumerate(procs):
            out, err = p.communicate(timeout=timeout)
            results.append(RankResult(rank, p.returncode, out, err))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return results


def assert_all_ok(results):
    for r in results:
        assert r.returncode == 0, r.describe()
