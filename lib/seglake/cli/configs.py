"""``seglake config``: topic configuration overrides kept in the lake (Kafka's
``kafka-configs --entity-type topics --entity-name T --alter --add-config k=v`` /
``--delete-config k`` / ``--describe``)."""

from __future__ import annotations

import argparse

from seglake.cli.jobargs import Parser, run_id_arg
from seglake.config import parse_overrides
from seglake.errors import SegmentNotFoundError
from seglake.lake.handle import LakeHandle
from seglake.lake.topic_config import resolve
from seglake.lake.topic_store import alter_config, check_topic, overrides_for, stored_configs


def add_parser(sub: argparse._SubParsersAction[Parser]) -> None:
    c = sub.add_parser(
        "config",
        help="show or change topic configs kept in the lake (cleanup.policy, segment.bytes...)",
        description="Topic-level settings stored in the catalog (one commit per change); "
        "every job that writes, compacts or deletes a topic applies them over its broker-level "
        "settings (a job's --conf by the topic-level name still wins). Without --set or "
        "--delete: print the overrides and the values in force.",
    )
    c.add_argument("root", metavar="LAKE")
    c.add_argument("--topic", default=None, help="the topic (default: every topic's defaults)")
    c.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="set (repeatable)"
    )
    c.add_argument(
        "--delete", action="append", default=[], metavar="KEY", help="remove an override"
    )
    c.add_argument(
        "--create",
        action="store_true",
        help="configure a topic the lake does not have yet (default: refused, a typo)",
    )
    c.add_argument("--run-id", type=run_id_arg, default=None)


def run(args: argparse.Namespace) -> int:
    catalog = LakeHandle.open(args.root).catalog  # main's handle (itself), or a root
    if not catalog.exists():  # --set would create a lake at a mistyped path
        raise SegmentNotFoundError(f"{args.root}: not a lake (no _catalog/ in it)")
    if args.topic is not None and not args.create:
        check_topic(catalog, args.topic)  # a typo: no commit, no defaults shown for it
    if args.set or args.delete:
        result = alter_config(
            catalog,
            args.topic,
            set_=parse_overrides(args.set),
            delete=args.delete,
            run_id=args.run_id,
            create=args.create,
        )
        print(f"config of {args.topic or 'every topic'}: catalog version {result.version}")
    stored = stored_configs(catalog)
    own = stored.get(args.topic, {})
    given = overrides_for(stored, args.topic) if args.topic else own
    effective = resolve(given).topic_values(given)
    for name, value in effective.items():
        source = (
            "override"
            if name in own
            else ("lake default" if name in stored.get(None, {}) else "default")
        )
        print(f"{name}={value}  ({source})")
    return 0
