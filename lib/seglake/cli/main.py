"""The ``seglake`` command: dump, consume, offsets, history, offset-for-time, read, cleanup,
recover, register, retention, config.

Errors of seglake's own print one line naming the file, position and numbers, exit 2.
"""

from __future__ import annotations

import argparse
import json
import re
import sys

from seglake.cli import history, offsets
from seglake.cli.consume import add_parser as add_consume_parser
from seglake.cli.consume import record_dict, run_consume
from seglake.cli.jobargs import (
    Parser,
    non_negative,
    retention_arguments,
    retention_from_args,
    run_id_arg,
    seconds,
)
from seglake.errors import (
    ConfigError,
    InvalidTopicError,
    SeglakeError,
    SegmentNotFoundError,
    escaped,
)
from seglake.fs import refused
from seglake.location import LakeLocation, Root
from seglake.storage.index_builder import DEFAULT_INTERVAL


def _parser() -> argparse.ArgumentParser:
    """The command line: one subcommand per tool, in the order ``--help`` lists them."""
    p = Parser(prog="seglake", description=__doc__.splitlines()[0])
    p.add_argument("--version", action="version", version=f"seglake {_version()}")
    sub = p.add_subparsers(dest="command", required=True)
    _add_dump(sub)
    add_consume_parser(sub)
    offsets.add_parser(sub)
    history.add_parser(sub)
    _add_offset_for_time(sub)
    _add_read(sub)
    _add_cleanup(sub)
    _add_recover(sub)
    _add_register(sub)
    _add_retention(sub)

    from seglake.cli import configs, serve

    configs.add_parser(sub)
    serve.add_parser(sub)
    return p


def _add_dump(sub: argparse._SubParsersAction) -> None:
    """``seglake dump``: kafka-dump-log.sh's options."""
    d = sub.add_parser(
        "dump",
        help="print .log/.index/.timeindex/.txnindex/.snapshot files (as kafka-dump-log.sh)",
    )
    d.add_argument("files", nargs="*", metavar="FILE")
    d.add_argument(
        "--files",
        dest="file_list",
        action="append",
        default=[],
        metavar="FILE1,FILE2,...",
        help="comma-separated files, as kafka-dump-log.sh takes them",
    )
    d.add_argument("--print-data-log", action="store_true", help="print keys and values")
    d.add_argument("--deep-iteration", action="store_true", help="print every record")
    d.add_argument(
        "--index-sanity-check",
        action="store_true",
        help="check index files for sanity (Kafka's checks)",
    )
    d.add_argument(
        "--verify-index-only",
        action="store_true",
        help="check index entries against the .log beside them",
    )
    d.add_argument(
        "--max-bytes",
        type=non_negative,
        default=None,
        help="read at most this many bytes of each .log",
    )
    d.add_argument("--json", action="store_true", help="one JSON object per line")
    for name, topic in (
        ("offsets", "__consumer_offsets"),
        ("transaction-log", "__transaction_state"),
        ("cluster-metadata", "__cluster_metadata"),
    ):
        d.add_argument(
            f"--{name}-decoder", dest="decoder", action="store_const", const=name,
            help=f"decode {topic} records as Kafka does (implies --print-data-log)",
        )  # fmt: skip
    d.set_defaults(decoder="string")
    d.add_argument(
        "--skip-record-metadata",
        action="store_true",
        help="print only the records' keys and payloads, not their offsets and sizes",
    )


def _add_offset_for_time(sub: argparse._SubParsersAction) -> None:
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
    _skip_corrupt(o)


def _add_read(sub: argparse._SubParsersAction) -> None:
    """``seglake read``: records of a partition directory from an offset."""
    r = sub.add_parser("read", help="records of a partition directory from an offset")
    r.add_argument("partition_dir", metavar="PARTITION_DIR")
    r.add_argument("--offset", type=non_negative, required=True)
    r.add_argument("--max-records", type=non_negative, default=10)
    r.add_argument("--json", action="store_true", help="one JSON object per record")
    _skip_corrupt(r)


def _add_cleanup(sub: argparse._SubParsersAction) -> None:
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


def _add_recover(sub: argparse._SubParsersAction) -> None:
    """``seglake recover``: a partition directory or a lake."""
    rc = sub.add_parser(
        "recover",
        help="truncate corrupt tails, rebuild indexes, finish "
        "leftover .swap/.deleted/.cleaned files; for a lake "
        "(a directory with _catalog) also fix the catalog",
    )
    rc.add_argument("target", metavar="PARTITION_DIR|LAKE")
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
    rc.add_argument("--json", action="store_true", help="one JSON object per partition")


def _add_register(sub: argparse._SubParsersAction) -> None:
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


def _add_retention(sub: argparse._SubParsersAction) -> None:
    """``seglake retention``: Kafka's delete rules, given explicitly."""
    rt = sub.add_parser(
        "retention",
        help="delete segments by exactly the rules given (log.retention.ms/.bytes, log start "
        "offsets): catalog first, files once older than file.delete.delay.ms",
    )
    rt.add_argument("root", metavar="LAKE")
    retention_arguments(rt)
    rt.add_argument("--conf-file", default=None, help="Kafka-named settings (.properties)")
    rt.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE")


def _version() -> str:
    """seglake's installed version (the package metadata's)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("seglake")
    except PackageNotFoundError:
        return "unknown (not installed)"


def _skip_corrupt(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--skip-corrupt",
        action="store_true",
        help="skip damaged batches (CRC, magic, length) and name each on stderr, instead "
        "of stopping with an error (exit 2); a torn tail is never an error",
    )


def _open_log(args: argparse.Namespace):
    import warnings

    if args.skip_corrupt:  # reported by _report_skipped, one line each
        warnings.simplefilter("ignore")
    return _open_partition(args.partition_dir, on_corrupt="skip" if args.skip_corrupt else "raise")


def _report_skipped(log) -> None:
    for path, b in log.skipped:
        print(f"seglake: warning: skipped a damaged batch: {b.describe(path)}", file=sys.stderr)


def _record_json(r: dict) -> str:
    return json.dumps(record_dict(r))


def run(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if getattr(args, "root", None) is not None:  # a lake's command: its root parsed once
        args.root = LakeLocation.of(args.root)
    try:
        return _command(args)
    except OSError as exc:  # an object store that cannot be reached: one line naming it
        for where in (getattr(args, a, None) for a in ("root", "target", "partition_dir")):
            err = None if where is None else LakeLocation.of(where).unreachable(exc)
            if err is not None:
                raise err from exc
        raise


def _command(args: argparse.Namespace) -> int:
    if args.command == "dump":
        return _dump(args)
    if args.command == "consume":
        return run_consume(args)
    if args.command == "offsets":
        return offsets.run_offsets(args)
    if args.command == "history":
        return history.run_history(args)
    if args.command == "offset-for-time":
        return _offset_for_time(args)
    if args.command == "read":
        return _read(args)
    if args.command == "cleanup":
        from seglake.lake.staging import cleanup

        check_lake(args.root, staging=True)
        print(cleanup(args.root, older_than_s=args.older_than, dry_run=args.dry_run))
        return 0
    if args.command == "recover":
        return _recover(args)
    if args.command == "register":
        from seglake.lake.register import register

        print(
            register(
                args.root,
                args.broker_dir,
                topics=args.topics,
                run_id=args.run_id,
                kafka_truncate=args.kafka_truncate,
                include_internal=args.include_internal,
                metadata_dir=args.metadata_dir,
            )
        )
        return 0
    if args.command == "retention":
        from seglake.lake.retention import apply_retention

        rules, config = retention_from_args(args)
        print(
            apply_retention(
                args.root,
                rules,
                now_ms=args.now_ms,
                dry_run=args.dry_run,
                delete_delay_ms=config.file_delete_delay_ms,
            )
        )
        return 0
    if args.command == "config":
        from seglake.cli import configs

        return configs.run(args)
    if args.command == "serve":
        from seglake.cli import serve

        return serve.run(args)
    raise AssertionError(args.command)  # argparse only allows the commands above


def _dump(args: argparse.Namespace) -> int:
    """``seglake dump``: ``kafka-dump-log.sh`` over the files given."""
    from seglake.cli.dump import dump

    files = [*args.files, *(f for arg in args.file_list for f in arg.split(",") if f)]
    if not files:
        raise ValueError("dump: no file given (FILE... or --files a,b,c)")
    return dump(
        files,
        deep=args.deep_iteration,
        print_data=args.print_data_log,
        as_json=args.json,
        sanity=args.index_sanity_check,
        verify_only=args.verify_index_only,
        max_bytes=args.max_bytes,
        decoder=args.decoder,
        skip_metadata=args.skip_record_metadata,
    )


def _offset_for_time(args: argparse.Namespace) -> int:
    """``seglake offset-for-time``: Kafka's ``offsetsForTimes`` on a partition directory."""
    from seglake.times import to_millis

    ts = to_millis(args.timestamp, allow_special=True)
    log = _open_log(args)
    found = log.offsets_for_times(ts)
    _report_skipped(log)
    print(
        json.dumps(
            {"offset": None}
            if found is None
            else {"offset": found.offset, "timestamp": found.timestamp}
        )
    )
    return 0


def _read(args: argparse.Namespace) -> int:
    """``seglake read``: records from an offset, as a consumer fetches them."""
    log = _open_log(args)
    if args.offset >= log.log_end_offset:
        _past_end(args.partition_dir, args.offset, log.log_start_offset, log.log_end_offset)
        return 0
    if args.offset < log.log_start_offset:  # Kafka: out of range; auto.offset.reset=earliest
        print(
            f"seglake: offset {args.offset} is below the log start offset "
            f"{log.log_start_offset} (deleted or never written): reading from "
            f"{log.log_start_offset}",
            file=sys.stderr,
        )
    for r in log.read(args.offset, args.max_records).to_pylist():
        if args.json:
            print(_record_json(r))
        else:
            headers = [(h["key"], h["value"]) for h in r["headers"]]
            print(
                f"offset: {r['offset']} timestamp: {r['timestamp']} key: {r['key']!r} "
                f"value: {r['value']!r} headers: {headers}"
            )
    _report_skipped(log)
    return 0


def _open_partition(path: str, *, on_corrupt: str = "raise"):
    """The partition directory's log (in a lake: its catalog's segments); an error if it
    holds no segment (``.log`` named by a 20-digit base offset): an empty answer would
    look like an empty partition."""

    from seglake.lake.staging import open_partition_dir

    log = open_partition_dir(path, on_corrupt=on_corrupt)
    if not log.segments:
        raise _no_segments(path, "")
    return log


def _no_segments(path: str, what: str) -> SegmentNotFoundError:
    """The error for a directory without segments, naming the files it has."""
    import pyarrow.fs as pafs

    from seglake import fs as lakefs

    fs, d = lakefs.resolve(path)
    names = sorted(i.base_name for i in fs.get_file_info(pafs.FileSelector(d)))
    others = f"; other files: {names[:5]}{' ...' if len(names) > 5 else ''}" if names else ""
    return SegmentNotFoundError(
        f"{path}: no segment in this directory (no <20-digit base offset>.log file){what}{others}"
    )


def _past_end(path: str, offset: int, start: int, end: int) -> None:
    """Kafka answers a fetch at the log end offset with nothing, beyond it with
    OFFSET_OUT_OF_RANGE."""
    if offset > end:
        raise SegmentNotFoundError(
            f"{path}: offset {offset} is out of range: the log holds offsets {start}..{end - 1} "
            f"(log end offset {end})"
        )
    print(f"seglake: offset {offset} is the log end offset: no records yet", file=sys.stderr)


def check_lake(root: Root, *, staging: bool = False) -> None:
    """A lake's commands only on a lake: a path with a catalog (``staging``: or a staging
    directory, for ``cleanup``)."""
    from seglake import fs as lakefs
    from seglake.lake.staging import STAGING
    from seglake.lake.table import CATALOG_DIR

    fs, base = lakefs.resolve(root)
    dirs = (CATALOG_DIR, STAGING) if staging else (CATALOG_DIR,)
    if not any(lakefs.exists(fs, lakefs.join(base, d)) for d in dirs):
        raise SegmentNotFoundError(f"{root}: not a lake (no {'/ or '.join(dirs)}/ in it)")


_SEGMENT_FILE = re.compile(r"\d{20}\.")  # a segment's files, leftovers (.swap, .deleted) too


def _recover(args: argparse.Namespace) -> int:
    from seglake import fs as lakefs
    from seglake.lake.catalog import CATALOG_DIR
    from seglake.lake.recovery import recover_lake
    from seglake.lake.staging import lake_of
    from seglake.storage.naming import parse_partition_dir
    from seglake.storage.recovery import recover_partition

    target = LakeLocation.of(args.target)
    fs, path = target.resolve()
    if lakefs.exists(fs, lakefs.join(path, CATALOG_DIR)):
        rep = recover_lake(
            target,
            dry_run=args.dry_run,
            force=args.force,
            interval=args.index_interval_bytes,
            kafka_truncate=args.kafka_truncate,
        )
        if args.json:
            for p in rep.partitions:
                print(json.dumps(p.to_dict()))
        else:
            print(rep)
        return 0
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
            raise _no_segments(args.target, f" and no {CATALOG_DIR}/ (not a partition or a lake)")
    part = recover_partition(
        args.target, dry_run=args.dry_run, force=args.force, interval=args.index_interval_bytes
    )
    print(json.dumps(part.to_dict()) if args.json else part)
    return 0


def main(argv: list[str] | None = None) -> int:
    try:
        return run(argv)
    except (SeglakeError, ValueError) as exc:
        print(f"seglake: error: {escaped(str(exc))}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0
    except Exception as exc:  # the file system refused a write: one line, else a bug
        err = refused(exc)
        if err is None:
            raise
        print(f"seglake: error: {escaped(str(err))}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
