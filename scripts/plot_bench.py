#!/usr/bin/env python3
"""Plots meshcomm-bench JSON results: one PNG per op with time vs size and busbw vs size, meshcomm
(out-of-place, and in-place where defined) next to NCCL (--compare nccl runs).

    scripts/plot_bench.py OUT_DIR results.json [more.json ...]

Several files (e.g. different dtypes or machines) are overlaid; each series is labelled with the file's
stem. Needs matplotlib (pip install matplotlib).
"""
import json
import os
import sys


def load(path):
    with open(path) as f:
        data = json.load(f)
    return data.get("rows", []), os.path.splitext(os.path.basename(path))[0], data


def human(n):
    for unit in ("B", "K", "M", "G"):
        if n < 1024 or unit == "G":
            return f"{n:g}{unit}"
        n /= 1024
    return f"{n:g}"


def main(argv):
    if len(argv) < 3 or argv[1] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if len(argv) > 1 and argv[1] in ("-h", "--help") else 2
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("plot_bench.py needs matplotlib: pip install matplotlib", file=sys.stderr)
        return 1
    out_dir = argv[1]
    os.makedirs(out_dir, exist_ok=True)
    series = {}  # op -> list of (label, rows, meta)
    for path in argv[2:]:
        rows, label, meta = load(path)
        by_op = {}
        for r in rows:
            by_op.setdefault(r["op"], []).append(r)
        for op, rs in by_op.items():
            series.setdefault(op, []).append((label, sorted(rs, key=lambda r: r["size"]), meta))
    written = []
    for op, entries in sorted(series.items()):
        fig, (ax_t, ax_b) = plt.subplots(1, 2, figsize=(13, 5))
        for label, rows, meta in entries:
            sizes = [r["size"] for r in rows]
            for key, bw, name, style in (
                ("oop_time_us", "oop_busbw", "meshcomm", "-o"),
                ("ip_time_us", "ip_busbw", "meshcomm in-place", ":."),
                ("nccl_time_us", "nccl_busbw", "NCCL", "--s"),
            ):
                pts = [(s, r[key], r[bw]) for s, r in zip(sizes, rows) if r.get(key) is not None]
                if not pts:
                    continue
                lab = f"{name} ({label})" if len(argv) > 3 else name
                ax_t.plot([p[0] for p in pts], [p[1] for p in pts], style, label=lab, markersize=4)
                ax_b.plot([p[0] for p in pts], [p[2] for p in pts], style, label=lab, markersize=4)
        meta = entries[0][2]
        title = f"{op}: {meta.get('nranks', '?')} x {meta.get('device', '?')}, {entries[0][1][0].get('type', '')}"
        if meta.get("nccl_version"):
            title += f", NCCL {meta['nccl_version']}"
        for ax, ylabel, logy in ((ax_t, "time (us)", True), (ax_b, "busbw (GB/s)", False)):
            ax.set_xscale("log", base=2)
            if logy:
                ax.set_yscale("log")
            ax.set_xlabel("size (bytes, nccl-tests definition)")
            ax.set_ylabel(ylabel)
            ax.grid(True, which="both", alpha=0.3)
            ticks = sorted({r["size"] for _, rows, _ in entries for r in rows})
            if len(ticks) > 12:
                ticks = ticks[:: (len(ticks) + 11) // 12]
            ax.set_xticks(ticks)
            ax.set_xticklabels([human(t) for t in ticks], rotation=45)
            ax.legend(fontsize=8)
        fig.suptitle(title)
        fig.tight_layout()
        path = os.path.join(out_dir, f"{op}.png")
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    for p in written:
        print(p)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
