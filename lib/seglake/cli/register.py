"""``seglake register``: a broker data directory's partitions copied into a lake."""

from __future__ import annotations

import argparse

from seglake.cli.jobargs import Parser, run_id_arg
from seglake.lake.handle import LakeHandle


def add_parser(sub: argparse._SubParsersAction[Parser]) -> None:
    """``seglake register``: a broker data directory into a lake."""
    rg = sub.add_parser(
        "register",
        help="copy a broker data directory's partitions into a lake and catalog their segments",
    )
    rg.add_argument("broker_dir", metavar="BROKER_DATA_DIR")
    rg.add_argument("--root", required=True, metavar="LAKE")
    rg.add_argument("--topics", nargs="+", default=None)
    rg.add_argument("--run-id", type=run_id_arg, default=None)
    rg.add_argument(
        "--kafka-truncate",
        action="store_true",
        help="Kafka's recovery rule for damaged copies: delete everything after a damaged "
        "batch (default: cut out only the damaged batch, keep the rest and report the gap)",
    )
    rg.add_argument(
        "--include-internal",
        action="store_true",
        help="also copy Kafka's internal topics (__consumer_offsets, __transaction_state, "
        "__share_group_state) and the metadata log __cluster_metadata (default: left out)",
    )
    rg.add_argument(
        "--metadata-dir",
        default=None,
        help="the broker's metadata.log.dir, where topic configs are read from "
        "(default: BROKER_DATA_DIR)",
    )


def run(args: argparse.Namespace) -> int:
    from seglake.lake.register import register

    print(
        register(
            LakeHandle.open(args.root),  # main's handle (itself), or a root
            args.broker_dir,
            topics=args.topics,
            run_id=args.run_id,
            kafka_truncate=args.kafka_truncate,
            include_internal=args.include_internal,
            metadata_dir=args.metadata_dir,
        )
    )
    return 0
