"""``seglake read``: records of a partition directory from an offset, as a consumer
fetches them."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from seglake.cli.consume import record_dict
from seglake.cli.jobargs import Parser, non_negative
from seglake.cli.targets import open_log, report_skipped, skip_corrupt
from seglake.errors import SegmentNotFoundError
from seglake.location import LakeLocation

if TYPE_CHECKING:
    from seglake.storage.log import PartitionLog


def add_parser(sub: argparse._SubParsersAction[Parser]) -> None:
    """``seglake read``: records of a partition directory from an offset."""
    r = sub.add_parser("read", help="records of a partition directory from an offset")
    r.add_argument("partition_dir", metavar="PARTITION_DIR")
    r.add_argument("--offset", type=non_negative, required=True)
    r.add_argument("--max-records", type=non_negative, default=10)
    r.add_argument("--json", action="store_true", help="one JSON object per record")
    skip_corrupt(r)


def run(args: argparse.Namespace) -> int:
    """At most ``--max-records`` records from ``--offset``, one line (or JSON) each."""
    log = open_log(args)
    if args.offset >= log.log_end_offset:
        _past_end(args.partition_dir, args.offset, log.log_start_offset, log.log_end_offset)
        return 0
    if args.offset < log.log_start_offset:  # Kafka: out of range; auto.offset.reset=earliest
        print(
            f"seglake: offset {args.offset} is below the log start offset "
            f"{log.log_start_offset} (deleted or never written): reading from "
            f"{log.log_start_offset}",
            file=sys.stderr,
        )
    for r in _records(args.partition_dir, log, args.offset, args.max_records):
        if args.json:
            print(json.dumps(record_dict(r)))
        else:
            headers = [(h["key"], h["value"]) for h in r["headers"]]
            print(
                f"offset: {r['offset']} timestamp: {r['timestamp']} key: {r['key']!r} "
                f"value: {r['value']!r} headers: {headers}"
            )
    report_skipped(log)
    return 0


def _records(root: str, log: PartitionLog, offset: int, n: int) -> Iterator[dict[str, Any]]:
    """The first ``n`` records from ``offset`` on, read as every read is
    (:func:`~seglake.lake.scan_read.log_records`: planned and read a task at a time)."""
    from seglake.lake.scan_read import log_records

    if n <= 0:
        return
    where = LakeLocation.of(root)  # the user's partition directory
    for t in log_records(where, log, offset, log.log_end_offset, expect=n):
        for r in t.slice(0, n).to_pylist():
            yield r
            n -= 1
        if n <= 0:
            return


def _past_end(path: str, offset: int, start: int, end: int) -> None:
    """Kafka answers a fetch at the log end offset with nothing, beyond it with
    OFFSET_OUT_OF_RANGE."""
    if offset > end:
        raise SegmentNotFoundError(
            f"{path}: offset {offset} is out of range: the log holds offsets {start}..{end - 1} "
            f"(log end offset {end})"
        )
    print(f"seglake: offset {offset} is the log end offset: no records yet", file=sys.stderr)
