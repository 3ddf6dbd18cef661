"""``seglake offset-for-time``: Kafka's ``offsetsForTimes`` on one partition directory."""

from __future__ import annotations

import argparse
import json

from seglake.cli.jobargs import Parser
from seglake.cli.targets import open_log, report_skipped, skip_corrupt


def add_parser(sub: argparse._SubParsersAction[Parser]) -> None:
    """``seglake offset-for-time``: one partition directory, one timestamp."""
    o = sub.add_parser(
        "offset-for-time", help="Kafka's offsetsForTimes for one partition directory"
    )
    o.add_argument("partition_dir", metavar="PARTITION_DIR")
    o.add_argument(
        "timestamp",
        metavar="TIMESTAMP",
        help="epoch ms or ISO-8601, or -2 earliest, -1 latest, -3 max timestamp",
    )
    skip_corrupt(o)


def run(args: argparse.Namespace) -> int:
    """The first offset whose timestamp is >= the time given, as JSON."""
    from seglake.times import to_millis

    ts = to_millis(args.timestamp, allow_special=True)
    log = open_log(args)
    found = log.offsets_for_times(ts)
    report_skipped(log)
    print(
        json.dumps(
            {"offset": None}
            if found is None
            else {"offset": found.offset, "timestamp": found.timestamp}
        )
    )
    return 0
