"""meshcomm.trace (CPU): a device trace file as src/core/device_trace.cc writes it is read back, its blocks'
timelines keep the recorded order, and the summary's steps and call spans are the differences of the events'
times; a file of another kind is refused."""
import json

import pytest

from meshcomm import trace

NAMES = ["start", "prologue", "staged", "end", "op:copy", "op:reduce", "op:put"]


def write(path, events, rank=0, dropped=0):
    path.write_text(json.dumps({"component": "plan-x", "rank": rank, "clock": "globaltimer_ns",
                                "event_names": NAMES, "fields": ["time_ns", "call", "block", "event", "arg"],
                                "events": events, "claimed": len(events) + dropped, "dropped": dropped}))
    return str(path)


def call_events(call, block, t0, op_times):
    """start at t0, staged 100 ns later, then ops (code 6 = op:put, arg = index) after op_times ns each, end."""
    rows, t = [[t0, call, block, 0, 0], [t0 + 100, call, block, 2, 0]], t0 + 100
    for i, d in enumerate(op_times):
        t += d
        rows.append([t, call, block, 6, i])
    rows.append([t + 50, call, block, 3, 0])
    return rows


def test_summary_steps_are_event_differences(tmp_path):
    events = []
    for call in (1, 2, 3):
        for block in (0, 1):
            events += call_events(call, block, 10_000 * call + 7 * block, [300 + 10 * block, 500])
    t = trace.load(write(tmp_path / "a.json", events))
    lines = trace.timelines(t)
    assert sorted(lines) == [(c, b) for c in (1, 2, 3) for b in (0, 1)]
    assert [t.name(e, a) for _, e, a in lines[(2, 1)]] == ["start", "staged", "op:put#0", "op:put#1", "end"]
    s = trace.summarize([t], skip_calls=1)
    steps = {r["step"]: r for r in s["steps"]}
    assert [r["step"] for r in s["steps"]] == ["staged", "op:put#0", "op:put#1", "end"]
    assert steps["staged"]["count"] == 4 and steps["staged"]["median_ns"] == 100
    assert steps["op:put#0"]["min_ns"] == 300 and steps["op:put#0"]["median_ns"] == 305
    assert steps["op:put#1"]["median_ns"] == 500 and steps["end"]["p90_ns"] == 50
    # "at": from the call's first event (block 0's start); block 1's end is 7 + 100 + 310 + 500 + 50 ns in.
    assert steps["end"]["at_max_ns"] == 967 and steps["staged"]["at_median_ns"] == (100 + 107) / 2
    # A call's span: first event of any block to the last (block 1 starts 7 ns later and its op 0 is 10 ns longer).
    assert s["call"]["count"] == 2 and s["call"]["median_ns"] == 7 + 100 + 310 + 500 + 50
    assert "op:put#1" in trace.format_table(s)


def test_equal_times_keep_the_recorded_order(tmp_path):
    events = [[5, 1, 0, 0, 0], [5, 1, 0, 2, 0], [9, 1, 0, 6, 0], [9, 1, 0, 3, 0]]
    t = trace.load(write(tmp_path / "b.json", events))
    assert [t.name(e, a) for _, e, a in trace.timelines(t)[(1, 0)]] == ["start", "staged", "op:put#0", "end"]


def test_main_prints_and_writes_the_summary(tmp_path, capsys):
    files = [write(tmp_path / f"r{r}.json", call_events(1, 0, 0, [200]) + call_events(2, 0, 5000, [400]), rank=r,
                   dropped=r) for r in (0, 1)]
    out = tmp_path / "summary.json"
    assert trace.main([*files, "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "op:put#0" in text and "1 events dropped" in text
    summary = json.loads(out.read_text())
    assert {r["step"]: r["count"] for r in summary["steps"]}["op:put#0"] == 4


def test_a_file_of_another_kind_is_refused(tmp_path):
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"rows": []}))
    with pytest.raises(ValueError, match="not a meshcomm device trace"):
        trace.load(str(path))


def test_warm_up_is_skipped_per_kernel(tmp_path):
    """Two kernels counting their own calls (one's calls begin with start, the other's with staged; the second
    kernel's calls carry bit 30, as meshcomm.ep's do): the first call of each is left out."""
    events = []
    for call in (1, 2, 3):
        events += [[100 * call, call, 0, 0, 0], [100 * call + 10, call, 0, 3, 0]]                # kernel A: start, end
        events += [[100 * call + 50, (1 << 30) | call, 0, 2, 0], [100 * call + 90, (1 << 30) | call, 0, 3, 0]]
    t = trace.load(write(tmp_path / "k.json", events))
    assert trace.kept_calls(t, trace.timelines(t), 1) == {2, 3, (1 << 30) | 2, (1 << 30) | 3}
    s = trace.summarize([t], skip_calls=1)
    assert s["call"]["count"] == 4 and s["call"]["min_ns"] == 10 and s["call"]["max_ns"] == 40
