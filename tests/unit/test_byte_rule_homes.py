"""Each of Kafka's byte rules has one home (issue 33 item 2), read from the source with
``ast`` (nothing is imported): the numbers of the format in ``format.py`` (the batch
header's 61 bytes, the index entries' 8 and 12, Int32.MAX), the roll decision in
``storage/roll.py``, the baseOffset patch in ``record/batch.py``, the index cache's
default in ``config.py``."""

from __future__ import annotations

import ast
from pathlib import Path

LIB = Path(__file__).resolve().parents[2] / "lib" / "seglake"
SOURCES = {str(p.relative_to(LIB)): ast.parse(p.read_text()) for p in sorted(LIB.rglob("*.py"))}


def _where(pred, skip: tuple[str, ...] = ()) -> list[str]:
    return [
        f"{name}:{node.lineno}"
        for name, tree in SOURCES.items()
        if name not in skip
        for node in ast.walk(tree)
        if pred(node)
    ]


def _int(node: ast.AST, *values: int) -> bool:
    return isinstance(node, ast.Constant) and type(node.value) is int and node.value in values


def _names(node: ast.AST) -> str:
    return " ".join(
        n.id if isinstance(n, ast.Name) else n.attr
        for n in ast.walk(node)
        if isinstance(n, ast.Name | ast.Attribute)
    ).lower()


def test_the_batch_header_size_is_written_once() -> None:
    """61 (Kafka's RECORD_BATCH_OVERHEAD) only as format.py's constant."""
    assert _where(lambda n: _int(n, 61), skip=("format.py",)) == []


def test_index_entry_sizes_are_written_once() -> None:
    """No ``* 8``/``* 12``/``// 8``/``// 12`` beside an index or its entries: the entry
    sizes are format.py's (``OffsetIndex.ENTRY_SIZE``, ``TimeIndex.ENTRY_SIZE``)."""

    def entry_arith(n: ast.AST) -> bool:
        if not (isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mult | ast.FloorDiv)):
            return False
        for const, other in ((n.left, n.right), (n.right, n.left)):
            if _int(const, 8, 12) and any(
                w in _names(other) for w in ("index", "entr", "slot", "n_oi", "n_ti", "_n")
            ):
                return True
        return False

    assert _where(entry_arith, skip=("format.py",)) == []


def test_int32_max_is_written_once() -> None:
    """``2**31 - 1`` / ``(1 << 31) - 1`` / ``< 2**31`` only in format.py (INT32_MAX);
    record/decode.py's is Arrow's binary array limit, not Kafka's (masks such as
    ``0x7FFFFFFF`` are bit operations, left alone)."""

    def two31(n: ast.AST) -> bool:
        return (
            isinstance(n, ast.BinOp)
            and isinstance(n.op, ast.Pow | ast.LShift)
            and _int(n.left, 1, 2)
            and _int(n.right, 31)
        )

    def int32(n: ast.AST) -> bool:
        return (isinstance(n, ast.BinOp) and isinstance(n.op, ast.Sub) and two31(n.left)) or (
            isinstance(n, ast.Compare)
            and isinstance(n.ops[-1], ast.Lt)
            and two31(n.comparators[-1])
        )

    assert _where(int32, skip=("format.py", "record/decode.py")) == []


def test_the_roll_decision_is_written_once() -> None:
    """``segment_bytes`` and the time rule are compared only in storage/roll.py (Kafka's
    ``LogSegment.shouldRoll``); storage/merge.py's grouping is Kafka's other rule,
    ``Cleaner.groupSegmentsBySize``, and takes the limit as an argument."""

    def compares_roll(n: ast.AST) -> bool:
        return isinstance(n, ast.Compare) and any(
            w in _names(n) for w in ("segment_bytes", "max_segment_ms", "roll_time_limit")
        )

    assert _where(compares_roll, skip=("storage/roll.py",)) == []


def test_the_base_offset_patch_is_written_once() -> None:
    """Bytes ``[0, 8)`` of a batch (int64 big-endian) are written by record/batch.py's
    move_base_offsets only (the stream commit's rebase and the ingest rebase call it)."""

    def int64_bytes(n: ast.AST) -> bool:
        return (
            isinstance(n, ast.Call)
            and isinstance(n.func, ast.Attribute)
            and n.func.attr == "astype"
            and len(n.args) == 1
            and isinstance(n.args[0], ast.Constant)
            and n.args[0].value == ">i8"
        )

    assert [w.split(":")[0] for w in _where(int64_bytes)] == ["record/batch.py"]


def test_the_index_cache_default_is_configs() -> None:
    """256 MiB (``seglake.index.cache.bytes``) is written in config.py only."""

    def mib256(n: ast.AST) -> bool:
        return isinstance(n, ast.BinOp) and _int(n.left, 256) and isinstance(n.op, ast.Mult)

    assert _where(mib256, skip=("config.py",)) == []


def test_the_stream_commit_leaves_segment_bytes_to_storage() -> None:
    """lake/stream_*.py plan and commit: no batch scan, header or index is built there
    (storage/segment_join.py writes a stream commit's segment bytes, as Kafka's
    ``LogSegment`` owns its bytes)."""
    bytes_modules = ("seglake.record", "seglake.storage.index_builder")
    found = [
        f"{name}:{node.lineno} {node.module}"
        for name, tree in SOURCES.items()
        if name.startswith("lake/stream_")
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom)
        and node.module
        and node.module.startswith(bytes_modules)
    ]
    assert found == []
