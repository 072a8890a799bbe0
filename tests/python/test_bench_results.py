"""bench/results conventions: files are named DATE-DEVICE-TOPIC.{md,json} (plot folders DATE-DEVICE-TOPIC-plots),
and every benchmark JSON records its date, device, commit and the exact command as top-level strings.

Selector tables (a document whose only top-level field is "rules", as meshcomm-tune writes and
Selector::fromJson reads; fromJson rejects any other top-level field) cannot carry these fields: their
provenance lives in the sibling DATE-DEVICE-TOPIC.md instead, which this test requires."""

import json
import re
from pathlib import Path

import pytest

RESULTS = Path(__file__).resolve().parents[2] / "bench" / "results"
REQUIRED = ("date", "device", "commit", "command")
# 2026-11-22-h200x4-ll-packet-wait.md, 2026-11-21-h200x4-tuned-4K-4M.json, 2026-11-21-h200x4-v4-plots/
NAME = re.compile(r"^(?P<date>\d{4}-\d{2}-\d{2})-(?P<device>[a-z0-9]+x\d+)-(?P<topic>[A-Za-z0-9][A-Za-z0-9.-]*)$")

ENTRIES = sorted(RESULTS.iterdir()) if RESULTS.is_dir() else []
JSONS = [p for p in ENTRIES if p.is_file() and p.suffix == ".json"]


def is_selector_table(doc):
    return isinstance(doc, dict) and set(doc) == {"rules"}


def test_results_folder_has_json():
    assert JSONS, f"no JSON files found in {RESULTS}"


@pytest.mark.parametrize("path", ENTRIES, ids=lambda p: p.name)
def test_entry_is_named_date_device_topic(path):
    if path.is_dir():
        assert path.name.endswith("-plots"), f"{path.name}: folders in bench/results are DATE-DEVICE-TOPIC-plots"
        stem = path.name
    else:
        assert path.suffix in (".md", ".json"), f"{path.name}: bench/results holds only .md and .json files"
        stem = path.stem
    m = NAME.match(stem)
    assert m, f"{path.name}: expected DATE-DEVICE-TOPIC.(md|json), e.g. 2026-11-22-h200x4-ll-packet-wait.md"
    month, day = int(m["date"][5:7]), int(m["date"][8:10])
    assert 1 <= month <= 12 and 1 <= day <= 31, f"{path.name}: {m['date']} is not a date"


@pytest.mark.parametrize("path", JSONS, ids=lambda p: p.name)
def test_json_records_date_device_commit_command(path):
    doc = json.loads(path.read_text())
    if is_selector_table(doc):
        md = path.with_suffix(".md")
        assert md.is_file(), f"{path.name} is a selector table (only 'rules'): its provenance belongs in {md.name}"
        text = md.read_text().lower()
        for word in REQUIRED:
            assert word in text, f"{md.name} documents the selector table {path.name} but does not name its {word}"
        return
    assert isinstance(doc, dict), f"{path.name}: top level must be an object"
    for key in REQUIRED:
        value = doc.get(key)
        assert isinstance(value, str) and value.strip(), f"{path.name}: top-level '{key}' missing or empty"
    name = NAME.match(path.stem)
    if name is not None:
        date = name["date"]
        assert doc["date"].startswith(date), f"{path.name}: date {doc['date']!r} differs from the file name's {date}"
