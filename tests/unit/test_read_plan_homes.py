"""Every read through the plan, one transaction filter, one point-query segment choice
(issue 33 item 1), read from the source with ``ast`` (nothing is imported): the CLI reads
records through ``lake/scan_read.py`` ``log_records`` (a ``Scan``'s tasks), never through a
``PartitionLog``'s own reads or segment choice; read_committed's "drop the aborted
records" is ``storage/txn_index.py`` ``aborted_records``, called by the one task reader;
a point query's segment is ``lake/lookup_plan.py`` ``segment_for``'s."""

from __future__ import annotations

import ast
from pathlib import Path

LIB = Path(__file__).resolve().parents[2] / "lib" / "seglake"
SOURCES = {str(p.relative_to(LIB)): ast.parse(p.read_text()) for p in sorted(LIB.rglob("*.py"))}


def _calls(attrs: set[str]) -> dict[str, list[str]]:
    """``module -> ["attr:line", ...]`` of every call of a method or function named in
    ``attrs`` (``x.attr(...)`` or ``attr(...)``)."""
    out: dict[str, list[str]] = {}
    for name, tree in SOURCES.items():
        for n in ast.walk(tree):
            if not isinstance(n, ast.Call):
                continue
            f = n.func
            called = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", None)
            if called in attrs:
                out.setdefault(name, []).append(f"{called}:{n.lineno}")
    return out


def _receiver(n: ast.Call) -> str:
    """The dotted name a method is called on (``self.log`` of ``self.log.read()``)."""
    f = n.func
    return ast.unparse(f.value) if isinstance(f, ast.Attribute) else ""


def test_no_cli_module_reads_records_or_chooses_segments_itself() -> None:
    """cli/: no ``PartitionLog.read`` / ``read_range``, no segment's ``read_records`` or
    ``window``, no segment choice (``segment_index_for_*``, ``LogSegments`` searches,
    indexing ``.segments``), no ``PartitionLog`` or ``LogSegment`` built: records come
    from ``log_records`` (kafka-dump-log's raw file bytes, ``lakefs.read_range``, are not
    record reads)."""
    own = {
        "read_records",
        "window",
        "segment_index_for_offset",
        "segment_index_for_timestamp",
        "floor",
        "floor_many",
        "for_time",
        "for_time_many",
        "floor_position",
        "PartitionLog",
        "LogSegment",
        "from_refs",
    }
    bad = []
    for name, tree in SOURCES.items():
        if not name.startswith("cli/"):
            continue
        for n in ast.walk(tree):
            if isinstance(n, ast.Call):
                f = n.func
                called = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
                recv = _receiver(n)
                if (
                    called in own
                    or (called in ("read", "read_range") and "log" in recv.lower())
                    or (called == "open" and recv == "PartitionLog")
                ):
                    bad.append(f"{name}:{n.lineno} {ast.unparse(n.func)}")
            if isinstance(n, ast.Subscript) and ast.unparse(n.value).endswith(".segments"):
                bad.append(f"{name}:{n.lineno} {ast.unparse(n)}")
    assert bad == []


def test_the_cli_reads_records_through_read_log() -> None:
    """``consume`` and ``read`` call ``log_records`` (the plan's reader for a log opened by
    the command)."""
    calls = _calls({"log_records"})
    assert {"cli/consume.py", "cli/read.py"} <= set(calls), calls


def test_one_aborted_records_filter() -> None:
    """The records of aborted transactions are matched in ``storage/txn_index.py`` alone
    (``aborted_mask``, inside ``aborted_records``); ``aborted_records`` is called by the
    one task reader (``lake/scan_read.py``) and by the key lookups' answers
    (``lake/lookup_keys.py``: records found by point reads, their transactions collected
    by the planner's ``aborted_in``), ``collect_aborted`` (Kafka's collectAbortedTxns) by
    the one planner (``lake/scan.py``)."""
    assert set(_calls({"aborted_mask"})) == {"storage/txn_index.py"}
    assert set(_calls({"aborted_records"})) == {"lake/scan_read.py", "lake/lookup_keys.py"}
    assert set(_calls({"collect_aborted"})) - {"storage/txn_index.py"} == {"lake/scan.py"}


def test_one_point_query_segment_choice() -> None:
    """Above storage/, the ``LogSegments`` searches (``floor_many``, ``for_time_many``,
    ``largest``) run in ``lake/lookup_plan.py`` ``segment_for`` only: the lookup's
    grouping and its answers choose a query's segment the same way."""
    where = {
        m
        for m in _calls({"floor_many", "for_time_many", "largest"})
        if not m.startswith("storage/")
    }
    assert where == {"lake/lookup_plan.py"}
    users = set(_calls({"segment_for"}))
    assert {"lake/lookup_answer.py", "spark/lookup.py"} <= users, users


def test_no_other_record_read_bypasses_the_plan() -> None:
    """Above record/ and storage/, records are read from segments (``read_records``,
    ``window``, a log's ``read`` / ``read_range``) only by ``lake/scan_read.py`` (every
    planned read): the notebook's ``Partition.read`` (its chunk cache holds planned
    tasks' records), ``plot_rate`` and ``plot_index`` read through it too."""
    where = set()
    for name, tree in SOURCES.items():
        if name.startswith(("record/", "storage/")):
            continue
        for n in ast.walk(tree):
            if not (isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)):
                continue
            attr, recv = n.func.attr, _receiver(n).lower()
            if attr in ("read_records", "window") or (
                attr in ("read", "read_range") and "log" in recv
            ):
                where.add(name)
    assert where <= {"lake/scan_read.py"}, where


def test_the_notebook_reads_through_the_plan() -> None:
    """``api/partition.py`` plans with ``Scan`` and reads with ``read_tasks``; it chooses
    no segment itself (no ``segment_index_for_*``, no ``searchsorted`` over a segment's
    index)."""
    calls = _calls({"Scan", "read_tasks", "segment_index_for_offset", "searchsorted"})
    mine = calls.get("api/partition.py", [])
    assert any(c.startswith("Scan:") for c in mine) and any(
        c.startswith("read_tasks:") for c in mine
    ), mine
    assert not [c for c in mine if c.startswith("segment_index_for_offset")], mine
    own = ast.unparse(SOURCES["api/partition.py"])
    assert "offset_index" not in own and "_chunk_bounds" not in own
