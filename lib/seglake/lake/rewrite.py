"""Runs that rewrite committed segments (merging, compaction): stage, commit, publish.

plan (driver)     groups of adjacent catalog rows of one partition
task (executor)   one group -> one new segment in _staging/<run>/<topic>-<p>/, named
                  by the group's first base offset (it replaces that row)
commit (driver)   _staging/<run>/_replaces.json (the old rows), then ONE catalog
                  commit: the first row of each group replaced, the others removed,
                  guarded by the run ids the plan read (a concurrent recovery,
                  retention or compaction of one of these rows wins, this run
                  changes nothing and its staged files are deleted)
publish           old files -> _retired/<old run>/ (pinned readers), new files in,
                  retired files handed to :func:`seglake.lake.garbage.retire`
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from seglake import fs as lakefs
from seglake.lake.catalog import CommitResult
from seglake.lake.handle import LakeHandle
from seglake.lake.rows import KEY_COLUMNS, rows_table, segment_ref, segment_row
from seglake.lake.staging import discard_staging, publish_pending, stage_replaced
from seglake.lake_paths import STAGING_DIR
from seglake.storage.merge import MergeSource, group_segments, merge_segments
from seglake.storage.naming import partition_dir_name, run_dir

__all__ = ["commit_rewrite", "merge_group", "open_sources", "plan_merge_groups"]


def plan_merge_groups(
    rows: pa.Table,
    *,
    segment_bytes: int,
    segment_index_bytes: int,
    first_uncleanable: int | None = None,
    min_len: int = 2,
) -> list[list[dict[str, Any]]]:
    """Groups (of ``min_len`` segments or more) of one partition's rows, sorted by base
    offset, as :func:`~seglake.storage.merge.group_segments` forms them;
    ``first_uncleanable`` defaults to the log end offset."""
    if rows.num_rows < min_len:
        return []
    c = {k: rows.column(k).to_pylist() for k in rows.column_names}
    spans = group_segments(
        c["base_offset"],
        c["size_bytes"],
        c["index_entries"],
        c["time_index_entries"],
        max_size=segment_bytes,
        max_index_size=segment_index_bytes,
        first_uncleanable=max(c["next_offset"]) if first_uncleanable is None else first_uncleanable,
    )
    listed = rows.to_pylist()
    return [listed[a:b] for a, b in spans if b - a >= min_len]


def open_sources(lake: LakeHandle, rows: Sequence[dict[str, Any]]) -> list[MergeSource]:
    """The old segments of a group, each read where its row's version is."""
    fs, base = lake.fs, lake.base
    out = []
    for r in rows:
        seg = segment_ref(r).open(fs, base)
        out.append(
            MergeSource(
                seg,
                r["next_offset"],
                r["record_count"],
                r["min_timestamp"],
                r["max_timestamp"],
                r.get("tail_min_timestamps"),
            )
        )
    return out


def staging_dir(lake: LakeHandle, run_id: str, topic: str, partition: int) -> str:
    base = lake.base
    return lakefs.join(run_dir(base, STAGING_DIR, run_id), partition_dir_name(topic, partition))


def merge_group(
    lake: LakeHandle, run_id: str, rows: Sequence[dict[str, Any]], *, index_interval_bytes: int
) -> dict[str, Any]:
    """Executor task: merge one group into the run's staging; its catalog row."""
    fs = lake.fs
    topic, partition = rows[0]["topic"], rows[0]["partition"]
    info = merge_segments(
        fs,
        staging_dir(lake, run_id, topic, partition),
        open_sources(lake, rows),
        index_interval_bytes=index_interval_bytes,
    )
    return segment_row(topic, partition, info, rows[0]["path"])


def commit_rewrite(
    lake: LakeHandle,
    run_id: str,
    new_rows: Sequence[dict[str, Any]],
    old_rows: Sequence[dict[str, Any]],
) -> CommitResult:
    """Replace ``old_rows`` by ``new_rows`` (each named by the first base offset of the
    old rows it replaces) in one commit, then publish; see the module docstring."""
    catalog = lake.catalog
    new = rows_table(list(new_rows))
    new_keys = {tuple(r[k] for k in KEY_COLUMNS) for r in new_rows}
    old_keys = {tuple(r[k] for k in KEY_COLUMNS): r["run_id"] for r in old_rows}
    removed = sorted(k for k in old_keys if k not in new_keys)
    try:
        stage_replaced(lake, run_id, pa.Table.from_pylist(list(old_rows)))
        result = catalog.replace_rows(new, run_id, remove=removed, expected_runs=old_keys)
    except BaseException:
        if not catalog.run_committed(run_id):
            discard_staging(lake, run_id)
        raise
    if result.already_committed:
        publish_pending(lake, run_id)
    else:
        publish_pending(lake, run_id, new)
    return result
