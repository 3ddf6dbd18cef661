"""A segment of a committed run read before, while and after its files leave staging.

Readers of a committed row look under ``_staging/<run>/`` when the file is not moved yet;
a cached segment (executors' index cache, the notebook API) must follow the files when
they are moved afterwards.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from seglake import fs as lakefs
from seglake.errors import SegmentNotFoundError
from seglake.storage.log import PartitionLog
from seglake.storage.segment import LogSegment
from tests.unit.test_writer import make_records

SUFFIXES = (".log", ".index", ".timeindex")


def test_cached_segment_follows_its_files_out_of_staging(tmp_path: Path) -> None:
    filesystem, root = lakefs.resolve(str(tmp_path / "lake"))
    staged_dir = lakefs.join(root, "_staging", "run-1", "t-0")
    final_dir = lakefs.join(root, "t-0")
    filesystem.create_dir(staged_dir, recursive=True)
    records = make_records(400)
    (info,) = PartitionLog(filesystem, staged_dir, []).append(records)
    name = info.log_path.rsplit("/", 1)[-1]
    seg = LogSegment(
        filesystem, lakefs.join(final_dir, name), size=info.size_bytes, staged_path=info.log_path
    )
    want = records.column("value").to_pylist()
    assert seg.read_records(0, 400).column("value").to_pylist() == want  # from staging
    assert seg.log_path == info.log_path
    filesystem.create_dir(final_dir, recursive=True)
    for suffix in SUFFIXES:  # publish: the files move, the cached segment stays
        lakefs.move(
            filesystem, info.log_path[:-4] + suffix, lakefs.join(final_dir, name[:-4] + suffix)
        )
    assert seg.read_records(100, 300).column("value").to_pylist() == want[100:300]
    assert seg.log_path == lakefs.join(final_dir, name)
    lakefs.delete_dir(filesystem, final_dir, root=root)
    with pytest.raises(SegmentNotFoundError):  # gone from both places
        seg.read_records(0, 10)
