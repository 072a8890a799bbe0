"""The summary of an interleaved A/B run of meshcomm-bench (scripts/ab-bench.sh): every build's runs of the
same (op, size) rows, the median out-of-place time per build, the ratio of each build's median to the first
build's (> 1: slower than the first) and NCCL's ratio where the bench compared; a last line per build with the
median and largest of its ratios. Also writes the runs and the summary rows as one JSON document.

    python3 scripts/lib/ab_summary.py OUT.json BUILD_NAMES RUN_JSON...

BUILD_NAMES: comma-separated, the first is the reference; each RUN_JSON is one meshcomm-bench --json file named
<build>_<index>.json."""
import json
import os
import statistics
import sys


def load_runs(paths):
    """{build: [rows of each run]} from files named <build>_<index>.json."""
    runs = {}
    for path in paths:
        build = os.path.basename(path).rsplit("_", 1)[0]
        with open(path) as f:
            runs.setdefault(build, []).append(json.load(f))
    return runs


def summarize(runs, builds):
    """Rows {op, size, algo, medians{build: us}, ratio{build: median / reference median}, wrong}."""
    ref = builds[0]
    keys = [(r["op"], r["size"]) for r in runs[ref][0]["rows"]]
    by_key = {build: [{(r["op"], r["size"]): r for r in doc["rows"]} for doc in runs[build]] for build in builds}
    rows = []
    for op, size in keys:
        times, wrong, algo = {}, 0, ""
        for build in builds:
            found = [run[(op, size)] for run in by_key[build] if (op, size) in run]
            times[build] = statistics.median(r["oop_time_us"] for r in found)
            wrong += sum(r.get("oop_wrong") or 0 for r in found)
            algo = next((r["algo"] for r in found if "algo" in r), algo)
        rows.append({"op": op, "size": size, "algo": algo, "medians": times, "wrong": wrong,
                     "ratio": {b: times[b] / times[ref] for b in builds}})
    return rows


def markdown(rows, builds):
    head = "| op | bytes | algorithm | " + " | ".join(f"{b} µs" for b in builds) + " | " + \
        " | ".join(f"{b} / {builds[0]}" for b in builds[1:]) + " | wrong |"
    lines = [head, "|" + "---|" * (4 + 2 * len(builds) - 1)]
    for r in rows:
        lines.append(f"| {r['op']} | {r['size']} | {r['algo']} | " +
                     " | ".join(f"{r['medians'][b]:.2f}" for b in builds) + " | " +
                     " | ".join(f"{r['ratio'][b]:.3f}" for b in builds[1:]) + f" | {r['wrong']} |")
    for b in builds[1:]:
        q = [r["ratio"][b] for r in rows]
        lines.append(f"\n{b} / {builds[0]}: median {statistics.median(q):.3f}, max {max(q):.3f}, min {min(q):.3f}")
    return "\n".join(lines)


def main():
    out, builds, paths = sys.argv[1], sys.argv[2].split(","), sys.argv[3:]
    runs = load_runs(paths)
    missing = [b for b in builds if b not in runs]
    if missing:
        sys.exit(f"ab_summary: no runs of {missing} among {sorted(runs)}")
    rows = summarize(runs, builds)
    with open(out, "w") as f:
        json.dump({"builds": builds, "summary": rows, "runs": runs}, f, indent=1)
    print(markdown(rows, builds))


if __name__ == "__main__":
    main()
