"""``seglake consume``: the lake's ``kafka-console-consumer`` (no Spark, no broker).

Reads a topic of a lake (the catalog's committed segments) or a broker's partition
directory and prints each record as Kafka's ``DefaultMessageFormatter`` does::

    [CreateTime:<ms>] [Partition:<p>] [Offset:<o>] [<h1>:<v1>,<h2>:<v2>|NO_HEADERS]
    [<key>] <value>                       fields joined by key.separator (tab), then
                                          line.separator (newline); null -> null.literal

Or, with ``--formatter`` a kcat format string (``kcat -f``): ``%t`` topic, ``%p``
partition, ``%o`` offset, ``%T`` timestamp (ms), ``%k``/``%s`` key/value (null: empty),
``%K``/``%S`` their lengths (-1: null), ``%R`` the value's length as a big-endian int32,
``%h`` headers ``name=value,...`` (null: ``NULL``), ``%%``; ``\\n \\r \\t``, ``\\xHH``
(hex) and ``\\NNN`` (decimal) bytes.

``--key K`` (repeatable): only records with that key (UTF-8 bytes), read through the
segments' key indexes (:func:`~seglake.lake.scan_read.log_records` ``keys``).

Defaults as Kafka's: value only, one per line. Partitions in ascending order, each from
its start offset to its end (the log end offset, or ``--to-timestamp``'s offset), read in
chunks of at most ``chunk_records`` records (ranged reads of whole batches), so memory
stays bounded whatever the partition's size. Ends with ``Processed a total of N messages``
on stderr; a closed stdout (``| head``) ends it quietly.
"""

from __future__ import annotations

import argparse
import base64
import dataclasses
import json
import os
import re
import struct
import sys
import warnings
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, BinaryIO

import pyarrow as pa

from seglake.cli.jobargs import isolation_level_arg
from seglake.cli.targets import report_skipped, skip_corrupt
from seglake.errors import ConfigError, SegmentNotFoundError
from seglake.format import LONG_MAX
from seglake.location import LakeLocation, Root
from seglake.storage.log import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, PartitionLog

if TYPE_CHECKING:
    from seglake.cli.jobargs import Parser

__all__ = ["Formatter", "add_parser", "consume", "partition_logs", "record_dict", "run"]

CHUNK_RECORDS = 1000
TIMESTAMP_TYPES = {0: "CreateTime", 1: "LogAppendTime"}
BOOL_PROPERTIES = (
    "print.timestamp",
    "print.key",
    "print.value",
    "print.partition",
    "print.offset",
    "print.headers",
)
BYTE_PROPERTIES = ("key.separator", "line.separator", "headers.separator", "null.literal")


def record_dict(r: dict[str, Any]) -> dict[str, Any]:
    """A record (internal schema) as JSON-able values: key, value and header values base64."""

    def b64(b: bytes | None) -> str | None:
        return None if b is None else base64.b64encode(b).decode("ascii")

    return {
        "offset": r["offset"],
        "timestamp": r["timestamp"],
        "timestamp_type": r["timestamp_type"],
        "key": b64(r["key"]),
        "value": b64(r["value"]),
        "headers": [{"key": h["key"], "value": b64(h["value"])} for h in r["headers"]],
    }


KCAT_TOKENS = {
    "t": "topic",
    "p": "partition",
    "o": "offset",
    "T": "timestamp (ms)",
    "k": "key",
    "K": "key length (-1: null)",
    "s": "value",
    "S": "value length (-1: null)",
    "R": "value length, big-endian int32",
    "h": "headers name=value,...",
}
_ESCAPE = re.compile(rb"\\(x[0-9a-fA-F]+|[0-9]+|.)", re.DOTALL)
_CONTROL = {b"n": b"\n", b"r": b"\r", b"t": b"\t"}


def _unescape(text: str) -> bytes:
    """kcat's escapes in a literal part: ``\\n \\r \\t``, ``\\xHH`` (hex), ``\\NNN``
    (decimal) as one byte, any other ``\\c`` as ``c``."""

    def one(m: re.Match[bytes]) -> bytes:
        e = m.group(1)
        if e[:1] == b"x":
            return bytes([int(e[1:], 16) & 0xFF])
        if e.isdigit():
            return bytes([int(e) & 0xFF])
        return _CONTROL.get(e, e)

    return _ESCAPE.sub(one, text.encode())


def parse_kcat_format(fmt: str) -> list[bytes | str]:
    """A kcat ``-f`` format string as literal byte strings and token letters."""
    parts: list[bytes | str] = []
    literal = ""
    i = 0
    while i < len(fmt):
        c = fmt[i]
        if c != "%":
            literal += c
            i += 1
            continue
        token = fmt[i + 1 : i + 2]
        if token == "%":
            literal += "%"
        elif token in KCAT_TOKENS:
            if literal:
                parts.append(_unescape(literal))
            parts.append(token)
            literal = ""
        else:
            what = f"unsupported formatter %{token}" if token else "a % at the end"
            raise ConfigError(
                f"--formatter {fmt!r}: {what} (known: %% and "
                + ", ".join(f"%{t} {d}" for t, d in KCAT_TOKENS.items())
                + ")"
            )
        i += 2
    if literal:
        parts.append(_unescape(literal))
    return parts


def _kcat_field(token: str, topic: str, partition: int, r: dict[str, Any]) -> bytes:
    """One token of a kcat format for the record ``r`` (internal schema)."""
    if token == "t":
        return topic.encode()
    if token == "p":
        return b"%d" % partition
    if token == "o":
        return b"%d" % r["offset"]
    if token == "T":
        return b"%d" % r["timestamp"]
    if token in "kK":
        key = r["key"]
        return (key or b"") if token == "k" else b"%d" % (-1 if key is None else len(key))
    value = r["value"]
    if token == "s":
        return value or b""
    if token in "SR":
        n = -1 if value is None else len(value)
        return b"%d" % n if token == "S" else struct.pack(">i", n)
    return b",".join(  # "h"
        h["key"].encode() + b"=" + (b"NULL" if h["value"] is None else h["value"])
        for h in r["headers"]
    )


@dataclasses.dataclass
class Formatter:
    """Kafka's ``DefaultMessageFormatter`` (its ``--property`` names), ``json``: one
    object per record with topic and partition (:func:`record_dict`), or a kcat format
    string (``kcat``: :func:`parse_kcat_format`'s parts)."""

    print_timestamp: bool = False
    print_key: bool = False
    print_value: bool = True
    print_partition: bool = False
    print_offset: bool = False
    print_headers: bool = False
    key_separator: bytes = b"\t"
    line_separator: bytes = b"\n"
    headers_separator: bytes = b","
    null_literal: bytes = b"null"
    json: bool = False
    kcat: list[bytes | str] | None = None

    @classmethod
    def from_properties(cls, props: list[str], kind: str = "default") -> Formatter:
        if "%" in kind:
            f = cls(kcat=parse_kcat_format(kind))
        elif kind in ("default", "json"):
            f = cls(json=kind == "json")
        else:
            raise ConfigError(
                f"--formatter {kind!r}: expected default, json or a kcat format string "
                "such as '%t [%p] at offset %o: key %k: %s\\n'"
            )
        for prop in props:
            name, sep, value = prop.partition("=")
            if not sep:
                raise ConfigError(f"--property {prop!r}: expected NAME=VALUE")
            if name in BOOL_PROPERTIES:  # Kafka: "true" (any case) is true, all else false
                setattr(f, name.replace(".", "_"), value.strip().lower() == "true")
            elif name in BYTE_PROPERTIES:
                setattr(f, name.replace(".", "_"), value.encode())
            else:
                raise ConfigError(
                    f"--property {name!r}: unknown (known: "
                    + ", ".join(BOOL_PROPERTIES + BYTE_PROPERTIES)
                    + ")"
                )
        return f

    def _bytes(self, b: bytes | None) -> bytes:
        return self.null_literal if b is None else b

    def format(self, topic: str, partition: int, t: pa.Table) -> bytes:
        """The lines of the records of ``t`` (internal record schema)."""
        rows = t.to_pylist()
        if self.kcat is not None:
            return b"".join(
                p if isinstance(p, bytes) else _kcat_field(p, topic, partition, r)
                for r in rows
                for p in self.kcat
            )
        if self.json:
            return b"".join(
                json.dumps({"topic": topic, "partition": partition, **record_dict(r)}).encode()
                + b"\n"
                for r in rows
            )
        out = []
        for r in rows:
            fields = []
            if self.print_timestamp:
                kind = TIMESTAMP_TYPES.get(r["timestamp_type"])
                fields.append(f"{kind}:{r['timestamp']}".encode() if kind else b"NO_TIMESTAMP")
            if self.print_partition:
                fields.append(b"Partition:%d" % partition)
            if self.print_offset:
                fields.append(b"Offset:%d" % r["offset"])
            if self.print_headers:
                hs = [h["key"].encode() + b":" + self._bytes(h["value"]) for h in r["headers"]]
                fields.append(self.headers_separator.join(hs) if hs else b"NO_HEADERS")
            if self.print_key:
                fields.append(self._bytes(r["key"]))
            if self.print_value:
                fields.append(self._bytes(r["value"]))
            if fields:
                out.append(self.key_separator.join(fields) + self.line_separator)
        return b"".join(out)


def partition_logs(
    target: str, topic: str, partition: int | None, *, on_corrupt: str = "raise"
) -> list[PartitionLog]:
    """The partitions to read: of a lake (``_catalog`` inside ``target``), sorted, or the
    partition directory ``target`` itself (whose name must be ``<topic>-<partition>``;
    in a lake, what its catalog holds);
    ``on_corrupt="skip"``: reads skip damaged batches (``PartitionLog.skipped``)."""
    from seglake import fs as lakefs
    from seglake.lake.handle import LakeHandle
    from seglake.lake.snapshot import Snapshot
    from seglake.lake.staging import open_partition_dir
    from seglake.lake_paths import CATALOG_DIR
    from seglake.storage.naming import parse_partition_dir, validate_topic

    validate_topic(topic)
    lake = LakeHandle.open(target)  # a lake or a partition directory
    fs, path = lake.fs, lake.base
    if lakefs.exists(fs, lakefs.join(path, CATALOG_DIR)):
        snap = Snapshot.read(lake, topic, on_corrupt=on_corrupt)
        parts = [p for _, p in snap.partitions]
        if not parts:
            raise SegmentNotFoundError(f"{target}: topic {topic!r} has no committed segments")
        if partition is not None:
            if partition not in parts:
                raise SegmentNotFoundError(
                    f"{target}: topic {topic!r} has no partition {partition} (partitions {parts})"
                )
            parts = [partition]
        return [snap.log((topic, p)) for p in parts]
    name = path.rstrip("/").rsplit("/", 1)[-1]
    log = open_partition_dir(target, on_corrupt=on_corrupt)
    got = parse_partition_dir(name)
    if got[0] != topic or (partition is not None and got[1] != partition):
        want = f"{topic}-{partition}" if partition is not None else f"{topic}-<n>"
        raise ConfigError(f"{target}: a partition directory of {got[0]}-{got[1]}, not {want}")
    return [log]


def records(
    root: Root,
    log: PartitionLog,
    start: int,
    end: int,
    *,
    read_committed: bool = False,
    chunk_records: int = CHUNK_RECORDS,
    expect: int | None = None,
    keys: list[bytes] | None = None,
) -> Iterator[pa.Table]:
    """Records with ``start <= offset < end`` in chunks of at most ``chunk_records``
    (control records left out; with ``read_committed`` also aborted transactions'): the
    read planned and read as every read is (:func:`~seglake.lake.scan_read.log_records`;
    ``expect``: about that many are wanted; ``keys``: only records with these keys,
    through the key index)."""
    from seglake.lake.scan_read import log_records

    isolation = "read_committed" if read_committed else "read_uncommitted"
    where = LakeLocation.of(root)  # a user's path: a lake or a partition directory
    for t in log_records(
        where, log, start, end, isolation_level=isolation, expect=expect, keys=keys
    ):
        for at in range(0, t.num_rows, chunk_records):
            yield t.slice(at, chunk_records)


def consume(
    root: Root,
    logs: list[PartitionLog],
    out: BinaryIO,
    formatter: Formatter,
    *,
    offset: str = "earliest",
    from_ms: int | None = None,
    to_ms: int | None = None,
    max_messages: int | None = None,
    read_committed: bool = False,
    chunk_records: int = CHUNK_RECORDS,
    keys: list[bytes] | None = None,
) -> int:
    """Write the records of ``logs`` (opened from ``root``: a lake or a partition
    directory) to ``out``; returns how many were written. Each partition from ``offset``
    (or ``from_ms``'s offset) to its end (or ``to_ms``'s): the bounds of Spark's Kafka
    source (:func:`~seglake.lake.scan.offset_bound`); ``keys``: only records whose key
    bytes are one of these (read through the segments' key indexes)."""
    from seglake.lake.scan import offset_bound

    named = {"earliest": EARLIEST_TIMESTAMP, "latest": LATEST_TIMESTAMP}
    first = named[offset] if offset in named else int(offset)
    n: int = 0
    for log in logs:
        tp = (log.topic, log.partition)
        start = offset_bound(log, tp, offset=first, timestamp=from_ms, within_log=False)
        end = offset_bound(log, tp, offset=LATEST_TIMESTAMP, timestamp=to_ms)
        if start >= end:
            continue
        left = None if max_messages is None else max_messages - n
        for t in records(
            root, log, start, end, read_committed=read_committed, chunk_records=chunk_records,
            expect=left, keys=keys,
        ):  # fmt: skip
            if max_messages is not None and n + t.num_rows > max_messages:
                t = t.slice(0, max_messages - n)
            out.write(formatter.format(log.topic, log.partition, t))
            n += t.num_rows
            if max_messages is not None and n >= max_messages:
                return n
    return n


def add_parser(sub: argparse._SubParsersAction[Parser]) -> None:
    c = sub.add_parser(
        "consume",
        help="print a topic's records like kafka-console-consumer (a lake or a partition dir)",
    )
    c.add_argument("target", metavar="LAKE|PARTITION_DIR")
    c.add_argument("--topic", required=True)
    c.add_argument("--partition", type=int, default=None)
    c.add_argument(
        "--offset",
        default=None,
        help="N, earliest or latest (default: earliest; a lake does not grow while read)",
    )
    c.add_argument("--from-beginning", action="store_true", help="same as --offset earliest")
    c.add_argument("--from-timestamp", default=None, metavar="MS|ISO")
    c.add_argument("--to-timestamp", default=None, metavar="MS|ISO")
    c.add_argument("--max-messages", type=int, default=None)
    c.add_argument(
        "--key",
        action="append",
        default=None,
        metavar="K",
        help="only records with this key (UTF-8; repeat for several), through the key index",
    )
    isolation_level_arg(c)
    c.add_argument("--property", action="append", default=[], metavar="NAME=VALUE")
    c.add_argument(
        "--formatter",
        default="default",
        help="default (Kafka's DefaultMessageFormatter), json, or a kcat format string: "
        "%%t topic, %%p partition, %%o offset, %%T timestamp, %%k key, %%K key length, "
        "%%s value, %%S value length, %%h headers, \\n \\t (e.g. '%%t:%%p:%%o %%k\\n')",
    )
    skip_corrupt(c)  # argument errors: one line, exit 2 (jobargs.Parser, the parent's class)


def run(args: argparse.Namespace) -> int:
    from seglake.times import to_millis

    offset = args.offset if args.offset is not None else "earliest"
    if offset not in ("earliest", "latest") and not offset.lstrip("-").isdigit():
        raise ConfigError(f"--offset {offset!r}: expected a number, earliest or latest")
    if offset.lstrip("-").isdigit() and not 0 <= int(offset) <= LONG_MAX:
        raise ConfigError(f"--offset {offset}: expected 0..{LONG_MAX}")
    if offset.isdigit() and args.partition is None:
        raise ConfigError("--offset N needs --partition (as in kafka-console-consumer)")
    if args.max_messages is not None and args.max_messages < 0:
        raise ConfigError(f"--max-messages {args.max_messages}: expected >= 0")
    formatter = Formatter.from_properties(args.property, args.formatter)
    from_ms = None if args.from_timestamp is None else to_millis(args.from_timestamp)
    to_ms = None if args.to_timestamp is None else to_millis(args.to_timestamp)
    if from_ms is not None and to_ms is not None and from_ms > to_ms:
        raise ConfigError(
            f"--from-timestamp {args.from_timestamp} ({from_ms} ms) is after --to-timestamp "
            f"{args.to_timestamp} ({to_ms} ms)"
        )
    if args.skip_corrupt:  # each skipped batch is named once, below
        warnings.simplefilter("ignore")
    logs = partition_logs(
        args.target, args.topic, args.partition, on_corrupt="skip" if args.skip_corrupt else "raise"
    )
    out = sys.stdout.buffer
    n = 0
    try:
        n = consume(
            args.target,
            logs,
            out,
            formatter,
            offset=offset,
            from_ms=from_ms,
            to_ms=to_ms,
            max_messages=args.max_messages,
            read_committed=args.isolation_level == "read_committed",
            keys=None if args.key is None else [k.encode() for k in args.key],
        )
        out.flush()
    except BrokenPipeError:  # the reader went away (| head): stop quietly
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # no second error when Python flushes at exit
        return 0
    for log in logs:
        report_skipped(log)
    print(f"Processed a total of {n} messages", file=sys.stderr)
    return 0
