"""What a command points at, checked the same way by every command: a partition
directory's log (``--skip-corrupt``, the skipped batches named on stderr), a lake.

``read``, ``offset-for-time``, ``consume`` and ``recover`` open partition directories;
``offsets``, ``history`` and ``cleanup`` check for a lake.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from seglake.errors import SegmentNotFoundError
from seglake.lake.handle import LakeHandle

if TYPE_CHECKING:
    from seglake.storage.log import PartitionLog


def skip_corrupt(p: argparse.ArgumentParser) -> None:
    """The ``--skip-corrupt`` flag (``read``, ``offset-for-time``, ``consume``)."""
    p.add_argument(
        "--skip-corrupt",
        action="store_true",
        help="skip damaged batches (CRC, magic, length) and name each on stderr, instead "
        "of stopping with an error (exit 2); a torn tail is never an error",
    )


def open_log(args: argparse.Namespace) -> PartitionLog:
    """``args.partition_dir``'s log, damaged batches skipped with ``--skip-corrupt``."""
    import warnings

    if args.skip_corrupt:  # reported by report_skipped, one line each
        warnings.simplefilter("ignore")
    return open_partition(args.partition_dir, on_corrupt="skip" if args.skip_corrupt else "raise")


def report_skipped(log: PartitionLog) -> None:
    """One stderr line per damaged batch a log skipped."""
    for path, b in log.skipped:
        print(f"seglake: warning: skipped a damaged batch: {b.describe(path)}", file=sys.stderr)


def open_partition(path: str, *, on_corrupt: str = "raise") -> PartitionLog:
    """The partition directory's log (in a lake: its catalog's segments); an error if it
    holds no segment (``.log`` named by a 20-digit base offset): an empty answer would
    look like an empty partition."""

    from seglake.lake.staging import open_partition_dir

    log = open_partition_dir(path, on_corrupt=on_corrupt)
    if not log.segments:
        raise no_segments(path, "")
    return log


def no_segments(path: str, what: str) -> SegmentNotFoundError:
    """The error for a directory without segments, naming the files it has."""
    import pyarrow.fs as pafs

    from seglake import fs as lakefs

    fs, d = lakefs.resolve(path)
    names = sorted(i.base_name for i in fs.get_file_info(pafs.FileSelector(d)))
    others = f"; other files: {names[:5]}{' ...' if len(names) > 5 else ''}" if names else ""
    return SegmentNotFoundError(
        f"{path}: no segment in this directory (no <20-digit base offset>.log file){what}{others}"
    )


def check_lake(lake: LakeHandle, *, staging: bool = False) -> None:
    """A lake's commands only on a lake: a path with a catalog (``staging``: or a staging
    directory, for ``cleanup``)."""
    from seglake import fs as lakefs
    from seglake.lake_paths import CATALOG_DIR, STAGING_DIR

    fs, base = lake.fs, lake.base
    dirs = (CATALOG_DIR, STAGING_DIR) if staging else (CATALOG_DIR,)
    if not any(lakefs.exists(fs, lakefs.join(base, d)) for d in dirs):
        raise SegmentNotFoundError(f"{lake}: not a lake (no {'/ or '.join(dirs)}/ in it)")
