"""``seglake serve LAKE``: a Kafka broker (``seglake.kafka_broker``, the one ``make kafka``
runs) serving a COPY of a lake's partitions, for Kafka clients (consumers, Spark's
``format("kafka")``, kcat) that cannot read a lake:

    1. a new broker data directory (``--data DIR``; default a temporary one, deleted
       after the stop); refused if it holds anything, is inside the lake or holds it
    2. the broker started, each topic created with its partitions and the lake's topic
       configs (``retention.ms`` / ``retention.bytes`` -1 unless the lake sets them:
       Kafka's 7-day default would delete the copy's older records), the broker stopped
    3. each partition's committed segments at one catalog version copied over the
       broker's empty ones (``.log``, ``.index``, ``.timeindex``, ``.txnindex``: the
       bytes Kafka writes, which it loads as its own)
    4. the broker started again until Ctrl-C or SIGTERM (a clean shutdown)

Safety rules: the broker only ever writes its copy. Records produced to it, its
cleaner's compaction and its retention change the copy, never the lake (bring them in
with ``register`` of the stopped broker's directory into another lake, or ``ingest``).
Never point a broker's ``log.dirs`` at a lake's own partition directories: a broker
that writes there (appends, roll, recovery, retention, cleaning) changes files the
catalog describes, which the lake then reports as damaged or lost.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from seglake.errors import ConfigError, SegmentNotFoundError
from seglake.kafka_broker import BrokerError, KafkaBroker
from seglake.lake.handle import LakeHandle
from seglake.lake.snapshot import Snapshot
from seglake.lake.topic_store import overrides_for, stored_configs
from seglake.loopback import run_in_foreground
from seglake.storage.naming import SEGMENT_SUFFIXES, SNAPSHOT_SUFFIX, segment_file_name

if TYPE_CHECKING:
    from seglake.cli.jobargs import Parser

__all__ = ["add_parser", "prepare", "run"]

# Kafka's defaults delete by time (7 days) and would empty a copy of older records
KEEP_ALL = {"retention.ms": "-1", "retention.bytes": "-1"}


def add_parser(sub: argparse._SubParsersAction[Parser]) -> None:
    s = sub.add_parser(
        "serve",
        help="serve a copy of a lake from a local Kafka broker until Ctrl-C",
        description="Start a Kafka broker on 127.0.0.1 over a COPY of the lake's committed "
        "segments (the lake is only read; what clients write goes to the copy).",
    )
    s.add_argument("root", metavar="LAKE")
    s.add_argument(
        "--data",
        default=None,
        metavar="DIR",
        help="the broker's data directory, new or empty (default: a temporary one, "
        "deleted after the stop)",
    )
    s.add_argument("--topics", nargs="+", default=None, help="only these topics")


def _check_data_dir(data: Path, root: LakeHandle) -> None:
    """A new or empty directory, apart from the lake (a broker never writes a lake)."""
    if data.exists() and (not data.is_dir() or any(data.iterdir())):
        raise ConfigError(f"{data}: not empty; serve writes a new broker directory")
    if root.is_local:
        lake = Path(root.base).resolve()
        if data.is_relative_to(lake) or lake.is_relative_to(data):
            raise ConfigError(
                f"{data}: inside the lake {root} or holding it; a broker's directory must be "
                "apart from the lake (it serves a copy)"
            )


def prepare(root: LakeHandle, broker: KafkaBroker, topics: list[str] | None = None) -> int:
    """The lake's topics created on ``broker`` (started here, stopped after) and its
    committed segments copied into their partition directories; the catalog version
    copied."""
    catalog = root.catalog
    if not catalog.exists():
        raise SegmentNotFoundError(f"{root}: not a lake (no _catalog/ in it)")
    snap = Snapshot.read(root, topics)
    counts: dict[str, int] = {}
    for t, p in snap.partitions:
        counts[t] = max(counts.get(t, 0), p + 1)
    if topics is not None:
        missing = sorted(set(topics) - set(counts))
        if missing:
            raise SegmentNotFoundError(f"{root}: no segment of topic(s) {missing} to serve")
    if not counts:
        raise SegmentNotFoundError(f"{root}: no segment to serve")
    stored = stored_configs(catalog, version=snap.version)
    broker.start()
    try:
        for t, n in sorted(counts.items()):
            broker.create_topic(t, n, {**KEEP_ALL, **overrides_for(stored, t)})
    finally:
        broker.stop()
    for tp in snap.partitions:
        _swap_in(snap, tp, broker.partition_dir(*tp))
    return snap.version


def _swap_in(snap: Snapshot, tp: tuple[str, int], target: Path) -> None:
    """The broker's (empty) segments of one partition replaced by the lake's."""
    for f in target.iterdir():
        if f.suffix in (*SEGMENT_SUFFIXES, SNAPSHOT_SUFFIX):
            f.unlink()
    for seg in snap.log(tp).segments:
        for suffix in SEGMENT_SUFFIXES:
            data = seg.files.index_file(suffix) if suffix != ".log" else seg.log_bytes()
            if data is not None:
                (target / segment_file_name(seg.base_offset, suffix)).write_bytes(data)


def run(args: argparse.Namespace) -> int:
    root = LakeHandle.open(args.root)  # main's handle (itself), or a root given directly
    temporary = args.data is None
    data = Path(args.data or tempfile.mkdtemp(prefix="seglake-serve-")).resolve()
    try:
        _check_data_dir(data, root)
        broker = KafkaBroker(data)
        try:
            version = prepare(root, broker, args.topics)
        except BrokerError as exc:  # a config Kafka refuses, a broker that did not start
            raise ConfigError(f"serve {root}: {str(exc).splitlines()[0]}") from None
        print(f"serving a copy of {root} at catalog version {version} (the lake is not written)")
        return run_in_foreground("serve", broker, BrokerError, broker.banner)
    finally:
        if temporary:
            shutil.rmtree(data, ignore_errors=True)
