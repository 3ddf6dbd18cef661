"""Offset rules of a catalog change, checked against the catalog's rows.

Within a partition, segments ``[base_offset, next_offset)`` never overlap. A commit
continues each partition at its log end offset (the largest ``next_offset``; with gaps
allowed for compacted input); a removal keeps each partition's last segment unless the
log may be truncated; a replacement leaves no overlap. Rows another run committed
meanwhile make a commit a :class:`~seglake.errors.ConcurrentRunError`.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import NamedTuple

import pyarrow as pa

from seglake.errors import CatalogError, ConcurrentRunError, OffsetOrderError, SegmentNotFoundError
from seglake.lake.rows import listing

__all__ = [
    "Key",
    "Seg",
    "check_commit",
    "check_removal",
    "check_replacement",
    "check_tail_ends",
    "check_unchanged",
    "group_by_partition",
    "order_problems",
]


class Seg(NamedTuple):
    base: int
    next: int
    run_id: str


Key = tuple[str, int]


def label(key: Key) -> str:
    return f"{key[0]}-{key[1]}"


def group_by_partition(t: pa.Table) -> dict[Key, list[Seg]]:
    """Rows of a catalog-shaped table by (topic, partition), each sorted by base offset."""
    out: dict[Key, list[Seg]] = {}
    cols = [
        t.column(c).to_pylist()
        for c in ("topic", "partition", "base_offset", "next_offset", "run_id")
    ]
    for topic, partition, base, nxt, run in zip(*cols, strict=True):
        out.setdefault((topic, partition), []).append(Seg(base, nxt, run))
    for segs in out.values():
        segs.sort()
    return out


def order_problems(key: Key, segs: list[Seg], *, contiguous: bool) -> list[str]:
    """Overlaps (and gaps, if ``contiguous``) between consecutive segments of one partition."""
    problems = []
    for a, b in itertools.pairwise(segs):
        if b.base == a.base:
            problems.append(f"{label(key)}: two segments with base offset {a.base}")
        elif b.base < a.next:
            problems.append(
                f"{label(key)}: segment {b.base} overlaps segment {a.base} "
                f"(which ends at next offset {a.next})"
            )
        elif contiguous and b.base != a.next:
            problems.append(
                f"{label(key)}: gap between segment {a.base} (next offset "
                f"{a.next}) and segment {b.base}"
            )
    return problems


def require_present(keys: set[tuple[str, int, int]], existing: dict[Key, list[Seg]]) -> None:
    have = {(*key, s.base) for key, segs in existing.items() for s in segs}
    missing = sorted(keys - have)
    if missing:
        raise SegmentNotFoundError(
            "segments not in the catalog: "
            + listing([f"{t}-{p} segment {b}" for t, p, b in missing])
        )


def check_tail_ends(
    existing: dict[Key, list[Seg]], ends: Mapping[tuple[str, int, int], int], run_id: str
) -> None:
    """Segments a commit grows (``ends``: their ``next_offset`` when its rows were made)
    must not have grown since: else :class:`ConcurrentRunError` (another batch appended
    to the same newest segment first; committing would drop its records)."""
    grew = [
        f"{t}-{p} segment {s.base} ends at {s.next}, not {ends[(t, p, s.base)]}"
        for (t, p), segs in existing.items()
        for s in segs
        if (t, p, s.base) in ends and s.next != ends[(t, p, s.base)]
    ]
    if grew:
        raise ConcurrentRunError(
            f"commit of run {run_id!r}: segments it grows were grown by another run first: "
            f"{listing(grew)}; nothing was published"
        )


def check_commit(
    new: dict[Key, list[Seg]], existing: dict[Key, list[Seg]], run_id: str, *, contiguous: bool
) -> None:
    """New segments (by partition, in order, not overlapping) must start at their
    partition's log end offset in ``existing`` (with ``contiguous=False``: at or after it).

    Raises :class:`ConcurrentRunError` when ``existing`` already holds those offsets (another
    run committed them), :class:`OffsetOrderError` for a gap.
    """
    conflicts, gaps = [], []
    for key, segs in new.items():
        have = existing.get(key)
        if not have:
            continue
        leo = max(s.next for s in have)
        last = have[-1]
        first = segs[0]
        if first.base < leo or first.base <= last.base:  # (<=: empty last segment)
            owners = sorted({s.run_id for s in have if s.next > first.base}) or [last.run_id]
            conflicts.append(
                f"{label(key)}: new segments start at offset {first.base} but the "
                f"catalog's log end offset is {leo} (last segment {last.base}; offsets "
                f"from {first.base} on committed by run(s) {owners})"
            )
        elif contiguous and first.base != leo:
            gaps.append(
                f"{label(key)}: new segments start at offset {first.base}, "
                f"after the log end offset {leo} (a gap)"
            )
    if conflicts:
        raise ConcurrentRunError(
            f"run {run_id!r} was not committed, another run committed these offsets "
            f"first: {listing(conflicts)}"
        )
    if gaps:
        raise OffsetOrderError(f"run {run_id!r}: {listing(gaps)}")


def check_removal(
    wanted: set[tuple[str, int, int]],
    existing: dict[Key, list[Seg]],
    run_id: str,
    *,
    allow_truncate: bool,
) -> None:
    """The segments to remove must exist, and (unless ``allow_truncate``) none may be the
    last of its partition, which would move the log end offset back."""
    require_present(wanted, existing)
    if allow_truncate:
        return
    tails = [
        f"{label(key)} segment {segs[-1].base} (log end offset {segs[-1].next})"
        for key, segs in existing.items()
        if (*key, segs[-1].base) in wanted
    ]
    if tails:
        raise CatalogError(
            f"run {run_id!r} would remove the last segment of a partition, moving "
            f"its log end offset back: {listing(tails)}; pass allow_truncate=True "
            "if that is intended"
        )


def check_replacement(
    touched: set[tuple[str, int, int]],
    new: dict[Key, list[Seg]],
    existing: dict[Key, list[Seg]],
    run_id: str,
) -> None:
    """The ``touched`` segments (replaced or removed) must exist; with ``new`` in their
    place, no two segments of a partition may overlap (gaps are fine)."""
    require_present(touched, existing)
    problems = []
    for key in sorted({(t, p) for t, p, _ in touched}):
        after = [s for s in existing.get(key, []) if (*key, s.base) not in touched]
        after = sorted(after + new.get(key, []))
        problems += order_problems(key, after, contiguous=False)
    if problems:
        raise OffsetOrderError(f"run {run_id!r}: " + listing(problems))


def check_unchanged(
    expected: Mapping[tuple[str, int, int], str], existing: dict[Key, list[Seg]], run_id: str
) -> None:
    """Every ``(topic, partition, base)`` still has the row of the run it had when the
    change was planned; otherwise another run rewrote it first."""
    now = {(*key, s.base): s.run_id for key, segs in existing.items() for s in segs}
    changed = [
        f"{t}-{p} segment {b}: run {now.get((t, p, b))!r}, planned on run {r!r}"
        for (t, p, b), r in sorted(expected.items())
        if now.get((t, p, b)) != r
    ]
    if changed:
        raise ConcurrentRunError(
            f"run {run_id!r}: segments changed since it was planned: " + listing(changed)
        )
