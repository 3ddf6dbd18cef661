"""``timestampAsOf`` without Spark: Delta's commit times (the log files' times, made
increasing) and the version at a time, through ``seglake.open`` and ``Lake.refresh``.
tests/spark/test_delta.py checks the same rule against delta-spark itself."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import seglake
from seglake.errors import ConfigError
from seglake.lake.catalog import Catalog
from seglake.lake.handle import LakeHandle
from seglake.lake.time_travel import commit_times, version_as_of
from tests.unit.test_catalog import rows


def _lake(tmp_path: Path, commits: int) -> str:
    root = str(tmp_path / "lake")
    catalog = Catalog(root)
    for i in range(commits):
        catalog.commit(rows("t", 0, [(10 * i, 10 * i + 10)]), f"run-{i}")
    return root


def _set_mtimes(root: str, ms: list[int]) -> None:
    log = Path(root, "_catalog", "_delta_log")
    for version, t in enumerate(ms):
        os.utime(log / f"{version:020d}.json", ns=(t * 1_000_000, t * 1_000_000))


def test_commit_times_are_made_increasing_as_delta_makes_them(tmp_path):
    root = _lake(tmp_path, 3)  # versions 0 (creation) to 3
    t = 1_800_000_000_000
    _set_mtimes(root, [t, t + 500, t + 500, t + 400])  # a clock that went back
    assert commit_times(LakeHandle.open(root)) == [(0, t), (1, t + 500), (2, t + 501), (3, t + 502)]
    assert [
        version_as_of(LakeHandle.open(root), ms) for ms in (t, t + 499, t + 500, t + 501, t + 502)
    ] == [
        0,
        0,
        1,
        2,
        3,
    ]
    with pytest.raises(ConfigError, match="before the earliest version"):
        version_as_of(LakeHandle.open(root), t - 1)
    with pytest.raises(ConfigError, match="after the latest version"):
        version_as_of(LakeHandle.open(root), t + 503)


def test_notebook_open_and_refresh_by_time(tmp_path):
    root = _lake(tmp_path, 2)
    t = 1_800_000_000_000
    _set_mtimes(root, [t, t + 1000, t + 2000])
    lake = seglake.open(root, timestamp_as_of="2027-01-15T08:00:01.5Z")  # t + 1500
    assert lake.version == 1 and lake.segments("t")["base_offset"].tolist() == [0]
    assert lake.refresh(timestamp_as_of=t + 2000).version == 2
    assert lake.refresh().version == 2
    with pytest.raises(ConfigError, match="cannot specify both"):
        seglake.open(root, version=1, timestamp_as_of=t)
