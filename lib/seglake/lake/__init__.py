"""The lake: partition directories of Kafka segments plus the Delta catalog that makes
them visible (``record -> storage -> lake -> api -> spark -> jobs``).

    table.py     reading the Delta catalog: open, rows, log start/end offsets, history
    catalog.py   Catalog: its changes (commit with run-id guard, replace, remove)
    rows.py      a catalog row: schema, normalisation, path and key checks
    checks.py    offset-order and log-end checks a change must pass before it commits
    staging.py   publishing a committed run's staged files, cleanup, open_partition
    recovery.py  a lake's recovery and its one catalog fix
    retention.py retention rules applied to a lake: one commit, then retired files
    garbage.py   retired files (file.delete.delay.ms), catalog orphans, superseded readers
    runs.py      what a run id covered, and refusing its reuse for other input
    register.py  catalog rows for a broker's partition directories, registered in place
    snapshot.py  a lake's partitions at one catalog version (one catalog read)
    scan.py      a read planned on a snapshot: SegmentTasks (extract, data sources, API)
    scan_read.py reading planned SegmentTasks (executors, the notebook API)
    packing.py   segment tasks into Spark tasks (bytes, or Kafka's offset ranges)
    lookup_plan.py    point lookups planned: a snapshot's arrays, each query's segment
    lookup_answer.py  point lookups answered (the lookup job's executors)

``from seglake.lake import open_partition`` works as a shortcut (loaded on first use, so
that importing a module of this package does not load the catalog).
"""

from __future__ import annotations

from typing import Any

_SHORTCUTS = {
    "open_partition": "seglake.lake.staging",
    "cleanup": "seglake.lake.staging",
    "Catalog": "seglake.lake.catalog",
}


def __getattr__(name: str) -> Any:
    if name in _SHORTCUTS:
        import importlib

        return getattr(importlib.import_module(_SHORTCUTS[name]), name)
    raise AttributeError(f"module 'seglake.lake' has no attribute {name!r}")
