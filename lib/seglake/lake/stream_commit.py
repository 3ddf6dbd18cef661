"""One streaming micro-batch's catalog commit (no Spark): the pieces its tasks staged ->
the partitions' segments, one catalog commit idempotent per (query id, batch id).

    tasks:   _staging/<piece>/<topic>-<p>/<base>.log/.index/.timeindex    one piece per
             task attempt; assigned offsets from the log end offsets the driver read
             when it planned the batch (each task as if it were the partition's first),
             given offsets as given
    here:    per partition, in task order: each piece's batches rebased where their
             offsets are not the final ones (the 8-byte baseOffset of a RecordBatch v2 is
             outside its CRC, so this is what a broker does to a producer's batch), then
             grouped by the roll rules (``log.segment.bytes``, ``log.roll.ms``, int32
             relative offsets; lake/stream_segments.py; the bytes storage/segment_join.py),
             the partition's newest segment
             first while it is under ``log.segment.bytes``:
               newest segment, local lake: appended in place (lake/stream_append.py: lock,
               cut to the catalog size, append, indexes continued)
               newest segment, object store (or ``seglake.stream.append=copy``): a new
               staged copy with the same name (indexes rebuilt by the interval rule)
               other groups: new staged segments (a piece already at its final offsets
               and alone in its group is moved, not rewritten)
          -> _staging/<run>/<topic>-<p>/...   then ONE catalog commit of run
             ``stream-<query id>-<batch id>`` (the grown newest segments' rows replaced in
             the same commit), then the files are published and the pieces dropped

A replayed batch (the driver died after the commit, before Spark's commit log) finds its
run id committed: it only finishes the publish and drops the pieces. A batch whose driver
died before the commit is rewritten by Spark: its first pieces are garbage that
``seglake cleanup`` (or the next ingest's sweep) removes, and bytes it appended in place
past the catalog size are cut by the next append.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs

from seglake import fs as lakefs
from seglake import lake_paths
from seglake.config import LogConfig
from seglake.errors import ConfigError, OffsetOrderError
from seglake.lake.catalog import Catalog, CommitResult
from seglake.lake.handle import LakeHandle
from seglake.lake.rows import rows_table
from seglake.lake.staging import publish_pending, stage_replaced
from seglake.lake.stream_append import appends_in_place, grow, locked, unchanged
from seglake.lake.stream_segments import Source, joined_row, roll, source
from seglake.lake.topic_store import topic_configs
from seglake.lake_paths import STAGING_DIR
from seglake.storage.key_index import move_key_index
from seglake.storage.naming import (
    INDEX_SUFFIX,
    KEY_INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    partition_dir_name,
    run_dir,
    segment_file_name,
    validate_name,
    validate_run_id,
)
from seglake.storage.roll import size_full
from seglake.storage.segment_join import first_batch_timestamp, write_joined

__all__ = ["APPEND_MODES", "PIECE_COLUMNS", "BatchCommit", "Piece", "commit_pieces"]

APPEND_MODES = ("true", "copy", "false")  # seglake.stream.append: in place where possible
# what a piece's rows (and the newest segment's) must say of each segment
PIECE_COLUMNS = (
    "topic",
    "partition",
    "base_offset",
    "next_offset",
    "size_bytes",
    "path",
    "min_timestamp",
    "max_timestamp",
    "tail_min_timestamps",
    "record_count",
    "index_entries",
    "time_index_entries",
    "codec",
    "index_interval_bytes",
)


@dataclasses.dataclass(frozen=True)
class Piece:
    """What one write task staged: ``rows`` (:data:`PIECE_COLUMNS`, ``path`` relative to
    ``_staging/<stage>/``), ``order`` its input order."""

    stage: str
    order: int
    rows: pa.Table


@dataclasses.dataclass
class BatchCommit:
    """What :func:`commit_pieces` did (``tails``: the grown newest segments, ``in_place``
    those grown in place)."""

    run_id: str
    result: CommitResult | None  # None: the batch had no records
    rows: pa.Table
    tails: list[tuple[str, int, int]]
    in_place: list[tuple[str, int, int]] = dataclasses.field(default_factory=list)

    @property
    def already_committed(self) -> bool:
        return self.result is not None and self.result.already_committed


def stream_run_id(query_id: str, batch_id: int) -> str:
    """The run id of a streaming query's micro-batch (unique per (query id, batch id), so a
    replay of the batch is the idempotent case)."""
    validate_name(query_id, "streaming query id")
    return validate_run_id(f"stream-{query_id}-{int(batch_id)}")


def commit_pieces(
    lake: LakeHandle,
    run_id: str,
    pieces: Sequence[Piece],
    *,
    config: LogConfig,
    assigned: bool,
    append: str = "true",
) -> BatchCommit:
    """Rebase, join and commit the pieces of one micro-batch (see the module docstring).

    Args:
        root: the lake.
        run_id: the batch's run id (:func:`stream_run_id`).
        pieces: every task's staged piece (order: input order of the tasks).
        config: ``segment.bytes``, ``segment.ms`` and ``index.interval.bytes`` (each
            topic's: ``config.for_topic``).
        assigned: offsets were assigned by the tasks (each piece's first offset of a
            partition is a guess: the pieces follow each other from the log end offset);
            else they are the input's and are kept.
        append: grow a partition's newest segment while under ``log.segment.bytes``:
            ``true`` in place where the files are local, else a staged copy; ``copy``
            always a staged copy; ``false`` never.
    """
    if append not in APPEND_MODES:
        raise ConfigError(f"seglake.stream.append must be one of {APPEND_MODES}, got {append!r}")
    fs, base = lake.fs, lake.base
    stages = [run_dir(base, STAGING_DIR, p.stage) for p in pieces]
    catalog = lake.catalog
    empty = BatchCommit(run_id, None, rows_table([]), [])
    committed, current = catalog.committed_or_segments(run_id)  # one catalog read
    config = topic_configs(catalog, config)  # the driver's writer may not have planned
    if committed:
        publish_pending(lake, run_id)
        _drop(fs, base, stages)
        return dataclasses.replace(empty, result=_already(catalog, run_id))
    out_dir = run_dir(base, STAGING_DIR, run_id)
    lakefs.delete_dir(fs, out_dir, root=base)  # an earlier attempt of this batch
    newest = _newest(current)
    in_place = append == "true" and appends_in_place(fs)
    growable = {
        k: t
        for k, t in newest.items()
        if append != "false" and not size_full(t["size_bytes"], config.for_topic(k[0]))
    }
    for t in growable.values():
        publish_pending(lake, t["run_id"])  # its files, if still staged
    paths = [lake_paths.safe_join(base, t["path"]) for t in growable.values()] if in_place else []
    with locked(paths) as fds:
        if fds and not unchanged(fds, growable, base):  # grown or replaced since the read
            newest = _newest(
                catalog.segments()
            )  # as they are now: no other appender can change them
        try:
            done = _write_all(
                fs, base, out_dir, pieces, stages, newest, growable, fds, config, assigned
            )
            if done is None:
                lakefs.delete_dir(fs, out_dir, root=base)
                _drop(fs, base, stages)
                return empty
            table, tails, grown = done
            copied = [newest[(t, p)] for t, p, b in tails if (t, p, b) not in grown]
            if copied:  # publishing moves the old files to _retired/ (readers of older versions)
                stage_replaced(
                    lake, run_id, pa.Table.from_pylist(copied).select(["path", "run_id"])
                )
            ends = {k: newest[k[:2]]["next_offset"] for k in tails}
            result = catalog.commit(table, run_id, contiguous=assigned, tails=tails, tail_ends=ends)
        except BaseException:
            lakefs.delete_dir(fs, out_dir, root=base)
            raise
    publish_pending(lake, run_id, table)
    _drop(fs, base, stages)
    return BatchCommit(run_id, result, table, tails, grown)


def _write_all(
    fs: pafs.FileSystem,
    base: str,
    out_dir: str,
    pieces: Sequence[Piece],
    stages: list[str],
    newest: dict[tuple[str, int], dict[str, Any]],
    growable: dict[tuple[str, int], dict[str, Any]],
    fds: dict[str, int],
    config: LogConfig,
    assigned: bool,
) -> tuple[pa.Table, list[tuple[str, int, int]], list[tuple[str, int, int]]] | None:
    """Every partition's segments: rows, grown tails, tails grown in place (None: no
    record in the batch)."""
    rows: list[dict[str, Any]] = []
    tails: list[tuple[str, int, int]] = []
    grown: list[tuple[str, int, int]] = []

    def rolling(s: Source) -> int:
        return first_batch_timestamp(fs, s.path)

    for key, sources in _plan(base, pieces, stages, newest, assigned).items():
        cfg = config.for_topic(key[0])  # the topic's segment.bytes, segment.ms ...
        interval = cfg.index_interval_bytes
        tail = newest.get(key)
        path = ""  # the newest segment's, when it takes this batch's first records
        if (
            tail is not None
            and growable.get(key, {}).get("base_offset") == tail["base_offset"]
            and not size_full(tail["size_bytes"], cfg)
        ):
            path = lake_paths.safe_join(base, tail["path"])
            sources.insert(0, source(path, 0, tail))
        groups = roll(sources, cfg, rolling)
        if path and tail is not None and len(groups[0]) > 1:  # the newest segment grows
            tails.append((*key, tail["base_offset"]))
            if path in fds:
                rows.append(grow(fs, fds[path], key, tail, groups[0], interval))
                grown.append(tails[-1])
            else:
                rows.append(_write(fs, out_dir, key, groups[0], interval))
        if path:  # grown, or nothing fits it: it stays as it is
            groups = groups[1:]
        rows.extend(_write(fs, out_dir, key, g, interval) for g in groups)
    return (rows_table(rows), tails, grown) if rows else None


def _already(catalog: Catalog, run_id: str) -> CommitResult:
    return CommitResult(False, True, catalog.version(), run_id)


def _drop(fs: pafs.FileSystem, base: str, stages: list[str]) -> None:
    for s in stages:
        lakefs.delete_dir(fs, s, root=base)


def _newest(current: pa.Table) -> dict[tuple[str, int], dict[str, Any]]:
    """Each partition's newest catalog row (of the rows ``current``)."""
    out: dict[tuple[str, int], dict[str, Any]] = {}
    if current.num_rows == 0:
        return out
    have = set(current.schema.names)
    cols = [c for c in (*PIECE_COLUMNS, "run_id") if c in have]
    for r in current.select(cols).to_pylist():
        key = (r["topic"], r["partition"])
        if key not in out or r["base_offset"] > out[key]["base_offset"]:
            out[key] = r
    return out


def _plan(
    base: str,
    pieces: Sequence[Piece],
    stages: list[str],
    newest: dict[tuple[str, int], dict[str, Any]],
    assigned: bool,
) -> dict[tuple[str, int], list[Source]]:
    """Per partition, the staged segments in log order with their final offsets."""
    found: dict[tuple[str, int], list[tuple[int, int, dict[str, Any]]]] = {}
    for i, (piece, stage) in enumerate(zip(pieces, stages, strict=True)):
        for r in piece.rows.to_pylist():
            r["path"] = lakefs.join(stage, r["path"])
            found.setdefault((r["topic"], r["partition"]), []).append((piece.order, i, r))
    plan: dict[tuple[str, int], list[Source]] = {}
    for key in sorted(found):
        leo = newest[key]["next_offset"] if key in newest else 0
        segs = sorted(found[key], key=lambda s: (s[:2], s[2]["base_offset"]))
        if not assigned:
            segs.sort(key=lambda s: s[2]["base_offset"])
        out: list[Source] = []
        nxt = leo
        for _, _, r in segs:
            n = r["next_offset"] - r["base_offset"]
            first = nxt if assigned else r["base_offset"]
            if first < nxt:
                raise OffsetOrderError(
                    f"{key[0]}-{key[1]}: input offsets {r['base_offset']}..{r['next_offset'] - 1}"
                    f" are below {nxt} (the log end offset, or another task's records of this "
                    "batch): offsets must increase and continue the lake's"
                )
            out.append(source(r["path"], first - r["base_offset"], r))
            nxt = first + n
        plan[key] = out
    return plan


def _write(
    fs: pafs.FileSystem, out_dir: str, key: tuple[str, int], group: list[Source], interval: int
) -> dict[str, Any]:
    """One staged segment from its sources: a lone source at its final offsets is moved
    with its files; else the rebased bytes, indexes rebuilt over all of them by the index
    interval rule (Kafka's LogSegment.recover), its row from the batch headers and the
    sources' rows (no record is decoded; storage/segment_join.py writes the bytes)."""
    pdir = partition_dir_name(*key)
    stem = lakefs.join(out_dir, pdir, segment_file_name(group[0].base))[: -len(LOG_SUFFIX)]
    fs.create_dir(lakefs.join(out_dir, pdir), recursive=True)
    if (
        len(group) == 1
        and group[0].delta == 0
        and group[0].row.get("index_interval_bytes") == interval
    ):
        s = group[0]  # a piece already at its final offsets: its files are the segment's
        for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX):
            lakefs.move(fs, s.path[: -len(LOG_SUFFIX)] + suffix, stem + suffix)
        move_key_index(fs, s.path[: -len(LOG_SUFFIX)] + KEY_INDEX_SUFFIX, stem + KEY_INDEX_SUFFIX)
        row = {c: s.row[c] for c in PIECE_COLUMNS if c not in ("path", "topic", "partition")}
        return {
            **row,
            "topic": key[0],
            "partition": key[1],
            "path": f"{pdir}/{stem.rsplit('/', 1)[1]}{LOG_SUFFIX}",
        }
    joined = write_joined(fs, stem, group, group[0].base, interval)
    return joined_row(
        key,
        group,
        records=joined.records,
        max_timestamp=joined.max_timestamp,
        size=joined.size,
        indexes=joined.indexes,
        codec=joined.codec,
        interval=interval,
    )
