"""``seglake dump``: kafka-dump-log.sh (Kafka's ``DumpLogSegments``) for .log, .index,
.timeindex, .txnindex and producer .snapshot files.

Text output is Kafka's, line for line (tests diff it against Kafka 4.1's tool); what Kafka
reports on stderr (non-consecutive offsets, index entries that disagree with the log) goes
to stderr. ``--json`` prints one object per line: per batch for a ``.log`` (with
``records`` under ``--deep-iteration``), per entry for an index or snapshot.
"""

from __future__ import annotations

import argparse
import sys
from typing import IO

from seglake.cli.dump.indexes import dump_index
from seglake.cli.dump.log import DECODERS, dump_log
from seglake.cli.dump.snapshot import dump_snapshot
from seglake.cli.jobargs import Parser, non_negative
from seglake.storage.naming import (
    CHECKPOINT_SUFFIX,
    INDEX_SUFFIX,
    KEY_INDEX_SUFFIX,
    LOG_SUFFIX,
    SNAPSHOT_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
)

__all__ = ["DUMPED_SUFFIXES", "add_parser", "dump", "run"]

DUMPED_SUFFIXES = (
    LOG_SUFFIX,
    CHECKPOINT_SUFFIX,
    INDEX_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    SNAPSHOT_SUFFIX,
)


def dump(
    files: list[str],
    *,
    deep: bool = False,
    print_data: bool = False,
    as_json: bool = False,
    sanity: bool = False,
    verify_only: bool = False,
    max_bytes: int | None = None,
    out: IO[str] | None = None,
    err: IO[str] | None = None,
    decoder: str = "string",
    skip_metadata: bool = False,
) -> int:
    """Dump each file as Kafka's ``DumpLogSegments`` does; returns 0, or 1 if any file had
    problems. ``decoder`` (a :data:`DECODERS` name) prints keys and payloads under
    ``print_data``; any other than ``string`` implies it, as in Kafka."""
    out = sys.stdout if out is None else out  # the current one, not the one at import time
    err = sys.stderr if err is None else err
    status = 0
    print_data = print_data or decoder != "string"
    for path in files:
        name = path.rsplit("/", 1)[-1]
        suffix = "." + name.rsplit(".", 1)[-1] if "." in name else ""
        if suffix == KEY_INDEX_SUFFIX:  # seglake's own file beside a segment (`dump dir/*`):
            if not as_json:  # Kafka's DumpLogSegments lines for a file it does not know
                out.write(f"Dumping {path}\n")
                err.write(f"Ignoring unknown file {path}\n")
            continue
        if suffix not in DUMPED_SUFFIXES:
            raise ValueError(f"{path}: not a .log, .index, .timeindex, .txnindex or .snapshot file")
        if not as_json:
            out.write(f"Dumping {path}\n")
        if suffix in (LOG_SUFFIX, CHECKPOINT_SUFFIX):
            status |= dump_log(
                path,
                out,
                deep=deep,
                print_data=print_data,
                as_json=as_json,
                max_bytes=max_bytes,
                err=err,
                decoder=DECODERS[decoder],
                skip_metadata=skip_metadata,
            )
        elif suffix == SNAPSHOT_SUFFIX:
            status |= dump_snapshot(path, out, as_json=as_json)
        else:
            status |= dump_index(
                path,
                suffix,
                out,
                as_json=as_json,
                sanity=sanity,
                verify_only=verify_only,
                err=err,
            )
    return status


def add_parser(sub: argparse._SubParsersAction[Parser]) -> None:
    """``seglake dump``: kafka-dump-log.sh's options."""
    d = sub.add_parser(
        "dump",
        help="print .log/.index/.timeindex/.txnindex/.snapshot files (as kafka-dump-log.sh)",
    )
    d.add_argument("files", nargs="*", metavar="FILE")
    d.add_argument(
        "--files",
        dest="file_list",
        action="append",
        default=[],
        metavar="FILE1,FILE2,...",
        help="comma-separated files, as kafka-dump-log.sh takes them",
    )
    d.add_argument("--print-data-log", action="store_true", help="print keys and values")
    d.add_argument("--deep-iteration", action="store_true", help="print every record")
    d.add_argument(
        "--index-sanity-check",
        action="store_true",
        help="check index files for sanity (Kafka's checks)",
    )
    d.add_argument(
        "--verify-index-only",
        action="store_true",
        help="check index entries against the .log beside them",
    )
    d.add_argument(
        "--max-bytes",
        type=non_negative,
        default=None,
        help="read at most this many bytes of each .log",
    )
    d.add_argument("--json", action="store_true", help="one JSON object per line")
    for name, topic in (
        ("offsets", "__consumer_offsets"),
        ("transaction-log", "__transaction_state"),
        ("cluster-metadata", "__cluster_metadata"),
    ):
        d.add_argument(
            f"--{name}-decoder", dest="decoder", action="store_const", const=name,
            help=f"decode {topic} records as Kafka does (implies --print-data-log)",
        )  # fmt: skip
    d.set_defaults(decoder="string")
    d.add_argument(
        "--skip-record-metadata",
        action="store_true",
        help="print only the records' keys and payloads, not their offsets and sizes",
    )


def run(args: argparse.Namespace) -> int:
    """``seglake dump``: ``kafka-dump-log.sh`` over the files given."""
    files = [*args.files, *(f for arg in args.file_list for f in arg.split(",") if f)]
    if not files:
        raise ValueError("dump: no file given (FILE... or --files a,b,c)")
    return dump(
        files,
        deep=args.deep_iteration,
        print_data=args.print_data_log,
        as_json=args.json,
        sanity=args.index_sanity_check,
        verify_only=args.verify_index_only,
        max_bytes=args.max_bytes,
        decoder=args.decoder,
        skip_metadata=args.skip_record_metadata,
    )
