"""``timestampAsOf``: the catalog version a time names, by Delta's rule (delta-spark's
``DeltaHistoryManager.getActiveCommitAtTime``), so that a seglake read and
``spark.read.format("delta").option("timestampAsOf", T)`` of ``<root>/_catalog`` pick the
same version:

    a commit's time is its ``_delta_log/<version>.json`` file's modification time (ms),
    raised to 1 ms after the previous commit's where it is not later (Delta's
    monotonization of commit times); the version of time T is the last commit at or
    before T. T before the first commit, or after the last one, is an error.

The catalog is written by deltalake, which stores no in-commit timestamps; delta-spark
reads the same file times, and so does ``DESCRIBE HISTORY``.
"""

from __future__ import annotations

import datetime as dt
import re

import pyarrow.fs as pafs

from seglake import fs as lakefs
from seglake.errors import ConfigError
from seglake.lake.handle import LakeHandle
from seglake.lake_paths import CATALOG_DIR

__all__ = ["commit_times", "version_as_of"]

_COMMIT = re.compile(r"^(\d{20})\.json$")


def commit_times(lake: LakeHandle) -> list[tuple[int, int]]:
    """``(version, commit time in ms)`` of every commit file in the catalog's log, oldest
    first, the times made increasing as Delta makes them."""
    fs, base = lake.fs, lake.base
    log_dir = lakefs.join(base, CATALOG_DIR, "_delta_log")
    found = []
    for info in fs.get_file_info(pafs.FileSelector(log_dir, allow_not_found=True)):
        m = _COMMIT.match(info.base_name)
        if m and info.type == pafs.FileType.File and info.mtime_ns is not None:
            found.append((int(m.group(1)), info.mtime_ns // 1_000_000))
    found.sort()
    out: list[tuple[int, int]] = []
    for version, ms in found:
        if out and ms <= out[-1][1]:
            ms = out[-1][1] + 1
        out.append((version, ms))
    return out


def _utc(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).isoformat(timespec="milliseconds")


def version_as_of(lake: LakeHandle, ms: int) -> int:
    """The catalog version at epoch ms ``ms`` by Delta's rule (see the module docstring).

    Raises:
        ConfigError: no commit at or before the time, or the time is after the newest
            commit (Delta's messages), or no catalog at ``root``.
    """
    commits = commit_times(lake)
    if not commits:
        raise ConfigError(f"timestampAsOf: no catalog at {lake} (not a lake?)")
    first, last = commits[0], commits[-1]
    if ms < first[1]:
        raise ConfigError(
            f"timestampAsOf: the provided timestamp ({_utc(ms)}) is before the earliest "
            f"version available to this table ({_utc(first[1])}, version {first[0]}). "
            f"Please use a timestamp after {_utc(first[1])}."
        )
    if ms > last[1]:
        raise ConfigError(
            f"timestampAsOf: the provided timestamp ({_utc(ms)}) is after the latest "
            f"version available to this table ({_utc(last[1])}, version {last[0]}). "
            f"Please use a timestamp before or at {_utc(last[1])}."
        )
    return max(v for v, t in commits if t <= ms)
