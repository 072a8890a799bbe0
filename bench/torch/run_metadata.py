"""What every benchmark JSON under bench/results/ records about its run: date, device, ranks, commit, torch
version and the exact command."""
import datetime
import os
import subprocess
import sys

import torch


def commit():
    """MESHCOMM_BENCH_COMMIT when set (a copy of the tree whose git metadata is not the measured commit's), else
    the meshcomm checkout's commit (and '+changes' for a dirty tree), or 'unknown' outside a checkout."""
    if os.environ.get("MESHCOMM_BENCH_COMMIT"):
        return os.environ["MESHCOMM_BENCH_COMMIT"]
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    try:
        head = subprocess.run(["git", "-C", repo, "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", repo, "status", "--porcelain"], capture_output=True, text=True,
                               check=True).stdout.strip()
        return head + ("+changes" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def run_metadata(ranks):
    return {"date": datetime.date.today().isoformat(), "device": torch.cuda.get_device_name(), "ranks": ranks,
            "commit": commit(), "torch": torch.__version__,
            "command": f"torchrun --nproc_per_node {ranks} " + " ".join(sys.argv)}
