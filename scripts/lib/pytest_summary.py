"""Per-file counts of a pytest run's short summary (pytest -rA): prints a markdown table of passed / failed /
errors / skipped per test file, the skip reasons, and a last line with the totals.

    python3 scripts/lib/pytest_summary.py RANK0_STDOUT_LOG FILE...
"""
import collections
import re
import sys


def main():
    log, files = sys.argv[1], sys.argv[2:]
    counts = collections.defaultdict(collections.Counter)
    reasons = []
    outcome = re.compile(r"^(PASSED|FAILED|ERROR) (\S+?\.py)::")
    skipped = re.compile(r"^SKIPPED \[(\d+)\] (\S+?\.py):\d+: (.*)$")
    with open(log, errors="replace") as f:
        for line in f:
            line = line.rstrip("\n")
            if m := outcome.match(line):
                counts[m.group(2)][m.group(1).lower()] += 1
            elif m := skipped.match(line):
                counts[m.group(2)]["skipped"] += int(m.group(1))
                reasons.append(f"{m.group(2)}: {m.group(1)} skipped: {m.group(3)}")
    print("| file | passed | failed | errors | skipped |\n|---|---:|---:|---:|---:|")
    total = collections.Counter()
    for name in files or sorted(counts):
        c = counts.get(name, collections.Counter())
        total.update(c)
        note = "" if c else " (no result: not run, or the run ended before it)"
        print(f"| {name}{note} | {c['passed']} | {c['failed']} | {c['error']} | {c['skipped']} |")
    print("\nSkip reasons:\n" + "\n".join(f"- {r}" for r in reasons) if reasons else "\nNo skips.")
    print(f"\n{total['passed']} passed, {total['failed']} failed, {total['error']} errors, {total['skipped']} skipped")


if __name__ == "__main__":
    main()
