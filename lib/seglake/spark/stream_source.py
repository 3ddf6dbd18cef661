"""``spark.readStream.format("seglake")``: a lake read as the Spark Kafka source reads a
topic, micro-batch by micro-batch.

    offsets    the Kafka source's JSON: ``{"orders": {"0": 123, "1": 80}}`` (next offset
               to read per partition), so a checkpoint reads like a Kafka one
    initial    ``startingOffsets`` (``latest`` by default, ``earliest``, JSON with -2/-1),
               ``startingTimestamp`` / ``startingOffsetsByTimestamp``: read_options.Bound
    latest     each subscribed partition's log end offset in the catalog (new topics and
               partitions join from their log start, as Kafka's source adds them), cut
               by ``maxOffsetsPerTrigger`` (Kafka's rateLimit: each partition's share of
               N by its lag, floored), held back by ``minOffsetsPerTrigger`` until
               ``maxTriggerDelay`` (Kafka's delayBatch: not a query's first trigger;
               never with ``Trigger.AvailableNow``, which stops at the log ends seen
               when the query started)
    batch      at most ONE catalog read per micro-batch: latestOffset reads the catalog
               (none when its version is the one kept) and keeps that version (a
               :class:`~seglake.lake.snapshot.Snapshot`); partitions(start, end) for the end it
               returned plans from the same version (a batch replayed after a restart
               reads the catalog once); a Scan of its segments between the two offsets
               (the batch data source's), packed into tasks as Spark packs a file
               stream's files (seglake.lake.packing.pack: about the session's parallelism, at
               most 4 splitBytes = maxPartitionBytes' 128 MiB each: a Python task costs
               ~0.07 CPU s to start, paid again every micro-batch), each task's splits
               read and decoded in groups of 8 MiB (iter_splits: its memory); a
               start offset below the partition's log start (retention, compaction) is
               Kafka's data loss: an error with ``failOnDataLoss=true`` (default), else
               the batch starts at the log start
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)

from seglake.errors import ConfigError, DataLossError, SeglakeError
from seglake.lake.scan import resume_offset
from seglake.lake.snapshot import Snapshot
from seglake.spark.datasource import SeglakeReader
from seglake.spark.read_options import ReadOptions, TopicPartition, int_option, parse_options
from seglake.spark.read_plan import scan, subscribed
from seglake.spark.time_strings import duration_ms
from seglake.spark.worker_errors import one_line_errors

Offsets = dict[str, dict[str, int]]  # the Kafka source's JSON offsets


@dataclasses.dataclass(frozen=True)
class StreamLimits:
    """``maxOffsetsPerTrigger``, ``minOffsetsPerTrigger``, ``maxTriggerDelay`` (ms)."""

    max_offsets: int | None = None
    min_offsets: int | None = None
    max_delay_ms: int = 15 * 60 * 1000

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> StreamLimits:
        opts = {k.lower(): v for k, v in options.items()}
        mx, mn = opts.get("maxoffsetspertrigger"), opts.get("minoffsetspertrigger")
        delay = opts.get("maxtriggerdelay")
        ms = cls.max_delay_ms if delay is None else duration_ms("maxTriggerDelay", delay)
        limits = cls(
            None if mx is None else int_option("maxOffsetsPerTrigger", mx, minimum=1),
            None if mn is None else int_option("minOffsetsPerTrigger", mn, minimum=1),
            ms,
        )
        low, high = limits.min_offsets, limits.max_offsets
        if low is not None and high is not None and low > high:  # Spark's validateStreamOptions
            raise ConfigError(
                f"minOffsetsPerTrigger={low} is above maxOffsetsPerTrigger={high}: a "
                "micro-batch could never start (Spark's Kafka source refuses it too)"
            )
        return limits


def to_json(offsets: Mapping[TopicPartition, int]) -> Offsets:
    """``{(topic, p): o}`` -> the Kafka source's ``{"topic": {"p": o}}``."""
    out: Offsets = {}
    for (t, p), o in sorted(offsets.items()):
        out.setdefault(t, {})[str(p)] = int(o)
    return out


def from_json(offsets: Mapping[str, Mapping[str, int]]) -> dict[TopicPartition, int]:
    return {(t, int(p)): int(o) for t, ps in offsets.items() for p, o in ps.items()}


def rate_limit(
    start: Mapping[TopicPartition, int], end: Mapping[TopicPartition, int], limit: int
) -> dict[TopicPartition, int]:
    """``end`` cut to about ``limit`` offsets in all, as Spark's
    KafkaMicroBatchStream.rateLimit cuts it: each partition with ``size = end - start >
    0`` gets ``prorate = limit * (size / total)`` (doubles, as Java's), floored, or
    ceiled when below 1 (small partitions are not starved: the sum may pass ``limit``);
    never past its end. 3 partitions of 1000 at limit 500: 166 each, 498 a batch."""
    sizes = {tp: e - start[tp] for tp, e in end.items() if tp in start and e - start[tp] > 0}
    total = float(sum(sizes.values()))
    if total < 1:
        return dict(end)
    out: dict[TopicPartition, int] = {}
    for tp, e in end.items():
        if tp not in sizes:
            out[tp] = e
            continue
        prorate = limit * (sizes[tp] / total)
        out[tp] = min(e, start[tp] + (math.ceil(prorate) if prorate < 1 else math.floor(prorate)))
    return out


@one_line_errors
class SeglakeStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """The source; offsets and planning on the driver, ``read`` in the tasks.

    Bad options are raised by the first method Spark calls, not by ``__init__``:
    pyspark's stream runner reports an error of the constructor as an
    ``UnboundLocalError`` of its own (its ``finally`` stops a reader never made)."""

    def __init__(
        self, options: Mapping[str, str], bytes_accumulator: Any = None, parallelism: int = 0
    ) -> None:
        self.error: SeglakeError | None = None
        try:
            self.opts: ReadOptions = parse_options(options, stream=True)
            self.limits = StreamLimits.parse(options)
        except SeglakeError as exc:
            self.error = exc  # no opts, limits, reader: __getattr__ raises it
            return
        self.reader = SeglakeReader(self.opts, bytes_accumulator, parallelism)
        self.target: dict[TopicPartition, int] | None = None  # Trigger.AvailableNow
        self.clock: Callable[[], float] = time.monotonic  # seconds (tests set it)
        self.last_trigger: float | None = None  # minOffsetsPerTrigger: clock() let through
        self.snapshot: Snapshot | None = None  # the catalog version read last
        self.planned: tuple[Offsets, Snapshot] | None = None  # latestOffset's end, its version

    def __getattr__(self, name: str) -> Any:
        """Only for attributes ``__init__`` did not set: its options' error."""
        error = self.__dict__.get("error")
        if error is not None:
            raise error
        raise AttributeError(name)

    # -- offsets (driver) -------------------------------------------------------------
    def _read_catalog(self, strict: bool = False) -> Snapshot:
        """The newest catalog version's subscribed partitions (kept as ``snapshot``; the
        kept one again while the version is the same: a micro-batch of an unchanged lake
        opens the catalog's log and reads no rows)."""
        catalog = self.opts.root.catalog
        if not catalog.exists():
            if strict and (self.opts.topics or self.opts.assign):
                raise ConfigError(f"{self.opts.root}: no lake (no catalog) there")
            self.snapshot = Snapshot(self.opts.root.location, -1, {})
            return self.snapshot
        version = catalog.version()
        if not strict and self.snapshot is not None and self.snapshot.version == version:
            return self.snapshot  # the lake is as it was: its rows and logs are these
        self.snapshot = subscribed(self.opts, version=version, strict=strict)
        return self.snapshot

    def initialOffset(self) -> Offsets:
        snap = self._read_catalog(strict=True)
        return to_json(
            {
                tp: self.opts.starting.resolve(
                    tp, snap.log(tp), fail_on_data_loss=self.opts.fail_on_data_loss
                )
                for tp in snap.partitions
            }
        )

    def prepareForTriggerAvailableNow(self) -> None:
        self.target = self._read_catalog().ends

    def reportLatestOffset(self) -> Offsets:
        """The log ends of the version latestOffset just read (Spark asks right after it)."""
        return to_json((self.snapshot or self._read_catalog()).ends)

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.limits.max_offsets is not None:
            return ReadMaxRows(self.limits.max_offsets)
        if self.limits.min_offsets is not None:
            return ReadMinRows(self.limits.min_offsets)
        return ReadAllAvailable()

    def latestOffset(self, start: Offsets, limit: ReadLimit) -> Offsets:
        begin = from_json(start)
        snap = self._read_catalog()
        ends, starts = snap.ends, snap.starts
        if self.target is not None:  # Trigger.AvailableNow: nothing past the first look
            ends = {tp: min(e, self.target.get(tp, starts[tp])) for tp, e in ends.items()}
        for tp, o in begin.items():  # partitions gone from the catalog stay where they were
            ends.setdefault(tp, o)
        # where each partition is read from: new ones from their log start, as Kafka's
        first = {tp: begin.get(tp, starts.get(tp, e)) for tp, e in ends.items()}
        ends = {tp: max(e, first[tp]) for tp, e in ends.items()}
        if self._hold_back(begin, ends, limit):
            return start
        if not isinstance(limit, ReadAllAvailable) and self.limits.max_offsets is not None:
            ends = rate_limit(first, ends, self.limits.max_offsets)
        self.planned = (to_json(ends), snap)
        return self.planned[0]

    def _hold_back(
        self, begin: dict[TopicPartition, int], ends: dict[TopicPartition, int], limit: ReadLimit
    ) -> bool:
        """Skip this trigger (Kafka's delayBatch): ``maxTriggerDelay`` not over since the
        last trigger that was let through and fewer than ``minOffsetsPerTrigger`` new
        offsets (counted as Kafka counts them: a partition the start offsets lack from
        0). As Kafka's, the query's first trigger is let through, and so is any
        trigger once the delay is over (which restarts it). Not with
        Trigger.AvailableNow or ReadAllAvailable: such a query must end."""
        if self.target is not None or self.limits.min_offsets is None:
            return False
        if isinstance(limit, ReadAllAvailable):
            return False
        now, last = self.clock(), self.last_trigger
        waiting = last is not None and (now - last) * 1000 < self.limits.max_delay_ms
        new = sum(e - begin.get(tp, 0) for tp, e in ends.items())
        if waiting and new < self.limits.min_offsets:
            return True
        self.last_trigger = now
        return False

    # -- a micro-batch (driver plans, tasks read) -------------------------------------
    def partitions(self, start: Offsets, end: Offsets) -> list[InputPartition]:
        begin, stop = from_json(start), from_json(end)
        planned = self.planned
        snap = planned[1] if planned and planned[0] == end else self._read_catalog()
        ranges: dict[TopicPartition, tuple[int, int]] = {}
        for tp, hi in sorted(stop.items()):
            if tp not in snap.rows:
                continue
            log = snap.log(tp)
            lo = begin.get(tp, log.log_start_offset)
            lo = resume_offset(
                log,
                tp,
                lo,
                fail_on_data_loss=self.opts.fail_on_data_loss,
                where=str(self.opts.root),
            )
            if lo < hi:
                ranges[tp] = (lo, hi)
        if not ranges:
            return []
        return self.reader.packed(scan(self.opts, snap, ranges).plan())

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """A task's splits (the batch data source's read)."""
        yield from self.reader.read(partition)

    def commit(self, end: Offsets) -> None:
        """Nothing to release: the lake keeps what retention keeps."""


__all__ = [
    "DataLossError",
    "SeglakeStreamReader",
    "Snapshot",
    "StreamLimits",
    "from_json",
    "rate_limit",
    "to_json",
]
