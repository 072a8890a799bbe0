"""Per-file counts of a pytest run (pytest -v -rs: one result line per test, then the skip reasons): prints a
markdown table of passed / failed / errors / skipped per test file, the skip reasons, the last test that
started (where a run that was cut short stopped), and a last line with the totals.

    python3 scripts/lib/pytest_summary.py RANK0_STDOUT_LOG FILE...
"""
import collections
import re
import sys


def main():
    log, files = sys.argv[1], sys.argv[2:]
    counts = collections.defaultdict(collections.Counter)
    reasons = []
    outcome = re.compile(r"^(\S+?\.py)::(\S+) (PASSED|FAILED|ERROR|SKIPPED)")
    started = re.compile(r"^(\S+?\.py::\S+)")
    skipped = re.compile(r"^SKIPPED \[(\d+)\] (\S+?\.py):\d+: (.*)$")
    last = None
    with open(log, errors="replace") as f:
        for line in f:
            line = line.rstrip("\n")
            if m := outcome.match(line):
                counts[m.group(1)][m.group(3).lower()] += 1
            elif m := skipped.match(line):
                reasons.append(f"{m.group(2)}: {m.group(1)} skipped: {m.group(3)}")
            if m := started.match(line):
                last = m.group(1)
    print("| file | passed | failed | errors | skipped |\n|---|---:|---:|---:|---:|")
    total = collections.Counter()
    for name in files or sorted(counts):
        c = counts.get(name, collections.Counter())
        total.update(c)
        note = "" if c else " (no result: not run, or the run ended before it)"
        print(f"| {name}{note} | {c['passed']} | {c['failed']} | {c['error']} | {c['skipped']} |")
    print("\nSkip reasons:\n" + "\n".join(f"- {r}" for r in reasons) if reasons else "\nNo skips.")
    print(f"\nLast test started: {last}")
    print(f"\n{total['passed']} passed, {total['failed']} failed, {total['error']} errors, {total['skipped']} skipped")


if __name__ == "__main__":
    main()
