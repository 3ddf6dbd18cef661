"""The one pinned-read check (``lake/pinned.py``), where a segment's file is opened: a
segment of catalog version V opened with V's pin, after a later version removed or
replaced it in place and ``cleanup`` deleted the old file, raises one
VersionSupersededError at the read, whichever reader (notebook, Spark task, lookup)
opened it. Both faces: the ``.log`` missing, and a ``.log`` shorter than the row (of a
row still current: data loss, TruncatedSegmentError)."""

from __future__ import annotations

from pathlib import Path

import pytest

from seglake import fs as lakefs
from seglake.errors import SegmentNotFoundError, TruncatedSegmentError, VersionSupersededError
from seglake.lake.catalog import Catalog
from seglake.lake.compaction import CompactOptions, run_compaction
from seglake.lake.handle import LakeHandle
from seglake.lake.pinned import PinnedVersion
from seglake.lake.retention import apply_retention
from seglake.lake.rows import segment_ref
from seglake.lake.staging import cleanup
from seglake.storage.retention import RetentionRules
from tests.unit.test_compact_rules import COMPACT, NOW, keyed_lake
from tests.unit.test_recovery import logs, make_lake, pristine  # noqa: F401


def _segment(root: Path, row: dict, pin: PinnedVersion | None):
    fs, base = lakefs.resolve(str(root))
    return segment_ref(row).open(fs, base, pin=pin)


def _file_size(seg) -> int:
    """The ``.log``'s size asked of the filesystem (not the row's)."""
    seg._size = None
    return seg.size


def test_missing_file_of_a_pinned_segment(tmp_path: Path, pristine: Path) -> None:  # noqa: F811
    root = tmp_path / "lake"
    make_lake(root, pristine)
    segs = logs(root / "t-0")
    cat = Catalog(str(root))
    pinned = cat.version()
    first = cat.segments("t", 0).to_pylist()[0]
    apply_retention(
        LakeHandle.open(str(root)), RetentionRules(log_start_offsets={("t", 0): int(segs[2].stem)})
    )
    cleanup(LakeHandle.open(str(root)), older_than_s=0)
    assert not (root / first["path"]).exists()
    with pytest.raises(SegmentNotFoundError) as plain:  # no pin: the file's own error
        _segment(root, first, None).log_bytes()
    assert not isinstance(plain.value, VersionSupersededError)
    pin = PinnedVersion(str(root), pinned)
    reads = {
        "log_bytes": lambda seg: seg.log_bytes(),
        "size": _file_size,
        "read_records": lambda seg: seg.read_records(),
    }
    for name, read in reads.items():
        seg = _segment(root, first, pin)
        with pytest.raises(VersionSupersededError) as err:
            read(seg)
        assert err.value.version == pinned and err.value.superseded_by == pinned + 1, name
        assert "retention" in (err.value.operation or "") and "t-0" in str(err.value)
        assert isinstance(err.value.__cause__, SegmentNotFoundError)
    # a file of the newest version missing: the plain error, pin or not
    now = Catalog(str(root)).segments("t", 0).to_pylist()[0]
    (root / now["path"]).unlink()
    with pytest.raises(SegmentNotFoundError) as plain:
        _segment(root, now, PinnedVersion(str(root), Catalog(str(root)).version())).log_bytes()
    assert not isinstance(plain.value, VersionSupersededError)


def test_shorter_file_of_a_pinned_segment(tmp_path: Path) -> None:
    root = tmp_path / "lake"
    keyed_lake(root)
    cat = Catalog(str(root))
    pinned = cat.version()
    first = cat.segments("c", 0).to_pylist()[0]
    assert run_compaction(
        LakeHandle.open(str(root)),
        CompactOptions(conf={**COMPACT, "segment.bytes": "2000"}, now_ms=NOW),
    ).committed
    cleanup(LakeHandle.open(str(root)), delete_delay_s=0)
    new = Catalog(str(root)).segments("c", 0).to_pylist()[0]
    assert new["path"] == first["path"] and new["size_bytes"] < first["size_bytes"]
    # unpinned, the compacted file reads as the old row's torn tail (a subset)
    # unpinned, it cannot tell: the old row's records are reported lost (issue 25; was a
    # silent subset)
    with pytest.raises(TruncatedSegmentError, match=r"offsets 0\.\.109 are gone"):
        _segment(root, first, None).read_records()
    with pytest.raises(VersionSupersededError) as err:
        _segment(root, first, PinnedVersion(str(root), pinned)).read_records()
    assert err.value.version == pinned and first["path"] in str(err.value)
    assert "shorter than size_bytes" in str(err.value)
    # a file of the newest version's row cut short is data loss, pinned or not (issue
    # 25: it was read up to the cut)
    last = Catalog(str(root)).segments("c", 0).to_pylist()[-1]
    path = root / last["path"]
    path.write_bytes(path.read_bytes()[:-10])
    pin = PinnedVersion(str(root), Catalog(str(root)).version())
    for p in (pin, None):
        with pytest.raises(TruncatedSegmentError, match=f"{last['next_offset'] - 1} are gone"):
            _segment(root, last, p).read_records()
