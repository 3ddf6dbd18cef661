"""``.keyindex`` files written for a lake's committed segments that have none (a lake made
before the key index) or whose one is damaged or short (a segment grown in place by an
older writer): ``seglake index build``.

A sidecar only: the catalog rows do not name a segment's ``.keyindex`` (readers find it
beside the ``.log`` and check it: :func:`~seglake.storage.key_lookup.load_key_index`), so
no catalog commit is needed, and a segment whose index is usable is left alone
(idempotent: a second build writes nothing). Each file is written whole (a temporary name
then a rename; one PUT on an object store), so a reader meets the old state or the new
file. A segment retired by a concurrent run after this build read it may leave its new
``.keyindex`` behind in the partition directory, as any leftover file of a retired segment.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from seglake import fs as lakefs
from seglake.lake.handle import LakeHandle
from seglake.lake.snapshot import Snapshot
from seglake.storage.key_index import key_index_or_why
from seglake.storage.key_lookup import load_key_index
from seglake.storage.naming import KEY_INDEX_SUFFIX

__all__ = ["KeyBuild", "build_key_indexes"]


@dataclasses.dataclass
class KeyBuild:
    """What a build did: ``segments`` looked at, ``kept`` (a usable index), ``written``
    and ``not_built`` lines (path and why)."""

    segments: int = 0
    kept: int = 0
    written: list[str] = dataclasses.field(default_factory=list)
    not_built: list[str] = dataclasses.field(default_factory=list)

    def lines(self) -> list[str]:
        return [
            *(f"written {w}" for w in self.written),
            *(f"not built {n}" for n in self.not_built),
            f"{self.segments} segment(s): {len(self.written)} .keyindex written, "
            f"{self.kept} already usable, {len(self.not_built)} not built",
        ]


def build_key_indexes(lake: LakeHandle, topics: Iterable[str] | None = None) -> KeyBuild:
    """Write the missing, damaged or short ``.keyindex`` of every committed segment of
    ``topics`` (default: every topic) of ``lake``, from its ``.log``."""
    snap = Snapshot.read(lake, list(topics) if topics else None)
    out = KeyBuild()
    for tp in snap.partitions:
        for seg in snap.log(tp).segments:
            out.segments += 1
            idx, why = load_key_index(seg)
            if idx is not None:
                out.kept += 1
                continue
            built, not_built = key_index_or_why(
                seg.log_bytes(), seg.scan(), seg.base_offset, seg.next_offset, path=seg.log_path
            )
            path = seg.stem + KEY_INDEX_SUFFIX
            if built is None:
                out.not_built.append(f"{path}: {not_built}")
                continue
            lakefs.write_bytes(seg.files.fs, path, built.to_bytes())
            out.written.append(f"{path} ({why.removeprefix(path + ': ')})")
    return out
