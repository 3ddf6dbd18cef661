"""``seglake recover``: a partition directory (Kafka's recovery) or a lake (its files and
its catalog)."""

from __future__ import annotations

import argparse
import json
import re

from seglake.cli.jobargs import (
    Parser,
    non_negative,
    recover_options,
    run_id_arg,
    target_argument,
    topics_argument,
)
from seglake.cli.targets import no_segments
from seglake.errors import ConfigError, InvalidTopicError
from seglake.lake.handle import LakeHandle
from seglake.storage.index_builder import DEFAULT_INTERVAL

_SEGMENT_FILE = re.compile(r"\d{20}\.")  # a segment's files, leftovers (.swap, .deleted) too


def add_parser(sub: argparse._SubParsersAction[Parser]) -> None:
    """``seglake recover``: a partition directory or a lake."""
    rc = sub.add_parser(
        "recover",
        help="truncate corrupt tails, rebuild indexes, finish "
        "leftover .swap/.deleted/.cleaned files; for a lake "
        "(a directory with _catalog) also fix the catalog",
    )
    target_argument(rc, "target", "PARTITION_DIR|LAKE")
    rc.add_argument("--dry-run", action="store_true", help="report, change nothing")
    rc.add_argument(
        "--force", action="store_true", help="rebuild valid indexes too (Kafka always rebuilds)"
    )
    rc.add_argument(
        "--index-interval-bytes",
        type=non_negative,
        default=DEFAULT_INTERVAL,
        help="for rebuilt indexes (a lake uses each segment's recorded value first)",
    )
    rc.add_argument(
        "--kafka-truncate",
        action="store_true",
        help="lake: Kafka's rule, truncate at a damaged batch and delete the later segments "
        "(default: cut out only the damaged batch; a partition directory always uses Kafka's)",
    )
    topics_argument(rc)  # the recover job's names, for a lake
    rc.add_argument("--run-id", type=run_id_arg, default=None, help="a lake's run id")
    rc.add_argument("--json", action="store_true", help="one JSON object per partition")


def run(args: argparse.Namespace) -> int:
    from seglake import fs as lakefs
    from seglake.lake.recovery import recover_lake
    from seglake.lake.staging import lake_of
    from seglake.lake_paths import CATALOG_DIR
    from seglake.storage.naming import parse_partition_dir
    from seglake.storage.recovery import recover_partition

    target = LakeHandle.open(args.target)  # a lake or a partition directory
    fs, path = target.fs, target.base
    if lakefs.exists(fs, lakefs.join(path, CATALOG_DIR)):
        rep = recover_lake(target, recover_options(args, None))
        if args.json:
            for p in rep.partitions:
                print(json.dumps(p.to_dict()))
        else:
            print(rep)
        return 0
    for flag, value in (("--topics", args.topics), ("--run-id", args.run_id)):
        if value is not None:  # a lake's: a partition directory is one topic's, no run
            raise ConfigError(f"{flag}: recovers a lake's partitions; {args.target} is not a lake")
    lake = lake_of(args.target)
    if lake is not None:  # Kafka's rule there would leave catalog rows without files
        raise ConfigError(
            f"{args.target}: a partition directory of the lake {lake[0]}: recover the lake "
            f"(seglake recover {lake[0]}), which fixes its catalog too"
        )
    names = lakefs.listdir(fs, path)
    if not any(_SEGMENT_FILE.match(n) for n in names):  # nor a leftover .swap/.deleted
        try:
            parse_partition_dir(path.rstrip("/").rsplit("/", 1)[-1])
        except InvalidTopicError:
            names.append("")  # not <topic>-<n> either: not what recover is for
        if names:
            raise no_segments(args.target, f" and no {CATALOG_DIR}/ (not a partition or a lake)")
    part = recover_partition(
        args.target, dry_run=args.dry_run, force=args.force, interval=args.index_interval_bytes
    )
    print(json.dumps(part.to_dict()) if args.json else part)
    return 0
