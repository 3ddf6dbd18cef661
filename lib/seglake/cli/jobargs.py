"""Argument parsers of the spark-submit jobs (no pyspark here: ``--help`` is instant)."""

from __future__ import annotations

import argparse
import difflib
import math
import os
import sys
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, NoReturn

from seglake.format import ISOLATION_LEVELS, LONG_MAX

if TYPE_CHECKING:
    from seglake.config import LogConfig
    from seglake.lake.recovery import RecoverOptions
    from seglake.lake.retention import RetentionOptions
    from seglake.storage.retention import RetentionRules

FORMATS = ("parquet", "json", "csv", "delta")


class Parser(argparse.ArgumentParser):
    """argparse with Kafka tools' one error line: ``PROG: error: why (see PROG --help)``,
    exit 2 (argparse prints the whole usage first), and "did you mean" for a mistyped
    sub-command, choice or option (the closest known one by ``difflib``). Sub-commands'
    parsers are of this class too."""

    def parse_known_args(
        self, args: Iterable[str] | None = None, namespace: Any = None
    ) -> tuple[Any, list[str]]:
        self._seen = list(sys.argv[1:] if args is None else args)  # for the hint
        ns, rest = super().parse_known_args(args, namespace)
        either = getattr(ns, _EITHER, None)
        if either is not None:  # target_argument's two forms: one value, once
            dest, metavar = either
            given = [v for v in (getattr(ns, _POSITIONAL), getattr(ns, _OPTION)) if v is not None]
            for name in (_EITHER, _POSITIONAL, _OPTION):
                delattr(ns, name)
            if len(given) != 1:
                self.error(
                    f"the following arguments are required: {metavar} (or --root)"
                    if not given
                    else f"{metavar} given twice ({given[0]} and --root {given[1]}): give one"
                )
            setattr(ns, dest, given[0])
        return ns, rest

    def _check_value(self, action: argparse.Action, value: object) -> None:
        if action.choices is not None and value not in action.choices:
            names = [str(c) for c in action.choices]
            close = difflib.get_close_matches(str(value), names, n=1)
            if close:
                raise argparse.ArgumentError(
                    action,
                    f"invalid choice: {value!r}; did you mean {close[0]!r}? "
                    f"(choose from {', '.join(names)})",
                )
        super()._check_value(action, value)

    def _unknown_option_hint(self) -> str:
        """``; did you mean --x?`` for the first option given that neither this parser nor
        the sub-command given knows (nor abbreviates), if one is close to a known one."""
        seen: list[str] = getattr(self, "_seen", [])
        parsers: list[argparse.ArgumentParser] = [self]
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction):
                parsers += [action.choices[a] for a in seen if a in action.choices][:1]
        known = [o for p in parsers for o in p._option_string_actions]
        for arg in seen:
            if arg == "--":
                break
            name = arg.split("=", 1)[0]
            if not name.startswith("-") or name[1:2].isdigit():  # a value, or a number
                continue
            if any(k.startswith(name) for k in known):
                continue
            close = difflib.get_close_matches(name, known, n=1)
            if close:
                return f"; did you mean {close[0]}?"
        return ""

    def error(self, message: str) -> NoReturn:
        hint = "" if "did you mean" in message else self._unknown_option_hint()
        print(f"{self.prog}: error: {message}{hint} (see {self.prog} --help)", file=sys.stderr)
        sys.exit(2)


_EITHER, _POSITIONAL, _OPTION = "_target_dest", "_target", "_target_root"


def target_argument(p: argparse.ArgumentParser, dest: str, metavar: str = "LAKE") -> None:
    """What an operation of both the CLI and the jobs works on (``recover``,
    ``retention``, ``lookup``), taken in either form in both: positional, as
    ``seglake recover LAKE``, or ``--root LAKE``, as ``./spark-submit.sh recover --root
    LAKE``; exactly one, in ``args.<dest>`` (:class:`Parser` checks it). The names of an
    operation's other arguments are the same in both too (tests/unit/test_options_objects.py).
    """
    p.add_argument(_POSITIONAL, nargs="?", default=None, metavar=metavar)
    p.add_argument(
        "--root", dest=_OPTION, default=None, metavar=metavar, help=f"the same as {metavar}"
    )
    p.set_defaults(**{_EITHER: (dest, metavar)})


def topics_argument(p: argparse.ArgumentParser) -> None:
    """``--topics T1 [T2 ...]``: only these topics (default: every topic); repeatable."""
    p.add_argument(
        "--topics",
        nargs="+",
        action="extend",
        default=None,
        metavar="TOPIC",
        help="only these topics (default: every topic)",
    )


def non_negative(value: str) -> int:
    """An ``int`` argument in ``0..2^63-1`` (offsets, counts, sizes, epoch ms)."""
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a whole number") from None
    if not 0 <= n <= LONG_MAX:
        raise argparse.ArgumentTypeError(f"{n} is outside 0..{LONG_MAX}")
    return n


def seconds(value: str) -> float:
    """A finite ``float`` argument >= 0 (an age in seconds)."""
    try:
        x = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number of seconds") from None
    if not (math.isfinite(x) and x >= 0):
        raise argparse.ArgumentTypeError(f"{value} is not a number of seconds >= 0")
    return x


def run_id_arg(value: str) -> str:
    """A ``--run-id`` argument: it names ``<root>/_staging/<run>``, so it follows the
    names-to-paths rule (:func:`~seglake.storage.naming.validate_run_id`)."""
    from seglake.errors import InvalidNameError
    from seglake.storage.naming import validate_run_id

    try:
        return validate_run_id(value)
    except InvalidNameError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


KEY_QUERIES_ONLY = " (of key queries; offset and time queries answer as read_uncommitted)"


def isolation_level_arg(p: argparse.ArgumentParser, what: str = "") -> None:
    """``--isolation-level read_uncommitted|read_committed`` (Kafka consumer's
    isolation.level; ``what``: which reads it applies to, in the help)."""
    p.add_argument(
        "--isolation-level",
        choices=ISOLATION_LEVELS,
        default="read_uncommitted",
        help=f"read_committed leaves out aborted transactions' records{what}",
    )


def conf_arguments(p: argparse.ArgumentParser) -> None:
    """``--conf-file`` and ``--conf KEY=VALUE``: Kafka-named settings (every job, and
    ``seglake retention``)."""
    p.add_argument(
        "--conf-file",
        default=None,
        help="Kafka-named settings (.properties), e.g. conf/seglake.properties",
    )
    p.add_argument(
        "--conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override one setting, e.g. --conf log.segment.bytes=1048576 (repeatable)",
    )


def _job_parser(job: str, description: str, epilog: str | None = None) -> argparse.ArgumentParser:
    """The parser of ``./spark-submit.sh JOB``."""
    return Parser(prog=f"./spark-submit.sh {job}", description=description, epilog=epilog)


def _output_args(p: argparse.ArgumentParser) -> None:
    """Where a job that writes records writes them: ``--output``, ``--output-format``."""
    p.add_argument("--output", required=True)
    p.add_argument("--output-format", choices=("parquet", "delta", "json"), default="parquet")


def ingest_parser() -> argparse.ArgumentParser:
    p = _job_parser(
        "ingest",
        "Turn message data (Spark Kafka source columns; only `value` is required) "
        "into Kafka partition logs in a lake, committed atomically.",
    )
    p.add_argument("--input", required=True, help="input path (file or directory)")
    p.add_argument(
        "--input-format",
        choices=FORMATS,
        default=None,
        help="default: from the extension, else parquet",
    )
    p.add_argument("--root", required=True, help="lake root (path, file://, s3://...)")
    p.add_argument("--topic", default=None, help="topic of every row (else a `topic` column)")
    p.add_argument(
        "--num-partitions",
        type=int,
        default=None,
        help="partitions for Kafka's default partitioner when the input has no `partition` column",
    )
    p.add_argument(
        "--run-id",
        type=run_id_arg,
        default=None,
        help="idempotency key: rerunning a committed run id is a no-op",
    )
    conf_arguments(p)
    return p


def extract_parser() -> argparse.ArgumentParser:
    p = _job_parser(
        "extract",
        "Records of a time (or offset) range, in the Spark Kafka source schema.",
    )
    p.add_argument("--root", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--partitions", default=None, help="comma-separated, e.g. 0,3 (default all)")
    p.add_argument("--start", default=None, help="ISO-8601 time or epoch ms (inclusive)")
    p.add_argument("--end", default=None, help="ISO-8601 time or epoch ms (exclusive)")
    p.add_argument("--start-offset", type=non_negative, default=None)
    p.add_argument("--end-offset", type=non_negative, default=None)
    p.add_argument(
        "--mode",
        choices=("offsets", "filter"),
        default="offsets",
        help="offsets: offsetsForTimes(start)..offsetsForTimes(end) (Kafka source "
        "semantics); filter: every record with start <= timestamp < end",
    )
    isolation_level_arg(p)
    _output_args(p)
    conf_arguments(p)
    return p


def lookup_parser() -> argparse.ArgumentParser:
    p = _job_parser(
        "lookup",
        "Answer (topic, partition, offset|timestamp|key) queries with the sparse "
        "and key indexes: one output row per offset/time query, one per record of a key, "
        "with a status.",
    )
    target_argument(p, "root")
    p.add_argument("--queries", required=True, help="parquet, JSON lines or CSV")
    p.add_argument(
        "--latest-per-key",
        action="store_true",
        help="a key query answers its key's last record per partition (a compacted view)",
    )
    isolation_level_arg(p, KEY_QUERIES_ONLY)
    p.add_argument("--queries-format", choices=("parquet", "json", "csv"), default=None)
    _output_args(p)
    conf_arguments(p)
    return p


def recover_parser() -> argparse.ArgumentParser:
    p = _job_parser(
        "recover",
        "Recover every catalogued partition (one task each: truncate corrupt "
        "tails, rebuild bad indexes); the driver fixes the catalog in one commit.",
    )
    target_argument(p, "root")
    topics_argument(p)
    p.add_argument("--dry-run", action="store_true")
    p.add_argument("--force", action="store_true", help="rebuild valid indexes too")
    p.add_argument(
        "--kafka-truncate",
        action="store_true",
        help="Kafka's rule: truncate at a damaged batch, delete the later segments (default: "
        "cut out only the damaged batch, keep the rest; the offsets lost are reported)",
    )
    p.add_argument("--run-id", type=run_id_arg, default=None)
    conf_arguments(p)
    return p


def retention_parser() -> argparse.ArgumentParser:
    p = _job_parser(
        "retention",
        "Delete segments by exactly the rules given: catalog first (one commit), "
        "then the files, once older than file.delete.delay.ms.",
    )
    target_argument(p, "root")
    retention_arguments(p)
    conf_arguments(p)
    return p


def retention_arguments(p: argparse.ArgumentParser) -> None:
    """The arguments shared by the retention job and ``seglake retention`` (its rules,
    which topics, the run id; the lake: :func:`target_argument`)."""
    topics_argument(p)
    p.add_argument("--run-id", type=run_id_arg, default=None)
    p.add_argument("--retention-ms", type=int, default=None, help="log.retention.ms (-1: off)")
    p.add_argument(
        "--retention-bytes", type=int, default=None, help="log.retention.bytes (-1: off)"
    )
    p.add_argument(
        "--log-start-offset", action="append", default=[], metavar="TOPIC:PARTITION:OFFSET"
    )
    p.add_argument(
        "--broker-defaults",
        action="store_true",
        help="also apply log.retention.ms/.bytes from --conf-file, else Kafka's defaults "
        "(7 days, unlimited), where not given; without it only the rules given apply",
    )
    p.add_argument("--now-ms", type=non_negative, default=None)
    p.add_argument("--dry-run", action="store_true", help="print what would go, change nothing")


def retention_from_args(args: argparse.Namespace) -> tuple[RetentionRules, RetentionOptions]:
    """The rules and the run's options of parsed retention arguments (the CLI's and the
    job's): exactly the rules given (``--retention-*``, ``--log-start-offset``, ``--conf
    log.retention.*=``); the broker defaults only with ``--broker-defaults``."""
    from seglake.config import LogConfig, parse_overrides
    from seglake.lake.retention import RetentionOptions
    from seglake.storage.retention import parse_log_start_offsets, retention_rules

    overrides = parse_overrides(args.conf)
    config = LogConfig.load(args.conf_file, overrides)
    rules = retention_rules(
        retention_ms=args.retention_ms,
        retention_bytes=args.retention_bytes,
        log_start_offsets=parse_log_start_offsets(args.log_start_offset),
        overrides=overrides,
        defaults=config if args.broker_defaults else None,
    )
    return rules, RetentionOptions(
        now_ms=args.now_ms,
        topics=args.topics,
        run_id=args.run_id,
        dry_run=args.dry_run,
        delete_delay_ms=config.file_delete_delay_ms,
    )


def recover_options(args: argparse.Namespace, config: LogConfig | None) -> RecoverOptions:
    """A lake recovery's options of parsed recover arguments (``seglake recover``'s, with
    its ``--index-interval-bytes``; the job's, with its settings ``config``)."""
    from seglake.lake.recovery import RecoverOptions

    return RecoverOptions(
        dry_run=args.dry_run,
        interval=getattr(args, "index_interval_bytes", RecoverOptions().interval),
        force=args.force,
        topics=args.topics,
        run_id=args.run_id,
        delete_delay_ms=None if config is None else config.file_delete_delay_ms,
        kafka_truncate=args.kafka_truncate,
        config=config,
    )


def compact_parser() -> argparse.ArgumentParser:
    p = _job_parser(
        "compact",
        "Kafka's log cleaner as a Spark job: compact cleanup.policy=compact topics "
        "(keep the latest record per key) and merge small adjacent segments of the others, "
        "one catalog commit; prints a summary per partition.",
        epilog="Settings (Kafka's names; --conf wins over `seglake config`): cleanup.policy, "
        "min.cleanable.dirty.ratio, min.compaction.lag.ms, max.compaction.lag.ms, "
        "delete.retention.ms, segment.bytes (log.segment.bytes), segment.index.bytes, "
        "index.interval.bytes.",
    )
    p.add_argument("--root", required=True, help="lake root")
    topics_argument(p)
    p.add_argument(  # the name before --topics (as recover and retention take it)
        "--topic", action="append", dest="topics", help="deprecated: the same as --topics"
    )
    p.add_argument("--partitions", default=None, help="comma-separated, e.g. 0,3 (default all)")
    p.add_argument(
        "--merge-only",
        action="store_true",
        help="concatenate adjacent segments up to segment.bytes, never remove a record "
        "(the default for cleanup.policy=delete topics)",
    )
    p.add_argument("--dry-run", action="store_true", help="plan and report, write nothing")
    p.add_argument(
        "--now-ms", type=non_negative, default=None, help="the cleaner's clock (default now)"
    )
    p.add_argument("--run-id", type=run_id_arg, default=None)
    conf_arguments(p)
    return p


def format_from_path(path: str, explicit: str | None, allowed: tuple[str, ...]) -> str:
    """``explicit`` or the format the path's extension names (default parquet)."""
    if explicit:
        return explicit
    lower = path.lower().rstrip("/")
    for fmt, exts in {
        "json": (".json", ".jsonl", ".ndjson"),
        "csv": (".csv",),
        "parquet": (".parquet",),
    }.items():
        if lower.endswith(exts) and fmt in allowed:
            return fmt
    return "parquet"


PARSERS: dict[str, Callable[[], argparse.ArgumentParser]] = {
    "ingest": ingest_parser,
    "extract": extract_parser,
    "lookup": lookup_parser,
    "recover": recover_parser,
    "retention": retention_parser,
    "compact": compact_parser,
}


def require_path(path: str, what: str) -> None:
    """``path`` (a file or directory, any URI) must exist: ``PATH: WHAT does not exist``."""
    import pyarrow.fs as pafs

    from seglake.errors import SegmentNotFoundError
    from seglake.fs import resolve

    fs, p = resolve(path)
    if fs.get_file_info(p).type == pafs.FileType.NotFound:
        raise SegmentNotFoundError(f"{path}: {what} does not exist")


def check_before_spark(job: str, args: argparse.Namespace) -> None:
    """What a job's arguments name that is checked before Spark starts (its JVM takes
    seconds): topic names and the run id (:mod:`seglake.storage.naming`'s one rule);
    ``--root`` a lake (ingest: not a file, the lake is made);
    the ``--input`` / ``--queries`` path; extract's topic in the lake; an ``--output``
    outside the lake (neither inside it nor holding it).

    Raises:
        SeglakeError: one line naming the argument's value.
    """
    import pyarrow.fs as pafs

    from seglake.errors import ConfigError, SegmentNotFoundError
    from seglake.lake.handle import LakeHandle
    from seglake.location import nested
    from seglake.storage.naming import validate_run_id, validate_topic

    for name in ("topic", "topics"):
        value = getattr(args, name, None)
        for topic in [value] if isinstance(value, str) else value or []:
            validate_topic(topic)
    if getattr(args, "run_id", None) is not None:
        validate_run_id(args.run_id)
    args.root = lake = LakeHandle.open(args.root)  # the job's root, parsed once
    if job == "ingest":
        if lake.fs.get_file_info(lake.base).type == pafs.FileType.File:
            raise SegmentNotFoundError(f"{args.root}: is a file, not a lake directory")
        require_path(args.input, "input path")
        return
    output = getattr(args, "output", None)
    if output is not None and nested(output, lake.location):
        raise ConfigError(
            f"--output {output}: inside the lake {args.root}, or holding it: a job writes "
            "its output outside the lake (there it would damage the catalog or partitions)"
        )
    catalog = lake.catalog
    catalog.require()
    if job == "extract":
        catalog.require_topic(args.topic)
    if job == "lookup":
        require_path(args.queries, "queries path")


def report_error(job: str, err: BaseException, *, log_file: str | None = None) -> None:
    """A job's one error line ``seglake JOB: error: TYPE: message`` (naming ``log_file``,
    Spark's log, when given): to ``$SEGLAKE_ERROR_FILE``, which spark-submit.sh prints on
    stderr after Spark has exited (spark-submit sends the Python driver's stderr to its
    stdout), else stderr."""
    from seglake.errors import escaped

    line = f"seglake {job}: error: {type(err).__name__}: {escaped(str(err))}"
    if log_file:
        line += f" (Spark's log: {log_file})"
    target = os.environ.get("SEGLAKE_ERROR_FILE")
    if target:
        try:
            with open(target, "a") as out:
                out.write(line + "\n")
            return
        except OSError:  # the line is what matters: stderr then
            pass
    print(line, file=sys.stderr)


def precheck(argv: list[str]) -> int:
    """``python -m seglake.cli.jobargs JOB ARGS``: spark-submit.sh's check before it starts
    Spark. 0: go on; 2: refused (one line printed); 3: ``--help`` printed, nothing to run."""
    from seglake.errors import SeglakeError

    if not argv or argv[0] not in PARSERS:
        return 0  # the job itself says what is wrong
    job = argv[0]
    try:
        args = PARSERS[job]().parse_args(argv[1:])
    except SystemExit as exc:
        return 3 if exc.code in (0, None) else int(exc.code)
    try:
        check_before_spark(job, args)
    except (SeglakeError, ValueError) as exc:
        report_error(job, exc)
        return 2
    except OSError as exc:  # an object store that cannot be reached
        from seglake.lake.handle import LakeHandle

        err = LakeHandle.open(args.root).location.unreachable(exc)
        if err is None:
            raise
        report_error(job, err)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(precheck(sys.argv[1:]))
