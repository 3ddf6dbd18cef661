"""``.keyindex``: a segment's key index, written in the same pass as its ``.index`` and
``.timeindex`` (seglake's own file: no broker writes or reads it; Kafka's ``LogLoader``
ignores a suffix it does not know).

Two levels: a small **filter** a driver reads alone (the header and the filter are the
file's first ``48 + filter_bytes`` bytes) to pick the segments that may hold a key, and
the **exact** level an executor reads to find the candidate offsets: every non-null key's
XXH64 (seed 0, :mod:`seglake.record.key_hash`) sorted, with its record's offset. A hash
match is a candidate only: the reader compares the records' key bytes
(:mod:`seglake.storage.key_lookup`), so a collision never returns another key's record.
Records with a null key and control records are not indexed. Little-endian throughout::

    offset  size  field
         0     4  magic            b"SLKI"
         4     2  version          1
         6     2  flags            0
         8     8  base_offset      int64: the segment's (its file name's)
        16     8  next_offset      uint64: one past the last offset the index covers
                                   (2^63 after a segment ending at Long.MAX_VALUE)
        24     4  entries          uint32: indexed records (non-null keys)
        28     4  filter_bytes     uint32: a multiple of 32 (a power of two blocks)
        32     4  filter_crc       crc32c of the filter
        36     4  exact_crc        crc32c of the hashes and offsets
        40     4  header_crc       crc32c of bytes 0..40
        44     4  reserved         0
        48     F  filter           split-block bloom filter (storage/key_filter.py)
      48+F   8*n  hashes           uint64, ascending
    48+F+8n  4*n  offsets          uint32, relative to base_offset (as ``.index``),
                                   ascending among equal hashes

So a record costs 12 bytes of exact level, and the filter 1.3 to 2 bytes per distinct key
at the 1 % target (a power of two blocks; capped: :data:`~seglake.storage.key_filter.
MAX_BYTES`; measured: 1,000 keys 2 KiB 0.12 % false positives, 10,000 16 KiB 0.34 %,
100,000 128 KiB 1.03 %). A file that
is short, has another magic, version or base offset, a CRC that does not match, hashes out
of order or an offset outside the segment raises :class:`CorruptIndexError` (one line
naming the file); readers then scan the segment and say so.
"""

from __future__ import annotations

import dataclasses
import struct

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs

from seglake import fs as lakefs
from seglake.errors import CorruptIndexError, CorruptRecordError
from seglake.record import native
from seglake.record.batch import BatchScan
from seglake.record.crc import crc32c
from seglake.record.key_hash import key_hashes
from seglake.record.reader import decode_batches
from seglake.storage.key_filter import MAX_BYTES, TARGET_FPP, KeyFilter, filter_bytes

__all__ = [
    "ENTRY_SIZE",
    "HEADER_SIZE",
    "KeyIndex",
    "KeyIndexBuilder",
    "hash_keys",
    "head_next_offset",
    "key_index_of_log",
    "key_index_or_why",
    "move_key_index",
    "read_filter",
]

MAGIC = b"SLKI"
VERSION = 1
HEADER_SIZE = 48
HASH_SIZE = 8  # an entry: its uint64 hash, then (in the offsets column) its uint32 offset
ENTRY_SIZE = HASH_SIZE + 4  # 12 bytes a record
_HEAD = struct.Struct("<4sHHqQIIII")  # through filter_crc and exact_crc: 40 bytes
_U32_MAX = 2**32 - 1


def hash_keys(keys: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
    """The index's hash of each key and which are non-null (:func:`key_hashes`): the one
    call building and lookup make (tests replace it to force collisions)."""
    return key_hashes(keys)


@dataclasses.dataclass(frozen=True)
class KeyIndex:
    """One segment's key index: ``hashes`` (uint64, sorted) and ``offsets`` (uint32,
    relative), the filter over the hashes, and the offsets it covers
    (``[base_offset, next_offset)``)."""

    base_offset: int
    next_offset: int
    filter: KeyFilter
    hashes: np.ndarray
    offsets: np.ndarray

    @classmethod
    def build(
        cls,
        base_offset: int,
        next_offset: int,
        hashes: np.ndarray,
        offsets: np.ndarray,
        *,
        fpp: float = TARGET_FPP,
        max_filter_bytes: int = MAX_BYTES,
    ) -> KeyIndex:
        """The index of records at absolute ``offsets`` (ascending) with key ``hashes``
        (non-null keys only)."""
        rel = _relative(np.asarray(offsets, np.int64), int(base_offset))
        h = np.array(hashes, np.uint64)  # its own copy: sorted in place
        return cls._of_owned((base_offset, next_offset), h, rel, (fpp, max_filter_bytes))

    @classmethod
    def _of_owned(
        cls, span: tuple[int, int], hashes: np.ndarray, rel: np.ndarray, sizing: tuple[float, int]
    ) -> KeyIndex:
        """:meth:`build` (``span``: base and next offset; ``sizing``: fpp and the largest
        filter) of arrays nobody else holds (uint64 hashes, uint32 relative offsets),
        sorted in place. The filter takes every sorted hash (an equal one sets the same
        bits again), sized by the distinct ones."""
        h, rel32 = _sorted_pairs(hashes, rel)
        distinct = int(np.count_nonzero(h[1:] != h[:-1])) + 1 if len(h) else 0
        filt = KeyFilter.build(h, filter_bytes(distinct, *sizing))
        return cls(int(span[0]), int(span[1]), filt, h, rel32)

    @property
    def entries(self) -> int:
        return len(self.hashes)

    def to_bytes(self) -> bytes:
        return b"".join(self.parts())

    def parts(self) -> list[bytes | memoryview]:
        """The file's bytes in pieces (header, filter, hashes, offsets): a writer writes
        them one after another without joining 12 bytes a record into one more copy."""
        filt = self.filter.to_bytes()
        exact = [
            np.ascontiguousarray(self.hashes, "<u8").data.cast("B"),
            np.ascontiguousarray(self.offsets, "<u4").data.cast("B"),
        ]
        head = _HEAD.pack(
            MAGIC,
            VERSION,
            0,
            self.base_offset,
            self.next_offset,
            self.entries,
            len(filt),
            crc32c(filt),
            crc32c(exact[1], crc32c(exact[0])),
        )
        return [head + struct.pack("<II", crc32c(head), 0), filt, *exact]

    @classmethod
    def from_bytes(
        cls, data: bytes | pa.Buffer, base_offset: int, *, path: str | None = None
    ) -> KeyIndex:
        """Parse a whole file; :class:`CorruptIndexError` if any check fails. The hashes
        and offsets are views of ``data`` (read-only; no copy on a little-endian
        machine), the checks passes over them."""
        entries, fbytes, filt = _header_and_filter(data, base_offset, path)
        exact_crc, next_offset = _HEAD.unpack_from(data)[8], _HEAD.unpack_from(data)[4]
        start = HEADER_SIZE + fbytes
        end = start + ENTRY_SIZE * entries
        if len(data) != end:
            raise CorruptIndexError(
                f".keyindex is {len(data)} bytes, its header says {end} ({entries} entries)",
                path=path,
            )
        if crc32c(memoryview(data)[start:end]) != exact_crc:
            raise CorruptIndexError(".keyindex exact level fails its CRC", path=path)
        hashes = np.frombuffer(data, "<u8", entries, start).astype(np.uint64, copy=False)
        at = start + HASH_SIZE * entries
        offsets = np.frombuffer(data, "<u4", entries, at).astype(np.uint32, copy=False)
        if entries > 1 and np.less(hashes[1:], hashes[:-1]).any():
            raise CorruptIndexError(".keyindex hashes are not in order", path=path)
        if entries and int(offsets.max()) >= next_offset - base_offset:
            raise CorruptIndexError(
                f".keyindex offset {base_offset + int(offsets.max())} is not below its "
                f"next offset {next_offset}",
                path=path,
            )
        return cls(base_offset, next_offset, filt, hashes, offsets)

    def candidates(self, hashes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Every entry whose hash is one of ``hashes``: ``(query positions, absolute
        offsets)``, by query then offset (the exact level's searchsorted)."""
        q = np.asarray(hashes, np.uint64)
        lo = np.searchsorted(self.hashes, q, side="left")
        hi = np.searchsorted(self.hashes, q, side="right")
        counts = hi - lo
        which = np.repeat(np.arange(len(q), dtype=np.int64), counts)
        starts = np.repeat(lo - np.concatenate(([0], np.cumsum(counts)[:-1])), counts)
        slots = starts + np.arange(int(counts.sum()), dtype=np.int64)
        return which, self.offsets[slots].astype(np.int64) + self.base_offset


def _relative(offsets: np.ndarray, base_offset: int) -> np.ndarray:
    """Absolute int64 ``offsets`` as uint32 offsets from ``base_offset`` (``ValueError``
    when one does not fit the segment)."""
    rel = offsets - base_offset
    if len(rel) and (rel.min() < 0 or rel.max() > _U32_MAX):
        raise ValueError(f"offsets {rel.min()}..{rel.max()} do not fit the segment")
    return rel.astype(np.uint32)


def _sorted_pairs(h: np.ndarray, rel: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(h, rel)`` (uint64, uint32; the caller's own: sorted in place) sorted by ``h``,
    stable (equal hashes keep their offsets' order): the kernel's radix sort
    (``sl_sort_pairs``), else numpy's stable argsort."""
    lib = native.kernel()
    if lib is None or not len(h):
        order = np.argsort(h, kind="stable")
        return h[order], rel[order]
    h2, rel2 = np.empty_like(h), np.empty_like(rel)
    lib.sl_sort_pairs(len(h), *(native.address(a) for a in (h, rel, h2, rel2)))
    return h, rel


def read_filter(head: bytes, base_offset: int, *, path: str | None = None) -> KeyFilter:
    """The filter from a file's first ``48 + filter_bytes`` bytes (or more): what a driver
    reads of each segment; :class:`CorruptIndexError` if the header or filter is bad."""
    return _header_and_filter(head, base_offset, path)[2]


def head_next_offset(head: bytes) -> int:
    """``next_offset`` of a file whose header :func:`read_filter` checked."""
    return int(_HEAD.unpack_from(head)[4])


def _header_and_filter(
    data: bytes | pa.Buffer, base_offset: int, path: str | None
) -> tuple[int, int, KeyFilter]:
    if len(data) < HEADER_SIZE:
        raise CorruptIndexError(
            f".keyindex is {len(data)} bytes, shorter than its {HEADER_SIZE}-byte header",
            path=path,
        )
    magic, version, _, base, nxt, entries, fbytes, fcrc, _ = _HEAD.unpack_from(data)
    (hcrc,) = struct.unpack_from("<I", data, 40)
    if magic != MAGIC or crc32c(memoryview(data)[:40]) != hcrc:
        raise CorruptIndexError(
            f".keyindex header is damaged (magic {magic!r}, CRC {hcrc:#010x})", path=path
        )
    if version != VERSION:
        raise CorruptIndexError(f".keyindex version {version}, expected {VERSION}", path=path)
    if base != base_offset or nxt < base or fbytes % 32 or not fbytes:
        raise CorruptIndexError(
            f".keyindex base offset {base} (expected {base_offset}), next offset {nxt}, "
            f"filter {fbytes} bytes",
            path=path,
        )
    raw = memoryview(data)[HEADER_SIZE : HEADER_SIZE + fbytes]
    if len(raw) != fbytes or crc32c(raw) != fcrc:
        raise CorruptIndexError(".keyindex filter is short or fails its CRC", path=path)
    return int(entries), int(fbytes), KeyFilter.from_bytes(raw)


class KeyIndexBuilder:
    """A segment's key index built as its records are appended (in offset order)."""

    def __init__(self, base_offset: int) -> None:
        self.base_offset = int(base_offset)
        self._hashes: list[np.ndarray] = []
        self._offsets: list[np.ndarray] = []  # uint32, relative to base_offset

    @classmethod
    def resume(cls, index: KeyIndex) -> KeyIndexBuilder:
        """Continue a closed segment's index (a segment grown in place)."""
        self = cls(index.base_offset)
        self.add_index(index)
        return self

    def add_index(self, index: KeyIndex) -> None:
        """The entries of another segment's index (its absolute offsets, ascending past
        the ones added so far): segments merged."""
        self._hashes.append(index.hashes)
        self._offsets.append(
            _relative(index.offsets.astype(np.int64) + index.base_offset, self.base_offset)
        )

    def add(self, keys: pa.Array | pa.ChunkedArray, offsets: np.ndarray) -> None:
        """Records with ``keys`` at absolute ``offsets`` (nulls skipped)."""
        hashes, valid = hash_keys(keys)
        off = np.asarray(offsets, np.int64)
        if not valid.all():
            hashes, off = hashes[valid], off[valid]
        self._hashes.append(hashes)
        self._offsets.append(_relative(off, self.base_offset))

    def add_records(self, records: pa.Table) -> None:
        """Records of a decoded table (``key`` and ``offset`` columns)."""
        self.add(records.column("key"), records.column("offset").to_numpy())

    def finish(self, next_offset: int) -> KeyIndex:
        """The index: the pieces joined once into arrays of its own, sorted in place. The
        pieces are let go before the sort (the peak holds the entries twice, not three
        times) and the sorted entries become the one piece (a stable sort of them and
        later records orders them as of the pieces: more may be added, finish again)."""
        hashes = _joined(self._hashes, np.uint64)
        offsets = _joined(self._offsets, np.uint32)
        self._hashes, self._offsets = [], []
        span, sizing = (self.base_offset, next_offset), (TARGET_FPP, MAX_BYTES)
        index = KeyIndex._of_owned(span, hashes, offsets, sizing)
        self._hashes, self._offsets = [index.hashes], [index.offsets]
        return index


def _joined(parts: list[np.ndarray], dtype: type) -> np.ndarray:
    """``parts`` in one new array (a copy even of one part: the caller sorts it)."""
    return np.concatenate(parts).astype(dtype, copy=False) if parts else np.zeros(0, dtype)


def move_key_index(fs: pafs.FileSystem, src: str, dst: str, delta: int = 0) -> None:
    """A staged segment's ``.keyindex`` (if it has one) moved with its segment, whose
    batches moved by ``delta`` offsets: its entries are relative, so only the header's
    base and next offsets change (the file is read, rebased and written; a damaged one is
    dropped: readers scan, recovery rebuilds)."""
    if not lakefs.exists(fs, src):
        return
    if delta:
        data = lakefs.read_all(fs, src)
        base = struct.unpack_from("<q", data, 8)[0] if len(data) >= HEADER_SIZE else 0
        try:
            idx = KeyIndex.from_bytes(data, base, path=src)
        except CorruptIndexError:
            lakefs.delete_file(fs, src, root=src.rsplit("/", 1)[0])
            return
        moved = dataclasses.replace(
            idx, base_offset=idx.base_offset + delta, next_offset=idx.next_offset + delta
        )
        lakefs.write_bytes(fs, dst, moved.to_bytes())
        lakefs.delete_file(fs, src, root=src.rsplit("/", 1)[0])
    else:
        lakefs.move(fs, src, dst)


def key_index_of_log(
    buf: bytes | memoryview,
    scan: BatchScan,
    base_offset: int,
    next_offset: int,
    *,
    path: str | None = None,
) -> KeyIndex:
    """The key index of the batches of ``scan`` in ``buf`` (a whole ``.log``, or what
    recovery keeps of it): its records' keys decoded by the record reader, without
    headers; control records are left out."""
    builder = KeyIndexBuilder(base_offset)
    if len(scan):
        builder.add_records(decode_batches(buf, scan, path=path, headers=False))
    return builder.finish(next_offset)


def key_index_or_why(
    buf: bytes | memoryview,
    scan: BatchScan,
    base_offset: int,
    next_offset: int,
    *,
    path: str | None = None,
) -> tuple[KeyIndex | None, str]:
    """:func:`key_index_of_log`, or ``None`` and why when its records do not decode
    (CRC-valid batches of bad records: the segment gets no ``.keyindex``, its readers
    scan it and meet the same error as any read)."""
    try:
        return key_index_of_log(buf, scan, base_offset, next_offset, path=path), ""
    except CorruptRecordError as exc:
        return None, f"not built: {exc}"
