"""Per-process LRU cache of opened segments (their offset and time indexes, and for key
lookups their ``.keyindex``), bounded by bytes.

Kafka's ``RemoteIndexCache`` for seglake's executors: a Python worker that answers many
lookups or reads many splits of the same segment reads each ``.index``/``.timeindex``
once. An entry's weight is the bytes of its loaded indexes (plus a small fixed overhead);
least recently used entries are evicted once the total exceeds
``seglake.index.cache.bytes`` (:attr:`LogConfig.index_cache_bytes`). ``0`` disables it.

Entries are keyed by (lake location, segment path, run id, size): a segment rewritten by
recovery gets a new size or run id, so a stale entry is never returned. A hit on a row
whose file a later run replaced under its name since (compaction) reads the retired copy,
as a fresh open does: one existence check per reader of a row with a run id (a pinned
reader's first hit, unless it located the files itself; every hit of an unpinned one),
not one per hit (on S3 a HEAD each: :meth:`SegmentFiles.retired_since
<seglake.storage.segment_files.SegmentFiles.retired_since>`).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import pyarrow.fs as pafs

from seglake import fs as lakefs
from seglake.config import LogConfig
from seglake.location import Root
from seglake.storage.key_index import KeyIndex
from seglake.storage.key_lookup import keep_key_index, key_index_bytes
from seglake.storage.log import PartitionLog
from seglake.storage.naming import partition_dir_name
from seglake.storage.segment import LogSegment
from seglake.storage.segment_files import Pin
from seglake.storage.segment_ref import SegmentRef

ENTRY_OVERHEAD = 512
DEFAULT_MAX_BYTES = LogConfig().index_cache_bytes  # seglake.index.cache.bytes (config.py)

__all__ = ["IndexCache", "get_cache", "segment_weight"]


def segment_weight(seg: LogSegment) -> int:
    """Bytes an opened segment holds in memory (its loaded indexes)."""
    w = ENTRY_OVERHEAD
    if seg._offset_index is not None:
        w += len(seg._offset_index) * seg._offset_index.ENTRY_SIZE
    if seg._time_index is not None:
        w += len(seg._time_index) * seg._time_index.ENTRY_SIZE
    return w + key_index_bytes(seg)


class IndexCache:
    """LRU of :class:`LogSegment` objects with their indexes loaded."""

    def __init__(self, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.max_bytes = int(max_bytes)
        self._lock = threading.Lock()
        self._entries: OrderedDict[tuple[Any, ...], tuple[LogSegment, int]] = OrderedDict()
        self._fs: dict[Root, tuple[pafs.FileSystem, str]] = {}
        self.bytes = 0
        self.hits = 0
        self.misses = 0
        self.evictions = 0

    def resolve(self, root: Root) -> tuple[pafs.FileSystem, str]:
        """``fs.resolve(root)``, memoised (object-store clients are costly to build)."""
        got = self._fs.get(root)
        if got is None:
            got = self._fs[root] = lakefs.resolve(root)
        return got

    def partition_log(
        self,
        root: Root,
        tp: tuple[str, int],
        refs: Sequence[SegmentRef],
        on_corrupt: str = "raise",
    ) -> PartitionLog:
        """A partition's log from its committed segments, these from this cache (indexes
        read once per process, and only when a lookup needs them)."""
        fs, base = self.resolve(root)
        segs = [self.segment(root, ref, load_indexes=False, on_corrupt=on_corrupt) for ref in refs]
        return PartitionLog(fs, lakefs.join(base, partition_dir_name(*tp)), segs)

    def segment(
        self,
        root: Root,
        ref: SegmentRef,
        *,
        load_indexes: bool = True,
        on_corrupt: str = "raise",
        pin: Pin | None = None,
        key_index: bool = False,
    ) -> LogSegment:
        """The committed segment ``ref`` of the lake at ``root`` (:meth:`SegmentRef.open
        <seglake.storage.segment_ref.SegmentRef.open>`), indexes loaded, from the cache;
        ``on_corrupt`` as :class:`LogSegment`'s. ``pin``: the catalog version the caller
        is pinned to, set on the segment for this read (a process reads for one task at a
        time; a shared segment is the same row, so another reader's pin would tell the
        same). ``key_index``: its usable ``.keyindex`` kept on it too
        (:func:`~seglake.storage.key_lookup.keep_key_index`), and weighed."""
        key = (root, ref.path, ref.run_id or None, ref.size_bytes, on_corrupt)
        with self._lock:
            hit = self._entries.get(key)
            if hit is not None:
                self._entries.move_to_end(key)
                self.hits += 1
                hit[0].pin = pin
            else:
                self.misses += 1
        if hit is not None:
            hit[0].files.retired_since()  # compacted in place since: read the row's copy
            if key_index and not isinstance(hit[0].key_index, KeyIndex) and keep_key_index(hit[0]):
                self._reweigh(key, hit[0])  # its key index now held
            return hit[0]
        fs, base = self.resolve(root)
        seg = ref.open(fs, base, on_corrupt=on_corrupt, pin=pin)
        if load_indexes:
            seg.offset_index  # noqa: B018  (loads both indexes, one ranged read each)
        if self.max_bytes <= 0:
            return seg
        if key_index:
            keep_key_index(seg)
        weight = segment_weight(seg)
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self.bytes -= old[1]
            self._entries[key] = (seg, weight)
            self.bytes += weight
            while self.bytes > self.max_bytes and len(self._entries) > 1:
                _, (_, w) = self._entries.popitem(last=False)
                self.bytes -= w
                self.evictions += 1
        return seg

    def _reweigh(self, key: tuple[Any, ...], seg: LogSegment) -> None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None and entry[0] is seg:
                w = segment_weight(seg)
                self.bytes += w - entry[1]
                self._entries[key] = (seg, w)

    def stats(self) -> dict[str, Any]:
        with self._lock:
            return {
                "entries": len(self._entries),
                "bytes": self.bytes,
                "hits": self.hits,
                "misses": self.misses,
                "evictions": self.evictions,
            }

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self.bytes = 0


_CACHE: IndexCache | None = None
_CACHE_LOCK = threading.Lock()


def get_cache(max_bytes: int | None = None) -> IndexCache:
    """This process's cache (created on first use; ``max_bytes`` resizes it)."""
    global _CACHE
    with _CACHE_LOCK:
        if _CACHE is None:
            _CACHE = IndexCache(DEFAULT_MAX_BYTES if max_bytes is None else max_bytes)
        elif max_bytes is not None:
            _CACHE.max_bytes = int(max_bytes)
        return _CACHE
