"""``seglake index build LAKE [TOPIC ...]``: the ``.keyindex`` of every committed segment
that has no usable one, written beside its ``.log`` (a lake made before the key index;
idempotent, no catalog change: :mod:`seglake.lake.key_build`). One line per file written,
then a summary."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from seglake.cli.targets import check_lake

if TYPE_CHECKING:
    from seglake.cli.jobargs import Parser

__all__ = ["add_parser", "run"]


def add_parser(sub: argparse._SubParsersAction[Parser]) -> None:
    i = sub.add_parser("index", help="the lake's key indexes: build the missing ones")
    actions = i.add_subparsers(dest="action", required=True)
    b = actions.add_parser(
        "build", help="write a .keyindex for every committed segment without a usable one"
    )
    b.add_argument("root", metavar="LAKE")
    b.add_argument("topics", nargs="*", metavar="TOPIC", help="default: every topic")


def run(args: argparse.Namespace) -> int:
    from seglake.lake.handle import LakeHandle
    from seglake.lake.key_build import build_key_indexes

    check_lake(args.root)
    for line in build_key_indexes(LakeHandle.open(args.root), args.topics).lines():
        print(line)
    return 0
