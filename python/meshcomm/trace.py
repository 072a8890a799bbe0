"""Device event traces (docs/trace.md): read the files that MESHCOMM_TRACE makes the plan executor and
meshcomm.ep write, and say where a call's GPU time goes.

    python -m meshcomm.trace [--skip-calls N] TRACE.json [TRACE.json ...]

Each file holds one rank's events of one component: [time_ns, call, block, event, arg] rows in claim order.
A block's events of one call form its timeline (in the plan executor one thread records them, in program
order; in meshcomm.ep several warps do); a step is the time from one event to the next of the same call and
block, named by the later event (with its arg for op events: the op's index in its block).
"""
from __future__ import annotations

import argparse
import json
import statistics
from dataclasses import dataclass
from typing import Dict, Iterable, List, Tuple


@dataclass
class Trace:
    component: str
    rank: int
    event_names: List[str]
    events: List[Tuple[int, int, int, int, int]]  # (time_ns, call, block, event, arg)
    dropped: int = 0

    def name(self, event: int, arg: int) -> str:
        base = self.event_names[event] if event < len(self.event_names) and self.event_names[event] else str(event)
        return f"{base}#{arg}" if base.startswith("op:") else base


def load(path: str) -> Trace:
    with open(path) as f:
        doc = json.load(f)
    fields = doc.get("fields")
    if fields != ["time_ns", "call", "block", "event", "arg"]:
        raise ValueError(f"{path}: not a meshcomm device trace (fields {fields!r})")
    return Trace(doc["component"], int(doc["rank"]), list(doc["event_names"]),
                 [tuple(int(v) for v in row) for row in doc["events"]], int(doc.get("dropped", 0)))


def timelines(trace: Trace) -> Dict[Tuple[int, int], List[Tuple[int, int, int]]]:
    """(call, block) -> [(time_ns, event, arg)] in the order the block recorded them (the file's order: one
    thread of a block records its events one after another; equal timestamps keep that order)."""
    out: Dict[Tuple[int, int], List[Tuple[int, int, int]]] = {}
    for t, call, block, event, arg in trace.events:
        out.setdefault((call, block), []).append((t, event, arg))
    return out


def kept_calls(trace: Trace, lines: Dict[Tuple[int, int], List[Tuple[int, int, int]]], skip: int) -> set:
    """The calls left after each kernel's first `skip` (a kernel: the name of its calls' first event, so that the
    kernels of a component, e.g. meshcomm.ep's dispatch and combine, are warmed up alike)."""
    kernel: Dict[int, str] = {}
    for (call, _), line in lines.items():
        kernel.setdefault(call, trace.name(line[0][1], line[0][2]))
    by_kernel: Dict[str, List[int]] = {}
    for call in sorted(kernel):
        by_kernel.setdefault(kernel[call], []).append(call)
    return {call for calls in by_kernel.values() for call in calls[skip:]}


def _stats(samples: List[int]) -> dict:
    s = sorted(samples)
    return {"count": len(s), "median_ns": statistics.median(s), "p90_ns": s[min(len(s) - 1, (9 * len(s)) // 10)],
            "min_ns": s[0], "max_ns": s[-1]}


def summarize(traces: Iterable[Trace], skip_calls: int = 0) -> dict:
    """Per step (in the order first seen): its duration (from the previous event of the same call and block)
    and its offset ("at": from the call's first event on that rank), over every kept call, block and rank;
    and per call, the span from its first event to its last on a rank ("call"). The first `skip_calls` calls of
    each kernel in each file (warm-up) are left out."""
    durations: Dict[str, List[int]] = {}
    offsets: Dict[str, List[int]] = {}
    spans: List[int] = []
    for trace in traces:
        lines = timelines(trace)
        kept = kept_calls(trace, lines, skip_calls)
        first: Dict[int, int] = {}
        last: Dict[int, int] = {}
        for t, call, _, _, _ in trace.events:
            if call in kept:
                first[call] = min(first.get(call, t), t)
                last[call] = max(last.get(call, t), t)
        for (call, _), line in lines.items():
            if call not in kept:
                continue
            for (t0, _, _), (t1, event, arg) in zip(line, line[1:]):
                name = trace.name(event, arg)
                durations.setdefault(name, []).append(t1 - t0)
                offsets.setdefault(name, []).append(t1 - first[call])
        spans.extend(last[c] - first[c] for c in first)
    steps = []
    for name, samples in durations.items():
        at = _stats(offsets[name])
        steps.append({"step": name, **_stats(samples), "at_median_ns": at["median_ns"], "at_max_ns": at["max_ns"]})
    result = {"steps": steps}
    if spans:
        result["call"] = {"step": "call", **_stats(spans)}
    return result


def format_table(summary: dict) -> str:
    rows = summary["steps"] + ([summary["call"]] if "call" in summary else [])
    lines = [f"{'step':28s} {'count':>7s} {'median us':>10s} {'p90 us':>8s} {'min us':>8s} {'at us':>8s} "
             f"{'at max us':>10s}"]
    for r in rows:
        at = (f"{r['at_median_ns'] / 1e3:8.2f} {r['at_max_ns'] / 1e3:10.2f}" if "at_median_ns" in r
              else f"{'':8s} {'':10s}")
        lines.append(f"{r['step']:28s} {r['count']:7d} {r['median_ns'] / 1e3:10.2f} {r['p90_ns'] / 1e3:8.2f} "
                     f"{r['min_ns'] / 1e3:8.2f} {at}")
    return "\n".join(lines)


def main(argv: List[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m meshcomm.trace", description=__doc__.split("\n\n")[0])
    p.add_argument("files", nargs="+")
    p.add_argument("--skip-calls", type=int, default=0,
                   help="leave out each kernel's first N calls in each file (warm-up)")
    p.add_argument("--json", help="also write the summary here")
    args = p.parse_args(argv)
    traces = [load(f) for f in args.files]
    dropped = sum(t.dropped for t in traces)
    summary = summarize(traces, args.skip_calls)
    print(format_table(summary))
    if dropped:
        print(f"({dropped} events dropped: raise MESHCOMM_TRACE_EVENTS)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
