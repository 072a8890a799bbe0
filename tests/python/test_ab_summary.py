"""scripts/lib/ab_summary.py (the summary of scripts/ab-bench.sh): medians per build over interleaved runs, the
ratio to the first build, wrong counts summed, the JSON document and a clear exit for a build without runs."""
import json
import os
import subprocess
import sys

import pytest

SCRIPT = os.path.join(os.path.dirname(__file__), "..", "..", "scripts", "lib", "ab_summary.py")


def bench_doc(times, wrong=0):
    """A meshcomm-bench --json document with allreduce rows {size: time}."""
    return {"tool": "meshcomm-bench", "rows": [
        {"op": "allreduce", "size": size, "algo": "allreduce_oneshot_ll", "oop_time_us": us, "oop_wrong": wrong}
        for size, us in times.items()]}


def write_runs(tmp_path, runs):
    paths = []
    for name, docs in runs.items():
        for i, doc in enumerate(docs):
            p = tmp_path / f"{name}_{i}.json"
            p.write_text(json.dumps(doc))
            paths.append(str(p))
    return paths


def run(out, builds, paths):
    return subprocess.run([sys.executable, SCRIPT, str(out), builds, *paths], capture_output=True, text=True)


def test_medians_ratios_and_wrong_counts(tmp_path):
    runs = {
        "main": [bench_doc({1024: 4.0, 4096: 5.0}), bench_doc({1024: 4.2, 4096: 5.1}),
                 bench_doc({1024: 3.8, 4096: 9.0})],
        "change": [bench_doc({1024: 4.4, 4096: 5.0}), bench_doc({1024: 4.4, 4096: 4.5}, wrong=2),
                   bench_doc({1024: 4.6, 4096: 4.9})],
    }
    out = tmp_path / "ab.json"
    r = run(out, "main,change", write_runs(tmp_path, runs))
    assert r.returncode == 0, r.stderr
    doc = json.loads(out.read_text())
    rows = {row["size"]: row for row in doc["summary"]}
    assert rows[1024]["medians"] == {"main": pytest.approx(4.0), "change": pytest.approx(4.4)}
    assert rows[1024]["ratio"]["change"] == pytest.approx(1.1)
    assert rows[4096]["medians"]["main"] == pytest.approx(5.1)  # the 9.0 outlier does not move the median
    assert rows[4096]["ratio"]["change"] == pytest.approx(4.9 / 5.1)
    assert rows[1024]["wrong"] == 2 and rows[4096]["wrong"] == 2
    assert sorted(doc["runs"]) == ["change", "main"] and len(doc["runs"]["main"]) == 3
    assert "| allreduce | 1024 | allreduce_oneshot_ll | 4.00 | 4.40 | 1.100 | 2 |" in r.stdout
    assert "change / main: median" in r.stdout


def test_a_build_without_runs_is_named(tmp_path):
    paths = write_runs(tmp_path, {"main": [bench_doc({1024: 4.0})]})
    r = run(tmp_path / "ab.json", "main,change", paths)
    assert r.returncode != 0
    assert "no runs of ['change']" in r.stderr


FAKE_RUN = """#!/bin/sh
while [ "$1" != "--" ]; do shift; done
shift
exec "$@"
"""
# meshcomm-bench stand-in: one allreduce row whose time is the build's number; records the order it ran in.
FAKE_BENCH = """#!/bin/sh
while [ "$1" != "--json" ]; do shift; done
echo "{name}" >> "{log}"
printf '{{"rows": [{{"op": "allreduce", "size": 1024, "algo": "x", "oop_time_us": {us}, "oop_wrong": 0}}]}}' > "$2"
"""


def fake_build(root, name, us, log):
    tools = root / name / "tools"
    tools.mkdir(parents=True)
    (root / name / "libmeshcomm.so").write_text("")
    for tool, text in (("meshcomm-run", FAKE_RUN), ("meshcomm-bench", FAKE_BENCH.format(name=name, log=log, us=us))):
        (tools / tool).write_text(text)
        (tools / tool).chmod(0o755)
    return root / name


def test_ab_bench_interleaves_rounds_and_summarizes(tmp_path):
    """scripts/ab-bench.sh with stand-in tools: rounds alternate A B / B A, every run lands in the summary."""
    script = os.path.join(os.path.dirname(SCRIPT), "..", "ab-bench.sh")
    log = tmp_path / "order.txt"
    a, b = fake_build(tmp_path, "a", 4.0, log), fake_build(tmp_path, "b", 5.0, log)
    out = tmp_path / "out"
    r = subprocess.run(["bash", script, "-n", "2", "-r", "3", str(out), f"a={a}", f"b={b}", "--", "-o", "allreduce"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr + r.stdout
    assert log.read_text().split() == ["a", "b", "b", "a", "a", "b"]
    doc = json.loads((out / "ab.json").read_text())
    assert doc["summary"][0]["ratio"]["b"] == pytest.approx(1.25)
    assert len(doc["runs"]["a"]) == 3 and len(doc["runs"]["b"]) == 3
    assert "b / a: median 1.250" in (out / "ab.md").read_text()
