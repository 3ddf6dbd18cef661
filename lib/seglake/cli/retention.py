"""``seglake retention``: Kafka's delete rules, given explicitly (the ``retention`` job's
arguments, without Spark)."""

from __future__ import annotations

import argparse

from seglake.cli.jobargs import (
    Parser,
    conf_arguments,
    retention_arguments,
    retention_from_args,
    target_argument,
)
from seglake.lake.handle import LakeHandle


def add_parser(sub: argparse._SubParsersAction[Parser]) -> None:
    """``seglake retention``: Kafka's delete rules, given explicitly."""
    rt = sub.add_parser(
        "retention",
        help="delete segments by exactly the rules given (log.retention.ms/.bytes, log start "
        "offsets): catalog first, files once older than file.delete.delay.ms",
    )
    target_argument(rt, "root")
    retention_arguments(rt)
    conf_arguments(rt)


def run(args: argparse.Namespace) -> int:
    from seglake.lake.retention import apply_retention

    rules, options = retention_from_args(args)
    print(apply_retention(LakeHandle.open(args.root), rules, options))  # main's handle
    return 0
