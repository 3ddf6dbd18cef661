"""``seglake lookup``: point lookups on a lake in this process (``Lake.lookup``: the
lookup job's answers and statuses without Spark), queries from the command line
(``--offset TOPIC:PARTITION:OFFSET``, ``--time TOPIC:PARTITION:TIME``, ``--key K`` of
``--topic T`` and optionally ``--partition P``) or a file (the job's ``--queries``:
parquet, JSON lines or CSV)."""

from __future__ import annotations

import argparse
import base64
import json
from typing import TYPE_CHECKING, Any

from seglake.cli.jobargs import (
    KEY_QUERIES_ONLY,
    Parser,
    format_from_path,
    isolation_level_arg,
    require_path,
    target_argument,
)
from seglake.cli.targets import check_lake, skip_corrupt
from seglake.errors import InputSchemaError

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["add_parser", "run"]


def _query(kind: str) -> Any:
    """``TOPIC:PARTITION:VALUE`` -> (topic, partition, value) (the value may hold ``:``,
    as an ISO time does)."""

    def parse(text: str) -> tuple[str, int, str]:
        parts = text.split(":", 2)
        ints = parts[1:] if kind == "offset" else parts[1:2]
        if len(parts) != 3 or not all(x.lstrip("-").isdigit() for x in ints):
            raise argparse.ArgumentTypeError(f"{text!r}: expected TOPIC:PARTITION:{kind.upper()}")
        return parts[0], int(parts[1]), parts[2]

    return parse


def add_parser(sub: argparse._SubParsersAction[Parser]) -> None:
    """``seglake lookup``: offset and time queries answered in this process."""
    lk = sub.add_parser(
        "lookup",
        help="answer offset/time/key queries on a lake in this process (the lookup job's rows)",
    )
    target_argument(lk, "root")
    lk.add_argument(
        "--offset", action="append", default=[], type=_query("offset"), metavar="T:P:OFFSET"
    )
    lk.add_argument(
        "--time",
        action="append",
        default=[],
        type=_query("time"),
        metavar="T:P:TIME",
        help="epoch ms or ISO-8601, or latest/earliest/max (-1/-2/-3)",
    )
    lk.add_argument(
        "--key",
        action="append",
        default=[],
        metavar="K",
        help="a key query (UTF-8; repeat for several) of --topic (and --partition; "
        "default every partition): every record with that key",
    )
    lk.add_argument("--topic", default=None, help="the topic of the --key queries")
    lk.add_argument("--partition", type=int, default=None, help="the --key queries' partition")
    lk.add_argument(
        "--queries", help="a file of queries, as the lookup job takes them (key queries too)"
    )
    lk.add_argument(
        "--latest-per-key",
        action="store_true",
        help="a key query answers its key's last record per partition (a compacted view)",
    )
    isolation_level_arg(lk, KEY_QUERIES_ONLY)
    lk.add_argument("--queries-format", choices=("parquet", "json", "csv"), default=None)
    lk.add_argument("--version", type=int, default=None, help="catalog version (default newest)")
    lk.add_argument("--json", action="store_true", help="one JSON object per answer")
    skip_corrupt(lk)


def _queries(args: argparse.Namespace) -> pa.Table:
    """The queries of ``--offset``/``--time``/``--key`` (in that order), or of
    ``--queries``."""
    import pyarrow as pa

    if (args.topic is not None or args.partition is not None) and not args.key:
        raise InputSchemaError("--topic/--partition: the topic of --key queries; no --key given")
    if args.key and args.topic is None:
        raise InputSchemaError(f"--key {args.key[0]}: which topic? (give --topic)")
    if args.queries is not None:
        if args.offset or args.time or args.key:
            raise InputSchemaError(
                "--queries: give either a file or --offset/--time/--key, not both"
            )
        require_path(args.queries, "queries")
        fmt = format_from_path(args.queries, args.queries_format, ("parquet", "json", "csv"))
        if fmt == "csv":
            from pyarrow import csv

            return csv.read_csv(args.queries)
        if fmt == "json":
            from pyarrow import json as pajson

            return pajson.read_json(args.queries)
        import pyarrow.parquet as pq

        return pq.read_table(args.queries)
    if not args.offset and not args.time and not args.key:
        raise InputSchemaError("lookup: no queries (give --offset, --time, --key or --queries)")
    rows = (
        [(t, p, int(v), None, None) for t, p, v in args.offset]
        + [(t, p, None, v, None) for t, p, v in args.time]
        + [(args.topic, args.partition, None, None, k) for k in args.key]
    )
    cols = {
        "topic": [r[0] for r in rows],
        "partition": pa.array([r[1] for r in rows], pa.int32()),
        "offset": pa.array([r[2] for r in rows], pa.int64()),
        "timestamp": pa.array([r[3] for r in rows], pa.string()),
    }
    if args.key:  # a key column makes key queries (and adds query_key to the answers)
        cols["key"] = pa.array([r[4] for r in rows], pa.string())
    return pa.table(cols)


def run(args: argparse.Namespace) -> int:
    """One line (or JSON object) per query, in order: its status and the record found."""
    import seglake
    from seglake.cli.consume import record_dict
    from seglake.times import to_millis

    check_lake(args.root)
    q = _queries(args)
    lake = seglake.open(
        args.root, version=args.version, on_corrupt="skip" if args.skip_corrupt else "raise"
    )
    answers = lake.lookup(
        q, latest_per_key=args.latest_per_key, isolation_level=args.isolation_level
    )
    for r in answers.to_pylist():
        ts = r["timestamp"]
        rec = {
            **r,
            "timestamp": None if ts is None else to_millis(ts),  # exact: floor
            "timestamp_type": r["timestampType"],
            "headers": r["headers"] or [],
        }
        found = record_dict(rec) if r["status"] == "ok" else {}
        asked = {k: r[k] for k in ("topic", "partition", "query_offset", "query_timestamp")}
        qkey = r.get("query_key")  # a key query's key (a queries file with a key column)
        if "query_key" in r:
            asked["query_key"] = None if qkey is None else base64.b64encode(qkey).decode()
        if args.json:
            print(json.dumps({**asked, "status": r["status"], "offset": r["offset"], **found}))
        else:
            what = (
                f"offset {r['query_offset']}"
                if r["query_offset"] is not None
                else f"key {qkey!r}"
                if qkey is not None and r["query_timestamp"] is None
                else f"timestamp {r['query_timestamp']}"
            )
            line = f"{r['topic']}-{r['partition']} {what}: {r['status']}"
            if r["status"] == "ok":
                line += f" offset: {r['offset']} timestamp: {rec['timestamp']} key: {r['key']!r}"
                line += f" value: {r['value']!r}"
            elif r["offset"] is not None:
                line += f" offset: {r['offset']}"
            print(line)
    return 0
