"""``seglake offsets``: the lake's ``kafka-get-offsets.sh`` (Kafka's ``GetOffsetShell``).

Prints ``TOPIC:PARTITION:OFFSET`` for every partition the filters select, sorted as
GetOffsetShell sorts them (by the string ``<topic>-<partition>``); a partition with no
answer (no record at or after the time) is left out, as Kafka leaves out its
``UNKNOWN_OFFSET``. Filters as GetOffsetShell's: ``--topic`` a regex matching the whole
name (``,`` meaning ``|``), ``--partitions`` a comma list of ids, or ``--topic-partitions``
rules ``REGEX[:N | :N-M | :N- | :-M]`` (M exclusive). ``--time``: ``-1``/``latest`` (the
log end offset), ``-2``/``earliest`` (the log start offset), ``-3``/``max-timestamp``, or
a time (epoch ms or ISO-8601, the rule of :func:`seglake.times.to_millis`): the first
offset whose timestamp is >= it (``offsetsForTimes``).
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from seglake.cli.targets import check_lake
from seglake.errors import ConfigError, SegmentNotFoundError
from seglake.format import INT32_MAX
from seglake.lake.handle import LakeHandle
from seglake.location import Root
from seglake.storage.naming import INTERNAL_TOPICS

if TYPE_CHECKING:
    from seglake.cli.jobargs import Parser

__all__ = ["add_parser", "get_offsets", "parse_time", "partition_filter", "run"]

# GetOffsetShell's TOPIC_PARTITION_PATTERN: topic regex, then a partition, a range or none
_RULE = re.compile(r"([^:,]*)(?::(?:([0-9]*)|(?:([0-9]*)-([0-9]*))))?")
Filter = Callable[[str, int], bool]


def add_parser(sub: argparse._SubParsersAction[Parser]) -> None:
    o = sub.add_parser(
        "offsets",
        help="TOPIC:PARTITION:OFFSET of every partition for a time, like kafka-get-offsets.sh",
    )
    o.add_argument("root", metavar="LAKE")
    o.add_argument(
        "--topic", default=None, help="a regex matching whole topic names (default: every topic)"
    )
    o.add_argument("--partitions", default=None, help="comma-separated partition ids")
    o.add_argument(
        "--topic-partitions",
        default=None,
        metavar="topic1:1,topic2:0-3,topic3,topic4:5-,topic5:-3",
        help="topic regex and partition (N, N-M with M exclusive, N-, -M) rules, comma-separated",
    )
    o.add_argument(
        "--exclude-internal-topics",
        action="store_true",
        help="leave out Kafka's internal topics (" + ", ".join(sorted(INTERNAL_TOPICS)) + ")",
    )
    o.add_argument(
        "--time",
        default="latest",
        help="-1 or latest, -2 or earliest, -3 or max-timestamp, or epoch ms / ISO-8601 "
        "(the first offset with timestamp >= it); default latest",
    )


def parse_time(text: str) -> int:
    """``--time``: Kafka's names and -1/-2/-3, else a time: ``to_millis``'s rule (its
    ``NAMED_TIMES`` hold GetOffsetShell's ``max-timestamp`` too)."""
    from seglake.times import to_millis

    return to_millis(text, allow_special=True)


def _topic_regex(raw: str) -> re.Pattern[str]:
    """Kafka's ``TopicFilter``: trimmed, ``,`` -> ``|``, blanks and outer quotes removed."""
    regex = re.sub(r"[\"']+$", "", re.sub(r"^[\"']+", "", raw.strip().replace(",", "|")))
    regex = regex.replace(" ", "")
    try:
        return re.compile(regex)
    except re.error as exc:
        raise ConfigError(f"{regex} is an invalid regex ({exc})") from None


def partition_filter(
    topic: str | None,
    partitions: str | None,
    topic_partitions: str | None,
    *,
    exclude_internal: bool = False,
) -> Filter:
    """GetOffsetShell's topic-partition filter of its options (``exclude_internal``:
    Kafka's ``Topic.isInternal`` topics left out)."""
    chosen = _partition_filter(topic, partitions, topic_partitions)
    if not exclude_internal:
        return chosen
    return lambda t, p: t not in INTERNAL_TOPICS and chosen(t, p)


def _partition_filter(
    topic: str | None, partitions: str | None, topic_partitions: str | None
) -> Filter:
    if topic_partitions is not None:
        if topic is not None or partitions is not None:
            raise ConfigError("--topic-partitions cannot be used with --topic or --partitions")
        rules = []
        for spec in topic_partitions.split(","):
            m = _RULE.fullmatch(spec)
            if m is None:
                raise ConfigError(f"--topic-partitions: invalid rule specification: {spec}")
            name, one, lo, hi = (g or None for g in m.groups())
            regex = _topic_regex(name or ".*")
            if one is not None:
                low, high = int(one), int(one) + 1
            else:
                low, high = int(lo or 0), int(hi) if hi is not None else INT32_MAX
            rules.append((regex, low, high))
        return lambda t, p: any(r.fullmatch(t) and lo <= p < hi for r, lo, hi in rules)
    regex = _topic_regex(topic if topic is not None else ".*")
    ids: set[int] = set()
    if partitions:
        try:
            ids = {int(x) for x in partitions.split(",")}
        except ValueError:
            raise ConfigError(
                "--partitions expects a comma separated list of numeric partition ids, "
                f"but received: {partitions}"
            ) from None
    return lambda t, p: regex.fullmatch(t) is not None and (not ids or p in ids)


def get_offsets(
    root: Root | LakeHandle, timestamp: int, allowed: Filter
) -> list[tuple[str, int, int]]:
    """``(topic, partition, offset)`` of every partition of the lake ``allowed`` selects,
    by ``PartitionLog.offsets_for_times`` of the snapshot's logs (those a
    :class:`~seglake.lake.scan.Scan` seeks with); partitions without an answer left out."""
    lake = LakeHandle.open(root)  # parsed once (a handle: the command's)
    from seglake.lake.snapshot import Snapshot

    check_lake(lake)
    snapshot = Snapshot.read(lake)
    chosen = sorted(
        (tp for tp in snapshot.partitions if allowed(*tp)),
        key=lambda tp: f"{tp[0]}-{tp[1]}",  # Kafka: a TreeMap by TopicPartition.toString()
    )
    if not chosen:
        raise SegmentNotFoundError(
            f"{lake}: could not match any topic-partitions with the specified filters "
            f"(the lake has {len(snapshot.partitions)} partition(s))"
        )
    out = []
    for t, p in chosen:
        found = snapshot.log((t, p)).offsets_for_times(timestamp)
        if found is not None:
            out.append((t, p, found.offset))
    return out


def format_offsets(found: Iterable[tuple[str, int, int]]) -> str:
    """GetOffsetShell's lines: ``topic:partition:offset``."""
    return "".join(f"{t}:{p}:{o}\n" for t, p, o in found)


def run(args: argparse.Namespace) -> int:
    import sys

    allowed = partition_filter(
        args.topic,
        args.partitions,
        args.topic_partitions,
        exclude_internal=args.exclude_internal_topics,
    )
    sys.stdout.write(format_offsets(get_offsets(args.root, parse_time(args.time), allowed)))
    return 0
