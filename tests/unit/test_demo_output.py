"""What ``make demo`` and the committed notebook show a person: aligned tables with
thousands separators and lookup answers (no Python reprs), and a notebook saved with its
outputs (plots as PNG) so that a code host shows them."""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path

import pyarrow as pa
import pytest

from seglake.demo import lake_table, lookup_table
from seglake.render import text_table

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "explore.ipynb"
REPR = re.compile(r"\[\(|\{'|\(\(")  # [( {' ((: a list of tuples, a dict, a tuple key


def _columns(table: str) -> list[list[str]]:
    """The cells of an aligned table, cut at the rule line's column boundaries."""
    lines = table.splitlines()
    spans = [m.span() for m in re.finditer(r"-+", lines[1])]
    return [[line.ljust(spans[-1][1])[a:b].strip() for a, b in spans] for line in lines]


def _aligned(table: str, right: set[int]) -> None:
    """Every cell lies within its column (nothing spills into the gap between columns),
    right-aligned columns end at the rule's end."""
    lines = table.splitlines()
    spans = [m.span() for m in re.finditer(r"-+", lines[1])]
    for line in lines[2:]:
        padded = line.ljust(spans[-1][1])
        for i, (a, b) in enumerate(spans):
            if a:
                assert padded[a - 2 : a] == "  ", (line, i)
            if i in right and padded[a:b].strip():
                assert padded[b - 1] != " ", (line, i)


def test_text_table() -> None:
    t = text_table(["topic", "records", "ratio"], [["orders", 1234567, 0.5], ["clicks", 7, None]])
    assert t.splitlines() == [
        "topic     records  ratio",
        "------  ---------  -----",
        "orders  1,234,567   0.50",
        "clicks          7",
    ]


def _catalog_rows() -> pa.Table:
    rows = []
    for p, (base, n) in enumerate([(0, 19576), (0, 20239), (19576, 663)]):
        rows.append(
            {
                "topic": "orders",
                "partition": 0 if p < 2 else 1,
                "base_offset": base if p != 1 else 19576,
                "next_offset": (base if p != 1 else 19576) + n,
                "record_count": n,
                "size_bytes": 3_000_000 + p,
                "min_timestamp": 1767225600000,
                "max_timestamp": 1767225900000 + p,
                "path": f"orders-{p}/x.log",
            }
        )
    return pa.Table.from_pylist(rows)


def test_lake_table_reads_as_a_table() -> None:
    t = lake_table(_catalog_rows())
    assert not REPR.search(t)
    cells = _columns(t)
    assert cells[0][:7] == [
        "topic",
        "partition",
        "segments",
        "records",
        "bytes",
        "log start",
        "log end",
    ]
    assert cells[2][:7] == ["orders", "0", "2", "39,815", "5.7 MiB", "0", "39,815"]
    assert cells[3][:7] == ["orders", "1", "1", "663", "2.9 MiB", "19,576", "20,239"]
    assert cells[2][7:] == ["2026-01-01 00:00:00.000", "2026-01-01 00:05:00.001"]
    _aligned(t, right={1, 2, 3, 4, 5, 6})


def _b64(s: str) -> str:
    return base64.b64encode(s.encode()).decode()


def test_lookup_table_shows_answers_with_status() -> None:
    """Rows as Spark's JSON writer writes the lookup output (binary base64, nulls left out)."""
    answers = [
        json.loads(line)
        for line in [
            json.dumps(
                {
                    "key": _b64("user-1"),
                    "value": _b64("x" * 40),
                    "topic": "orders",
                    "partition": 1,
                    "offset": 12345,
                    "timestamp": "2026-01-01T00:03:25.123Z",
                    "timestampType": 0,
                    "query_offset": 12345,
                    "status": "ok",
                }
            ),
            json.dumps(
                {
                    "topic": "orders",
                    "partition": 3,
                    "query_offset": 10**12,
                    "status": "offset_out_of_range",
                }
            ),
            json.dumps(
                {
                    "key": _b64("u"),
                    "value": _b64("v"),
                    "topic": "clicks",
                    "partition": 2,
                    "offset": 5,
                    "timestamp": "2026-01-01T00:10:00.000Z",
                    "timestampType": 0,
                    "query_timestamp": 1767226200000,
                    "status": "ok",
                }
            ),
        ]
    ]
    t = lookup_table(answers)
    assert not REPR.search(t)
    cells = _columns(t)
    assert cells[0] == [
        "partition",
        "query",
        "status",
        "offset",
        "timestamp (UTC)",
        "key",
        "value",
    ]
    assert cells[2] == [
        "clicks-2",
        "time 2026-01-01 00:10:00.000",
        "ok",
        "5",
        "2026-01-01 00:10:00.000",
        "u",
        "v",
    ]
    assert cells[2 + 1] == [
        "orders-1",
        "offset 12,345",
        "ok",
        "12,345",
        "2026-01-01 00:03:25.123",
        "user-1",
        "x" * 21 + "...",
    ]
    assert cells[4][:3] == ["orders-3", "offset 1,000,000,000,000", "offset_out_of_range"]
    _aligned(t, right={3})


def test_jobs_print_tables_not_reprs() -> None:
    pytest.importorskip("pyspark")
    from seglake.spark.jobs import ranges_table, status_table

    r = ranges_table({("orders", 1): (19576, 20239), ("orders", 0): (0, 1_000_000)})
    assert not REPR.search(r)
    assert _columns(r)[2] == ["orders", "0", "0", "1,000,000", "1,000,000"]
    assert _columns(r)[3] == ["orders", "1", "19,576", "20,239", "663"]
    s = status_table({"ok": 3, "offset_out_of_range": 1})
    assert not REPR.search(s)
    assert _columns(s)[2:] == [["ok", "3"], ["offset_out_of_range", "1"]]


def test_notebook_is_committed_with_outputs() -> None:
    """On a code host the notebook shows its tables and plots: executed, no errors, at
    least three PNG plots, small, and no machine's absolute paths in it."""
    nbformat = pytest.importorskip("nbformat")
    raw = NOTEBOOK.read_text()
    nb = nbformat.reads(raw, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    outputs = [o for c in code for o in c.get("outputs", [])]
    assert all(c.get("execution_count") for c in code)
    assert not [o for o in outputs if o.get("output_type") == "error"]
    assert len([o for o in outputs if "image/png" in o.get("data", {})]) >= 3
    assert any("text/html" in o.get("data", {}) for o in outputs)
    assert len(raw.encode()) < 600_000
    assert not re.search(r"/(work|tmp|home|Users)/", raw)
