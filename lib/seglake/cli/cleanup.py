"""``seglake cleanup``: staging of finished and abandoned runs."""

from __future__ import annotations

import argparse

from seglake.cli.jobargs import Parser, seconds
from seglake.cli.targets import check_lake
from seglake.lake.handle import LakeHandle


def add_parser(sub: argparse._SubParsersAction[Parser]) -> None:
    """``seglake cleanup``: staging of finished and abandoned runs."""
    c = sub.add_parser(
        "cleanup", help="finish committed runs' moves; delete files of runs that never committed"
    )
    c.add_argument("root", metavar="LAKE")
    c.add_argument(
        "--older-than",
        type=seconds,
        default=3600.0,
        metavar="SECONDS",
        help="keep staging of uncommitted runs touched more recently: they may "
        "still be running (default 3600; 0 removes every uncommitted run)",
    )
    c.add_argument("--dry-run", action="store_true")


def run(args: argparse.Namespace) -> int:
    from seglake.lake.staging import cleanup

    lake = LakeHandle.open(args.root)  # main's handle (itself), or a root given directly
    check_lake(lake, staging=True)
    print(cleanup(lake, older_than_s=args.older_than, dry_run=args.dry_run))
    return 0
