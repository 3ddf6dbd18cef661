"""The records of given keys in one segment, through its ``.keyindex``
(:mod:`seglake.storage.key_index`), and a segment's key index as a writer needs it.

    keys -> hash_keys -> filter: no key may be present -> no read at all
         -> exact level: candidate offsets (searchsorted over the sorted hashes)
         -> the records at those offsets read (the point reads' engine: only the batches
            holding them, decoded in one call) -> kept where the KEY BYTES equal the query's

A hash collision is a candidate whose bytes differ: dropped, never returned. A segment
whose ``.keyindex`` is missing, damaged or covers fewer offsets than the segment is read
whole and its keys compared: :attr:`KeyMatches.status` says ``"scanned: <why>"`` (one
line naming the file), never a silent "no match". Null keys are not indexed: a null query
matches nothing. Offsets at or past the segment's ``next_offset`` (a later version grew
it in place) are left out.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from seglake import fs as lakefs
from seglake.errors import CorruptIndexError, CorruptRecordError, SegmentNotFoundError
from seglake.storage import key_index
from seglake.storage.key_filter import MAX_BYTES
from seglake.storage.key_index import (
    ENTRY_SIZE,
    HEADER_SIZE,
    KeyIndex,
    head_next_offset,
    key_index_of_log,
    read_filter,
)
from seglake.storage.naming import KEY_INDEX_SUFFIX
from seglake.storage.point_reads import read_offsets_many
from seglake.storage.segment import LogSegment

__all__ = [
    "INDEXED",
    "KeyMatches",
    "find_keys",
    "find_keys_many",
    "keep_key_index",
    "key_index_bytes",
    "load_key_index",
    "rules_out",
    "segment_key_index",
]

INDEXED = "index"


@dataclasses.dataclass(frozen=True)
class KeyMatches:
    """``records``: the matching records (the reader's record columns) in offset order,
    with ``query`` (int32: the position of the key asked); ``status``: :data:`INDEXED`,
    or ``"scanned: <why>"``; ``candidates``: offsets the exact level gave (collisions
    included; 0 when scanned)."""

    records: pa.Table
    status: str
    candidates: int = 0

    @property
    def scanned(self) -> bool:
        return self.status != INDEXED


def load_key_index(
    seg: LogSegment, data: bytes | pa.Buffer | None = None
) -> tuple[KeyIndex | None, str]:
    """The segment's usable ``.keyindex`` (its bytes ``data`` if read already) and ``""``,
    or ``None`` and why not (missing, damaged, or covering fewer offsets than the
    segment)."""
    path = seg.stem + KEY_INDEX_SUFFIX
    try:
        if data is None:
            data = seg.files.index_buffer(KEY_INDEX_SUFFIX)
        if data is None:
            return None, f"{path}: missing"
        idx = KeyIndex.from_bytes(data, seg.base_offset, path=path)
    except CorruptRecordError as exc:
        return None, str(exc)
    if idx.next_offset < seg.next_offset:
        return None, (
            f"{path}: covers offsets below {idx.next_offset}, the segment reaches "
            f"{seg.next_offset - 1}"
        )
    return idx, ""


def keep_key_index(seg: LogSegment) -> int:
    """Load ``seg``'s usable ``.keyindex`` and keep it on the segment
    (:attr:`LogSegment.key_index`: a cached segment's is read and checked once per
    process); when it is not usable, why (the segment is scanned; the next lookup looks
    again: :meth:`IndexCache.segment <seglake.storage.index_cache.IndexCache.segment>`).
    Returns the memory kept (:func:`key_index_bytes`; 0 if none)."""
    if not isinstance(seg.key_index, KeyIndex):
        idx, why = load_key_index(seg)
        seg.key_index = why if idx is None else idx
    return key_index_bytes(seg)


def key_index_bytes(seg: LogSegment) -> int:
    """The memory ``seg``'s kept key index holds: its filter, and its exact level (12
    bytes a record) unless memory-mapped (a local file's: the page cache holds it)."""
    idx = seg.key_index
    if not isinstance(idx, KeyIndex):
        return 0
    exact = 0 if lakefs.is_local(seg.fs) else idx.entries * ENTRY_SIZE
    return int(idx.filter.words.nbytes) + exact


def segment_key_index(seg: LogSegment) -> KeyIndex:
    """The segment's key index: its file when usable, else built from its ``.log`` (a
    broker's segment, an older lake's), cut to the segment's offsets."""
    idx, _ = load_key_index(seg)
    if idx is None:
        return key_index_of_log(
            seg.log_bytes(), seg.scan(), seg.base_offset, seg.next_offset, path=seg.log_path
        )
    keep = idx.offsets.astype(np.int64) + idx.base_offset < seg.next_offset
    if keep.all():
        return idx
    return dataclasses.replace(
        idx, next_offset=seg.next_offset, hashes=idx.hashes[keep], offsets=idx.offsets[keep]
    )


def find_keys(seg: LogSegment, keys: Sequence[bytes | None] | pa.Array) -> KeyMatches:
    """Every record of ``seg`` whose key equals one of ``keys`` (bytes; str is UTF-8):
    :func:`find_keys_many` of one segment."""
    return find_keys_many([seg], keys)[0]


def find_keys_many(
    segs: Sequence[LogSegment], keys: Sequence[bytes | None] | pa.Array
) -> list[KeyMatches]:
    """Every record of each of ``segs`` whose key equals one of ``keys`` (bytes; str is
    UTF-8), a :class:`KeyMatches` a segment. Each segment's filter, then exact level,
    gives its candidate offsets (segment by segment: one read of a file's first ``48 +
    MAX_BYTES`` bytes, its header and filter, all of a small file; none when kept on the
    segment; nothing more when the filter rules every key out); then the candidates of
    all segments are read as one set of point reads (:func:`read_offsets_many`). An
    error is raised for the first segment (in order) that has one."""
    query = _query_array(keys)
    hashes, valid = key_index.hash_keys(query)
    asked = np.flatnonzero(valid)
    out: list[KeyMatches | None] = []
    reads: list[tuple[int, np.ndarray]] = []  # (segment, its candidate offsets)
    for seg in segs:
        got = _candidates(seg, query, hashes, asked)
        out.append(got if isinstance(got, KeyMatches) else None)
        if not isinstance(got, KeyMatches):
            reads.append((len(out) - 1, got))
    tables = read_offsets_many([(segs[i], offsets) for i, offsets in reads])
    for (i, offsets), table in zip(reads, tables, strict=True):
        out[i] = KeyMatches(_matching(table, query), INDEXED, len(offsets))
    return [m for m in out if m is not None]


def _candidates(
    seg: LogSegment, query: pa.Array, hashes: np.ndarray, asked: np.ndarray
) -> KeyMatches | np.ndarray:
    """The offsets of ``seg`` its key index gives for the keys ``asked`` (of ``query``,
    their ``hashes``), or its answer when there is nothing to read: no candidate, or
    scanned (no usable index: the segment read whole, its keys compared)."""
    kept = seg.key_index  # (checked once: keep_key_index)
    idx, why, whole = None, "", None
    if isinstance(kept, KeyIndex):
        idx, ruled_out = kept, not kept.filter.may_contain(hashes[asked]).any()
    elif kept is None:
        ruled_out, whole = _filter_check(seg, hashes[asked])
    else:
        ruled_out, why = False, kept
    if ruled_out:
        return KeyMatches(_matching(_empty(seg), query), INDEXED)
    if idx is None and not why:
        idx, why = load_key_index(seg, whole)
    if idx is None:
        table = seg.read_records(end_offset=seg.next_offset)
        return KeyMatches(_matching(table, query), f"scanned: {why}")
    maybe = asked[idx.filter.may_contain(hashes[asked])]
    _, offsets = idx.candidates(hashes[maybe])
    offsets = np.unique(offsets[offsets < seg.next_offset])
    if not len(offsets):
        return KeyMatches(_matching(_empty(seg), query), INDEXED)
    return offsets


def rules_out(seg: LogSegment, keys: Sequence[bytes | None] | pa.Array) -> bool:
    """Whether the segment's ``.keyindex`` filter says none of ``keys`` is in it (one read
    of its header and filter); ``False`` when it may hold one, or has no usable index
    (the reader scans it then: :func:`find_keys`)."""
    hashes, valid = key_index.hash_keys(_query_array(keys))
    return _filter_check(seg, hashes[valid])[0]


def _filter_check(seg: LogSegment, hashes: np.ndarray) -> tuple[bool, bytes | None]:
    """Whether the filter rules every hash out, and the whole file when that one read
    held it (a small file: the exact level too), else ``None``."""
    try:
        head, length = seg.files.read_index(KEY_INDEX_SUFFIX, HEADER_SIZE + MAX_BYTES)
        filt = read_filter(head, seg.base_offset, path=seg.stem + KEY_INDEX_SUFFIX)
    except (SegmentNotFoundError, CorruptIndexError):
        return False, None  # load_key_index says what is wrong
    if head_next_offset(head) >= seg.next_offset and not filt.may_contain(hashes).any():
        return True, None
    return False, head if len(head) == length else None  # else the exact level is past it


def _query_array(keys: Sequence[bytes | None] | pa.Array) -> pa.Array:
    if isinstance(keys, pa.Array):
        arr = keys
    else:
        arr = pa.array([k.encode() if isinstance(k, str) else k for k in keys], pa.binary())
    if pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type):
        arr = arr.cast(pa.binary())
    return arr.cast(pa.binary()) if pa.types.is_large_binary(arr.type) else arr


def _empty(seg: LogSegment) -> pa.Table:
    return seg.read_records(seg.base_offset, seg.base_offset)


def _matching(table: pa.Table, query: pa.Array) -> pa.Table:
    """The rows of ``table`` whose key bytes equal a non-null query key, each with the
    position of (the first equal) query key."""
    key = table.column("key").cast(pa.binary())
    at = pc.index_in(key, value_set=query.drop_null())
    hit = pc.is_valid(at)
    positions = np.flatnonzero(query.is_valid().to_numpy(zero_copy_only=False))
    picked = table.filter(hit)
    which = positions[pc.filter(at, hit).to_numpy(zero_copy_only=False).astype(np.int64)]
    return picked.append_column("query", pa.array(which.astype(np.int32), pa.int32()))
