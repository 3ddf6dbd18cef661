"""Every option Spark's Kafka connector takes (spark-sql-kafka-0-10 4.2.0's
``KafkaSourceProvider`` and the Kafka integration guide), with what seglake does with it
in each of the four places a ``format("kafka")`` job names it: the batch source
(``spark.read``), the stream source (``spark.readStream``), the batch sink (``df.write``)
and the stream sink (``df.writeStream``).

    works      the option means what it means for Kafka (a lake's topics are Kafka's)
    lake       it has a lake meaning (``minPartitions``: at least that many tasks)
    ignored    a broker's or consumer's setting, or one Spark's connector ignores there
               itself: accepted, and named in ONE warning line per read or query
    refused    an error naming the option and why (Spark's own refusals, and options a
               stream cannot have)

An option of the table for no place (``topic`` on a read) and a name in neither the table
nor seglake's own options of that place is an error, with a "did you mean". Names are
case-insensitive, as Spark's. :func:`check_options` is the one check every parser runs;
:func:`readme_tables` writes the README's tables from :data:`KAFKA_OPTIONS`.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable, Mapping

from seglake.config import did_you_mean
from seglake.errors import ConfigError

__all__ = [
    "BATCH_SINK",
    "BATCH_SOURCE",
    "KAFKA_OPTIONS",
    "PLACES",
    "STREAM_SINK",
    "STREAM_SOURCE",
    "KafkaOption",
    "check_options",
    "find",
    "producer_settings",
    "readme_tables",
    "spelled",
    "warn_ignored",
]

log = logging.getLogger(__name__)

BATCH_SOURCE, STREAM_SOURCE = "batch source", "stream source"
BATCH_SINK, STREAM_SINK = "batch sink", "stream sink"
PLACES = (BATCH_SOURCE, STREAM_SOURCE, BATCH_SINK, STREAM_SINK)
WORKS, LAKE, IGNORED, REFUSED = "works", "lake", "ignored", "refused"
KAFKA_PREFIX = "kafka."
PRODUCER_LEVELS = ("compression.gzip.level", "compression.lz4.level", "compression.zstd.level")


@dataclasses.dataclass(frozen=True)
class KafkaOption:
    """One option of Spark's Kafka connector: its use in each of :data:`PLACES` (None:
    not an option there) and what seglake does with it (the README's words)."""

    name: str  # as Spark's docs spell it; "kafka.*": every other kafka.-prefixed name
    batch_source: str | None
    stream_source: str | None
    batch_sink: str | None
    stream_sink: str | None
    what: str

    def use(self, place: str) -> str | None:
        """Its use in ``place`` (one of :data:`PLACES`)."""
        use: str | None = getattr(self, place.replace(" ", "_"))
        return use


def _source(name: str, use: str, what: str, stream: str | None = None) -> KafkaOption:
    return KafkaOption(name, use, stream or use, None, None, what)


def _sink(name: str, use: str, what: str) -> KafkaOption:
    return KafkaOption(name, None, None, use, use, what)


def _everywhere(name: str, use: str, what: str) -> KafkaOption:
    return KafkaOption(name, use, use, use, use, what)


_NOT_IN_STREAM = "refused in a stream, as Spark's Kafka source refuses it"
_BROKER = "a setting of the Kafka consumer; the lake is read from its path"
_STREAM_ONLY = "stream only; a batch read ignores it, as Spark's (which logs it)"
_SPARK_REFUSES = "refused, as Spark's Kafka connector refuses it"

KAFKA_OPTIONS: tuple[KafkaOption, ...] = (
    _source("assign", WORKS, 'JSON `{"topicA":[0,1]}`: these partitions only'),
    _source("subscribe", WORKS, "comma-separated topics"),
    _source(
        "subscribePattern",
        WORKS,
        "a Java regular expression found anywhere in a topic name (`topic` reads `my-topic`); "
        "internal topics are left out",
    ),
    _everywhere(
        "kafka.bootstrap.servers", IGNORED, "there is no broker: the lake is the load/save path"
    ),
    _source("startingTimestamp", WORKS, "epoch ms (or ISO-8601): Kafka's `offsetsForTimes`"),
    _source("startingOffsetsByTimestamp", WORKS, 'JSON `{"topicA":{"0":1000}}` of epoch ms'),
    _source("startingOffsets", WORKS, "`earliest`, `latest` (stream only) or JSON offsets"),
    _source(
        "endingTimestamp",
        WORKS,
        "batch: epoch ms (or ISO-8601); a stream ignores it, as Spark's (which does not check it)",
        stream=IGNORED,
    ),
    _source(
        "endingOffsetsByTimestamp",
        WORKS,
        f'batch: JSON `{{"topicA":{{"0":2000}}}}`; {_NOT_IN_STREAM}',
        stream=REFUSED,
    ),
    _source(
        "endingOffsets", WORKS, f"batch: `latest` or JSON offsets; {_NOT_IN_STREAM}", stream=REFUSED
    ),
    _source("failOnDataLoss", WORKS, "offsets outside a partition's log: an error, or clamped"),
    _source("kafkaConsumer.pollTimeoutMs", IGNORED, _BROKER),
    _source("fetchOffset.numRetries", IGNORED, _BROKER),
    _source("fetchOffset.retryIntervalMs", IGNORED, _BROKER),
    _source("maxOffsetsPerTrigger", IGNORED, _STREAM_ONLY, stream=WORKS),
    _source("minOffsetsPerTrigger", IGNORED, _STREAM_ONLY, stream=WORKS),
    _source(
        "maxTriggerDelay",
        IGNORED,
        f"Spark's time string (`500ms`, `30s`, `15m`, `1h`, `1d`; a number: ms); {_STREAM_ONLY}",
        stream=WORKS,
    ),
    _source(
        "minPartitions",
        LAKE,
        "at least this many tasks: a partition's offsets are cut into more pieces",
    ),
    _source(
        "maxRecordsPerPartition",
        LAKE,
        "at most this many offsets a task: a partition's offsets are cut into pieces",
    ),
    _source("groupIdPrefix", IGNORED, "a consumer group's name; a lake read has no group"),
    _source("kafka.group.id", IGNORED, "a consumer group; a lake read has no group"),
    KafkaOption(
        "includeHeaders",
        WORKS,
        WORKS,
        WORKS,
        WORKS,
        "read: the `headers` column; write: as Spark's sink, a `headers` column is written "
        "whenever the DataFrame has one, whatever this option says",
    ),
    _source(
        "startingOffsetsByTimestampStrategy",
        WORKS,
        "`error` or `latest`: no record at or after a starting timestamp",
    ),
    _source(
        "kafka.isolation.level",
        WORKS,
        "`read_committed` drops aborted transactions (also `isolationLevel`)",
    ),
    _source(
        "kafka.auto.offset.reset",
        REFUSED,
        f"{_SPARK_REFUSES}: use startingOffsets (`earliest` or `latest`)",
    ),
    _source(
        "kafka.key.deserializer",
        REFUSED,
        f"{_SPARK_REFUSES}: keys are bytes; cast them in the DataFrame",
    ),
    _source(
        "kafka.value.deserializer",
        REFUSED,
        f"{_SPARK_REFUSES}: values are bytes; cast them in the DataFrame",
    ),
    _source("kafka.enable.auto.commit", REFUSED, f"{_SPARK_REFUSES}: the source commits nothing"),
    _source(
        "kafka.interceptor.classes",
        REFUSED,
        f"{_SPARK_REFUSES}: interceptors could change the records",
    ),
    _sink("topic", WORKS, "the topic of every row (overrides a `topic` column)"),
    _sink(
        "kafka.partitioner.class",
        IGNORED,
        "a Java class cannot run here: rows without a partition go where Kafka's default "
        "partitioner puts them (murmur2 of the key; no key: spread round robin)",
    ),
    *(
        _sink(
            f"kafka.{name}",
            LAKE,
            f"the producer's {name}: the batches written get it, unless the topic's "
            f"`{name}` (stored, or the job's option) says otherwise, as a broker "
            "recompresses",
        )
        for name in ("compression.type", *PRODUCER_LEVELS)
    ),
    _sink(
        "kafka.key.serializer", REFUSED, f"{_SPARK_REFUSES}: keys are written as string or binary"
    ),
    _sink(
        "kafka.value.serializer",
        REFUSED,
        f"{_SPARK_REFUSES}: values are written as string or binary",
    ),
    _everywhere(
        "kafka.*",
        IGNORED,
        "any other consumer or producer setting (security, timeouts, batching, acks, ...): "
        "there is no broker; the lake's own settings go by their Kafka topic names",
    ),
)
_BY_NAME = {o.name.lower(): o for o in KAFKA_OPTIONS}


def find(name: str, place: str | None = None) -> KafkaOption | None:
    """The row of option ``name`` (any case), or None. A ``kafka.`` name the table has
    no row for (or, given ``place``, none for that place: ``kafka.group.id`` on a sink)
    is the ``kafka.*`` row: Spark hands every such name to the Kafka client."""
    key = name.lower()
    found = _BY_NAME.get(key)
    if key.startswith(KAFKA_PREFIX) and (
        found is None or (place is not None and found.use(place) is None)
    ):
        found = _BY_NAME["kafka.*"]
    return found


def spelled(name: str) -> str:
    """``name`` as Spark's docs spell it (Spark hands a Python data source its option
    names lower-cased); a name of no row of its own as given."""
    row = find(name)
    return name if row is None or row.name == "kafka.*" else row.name


def check_options(names: Iterable[str], place: str, own: Iterable[str]) -> tuple[str, ...]:
    """The options of ``names`` that ``place`` ignores (in the order given); a
    :class:`ConfigError` for those it refuses, those of the table for another place and
    those in neither the table nor ``own`` (seglake's options of ``place``, any case).

    Raises:
        ConfigError: one line naming every such option (and the closest known name).
    """
    own_names = list(own)
    own_lower = {n.lower() for n in own_names}
    ignored: list[str] = []
    refused: list[str] = []
    unknown: list[str] = []
    for name in names:
        if name.lower() in own_lower:
            continue
        row = find(name, place)
        use = None if row is None else row.use(place)
        if use == IGNORED:
            ignored.append(name)
        elif row is not None and use == REFUSED:
            refused.append(f"{spelled(name)}: {row.what}")
        elif row is not None and use is None:
            there = " and ".join(p for p in PLACES if row.use(p) is not None)
            refused.append(
                f"{spelled(name)}: an option of Spark's Kafka {there}, not of its {place}"
            )
        elif row is None:
            unknown.append(name)
    if refused:
        raise ConfigError(f"seglake {place}: " + "; ".join(refused))
    if unknown:
        known = own_names + [o.name for o in KAFKA_OPTIONS if o.use(place) is not None]
        named = ", ".join(f"{n}{did_you_mean(n, known)}" for n in unknown)
        raise ConfigError(
            f"seglake {place}: unknown option(s) {named}: neither Spark's Kafka "
            "connector nor seglake has it (README: Spark's Kafka options)"
        )
    return tuple(ignored)


def producer_settings(options: Mapping[str, str]) -> dict[str, str]:
    """The producer's compression settings among a sink's ``options`` (``kafka.``-prefixed,
    any case) by their Kafka names: broker-level settings of the batches written (a
    producer's codec, which a topic's ``compression.type`` overrides)."""
    wanted = {f"{KAFKA_PREFIX}{n}": n for n in ("compression.type", *PRODUCER_LEVELS)}
    return {wanted[k.lower()]: v for k, v in options.items() if k.lower() in wanted}


def warn_ignored(ignored: Iterable[str], place: str) -> None:
    """The one warning line of a read or query naming every option it ignores."""
    names = list(ignored)
    if names:
        log.warning(
            "seglake %s: ignored option(s) %s: Kafka broker settings or options Spark's "
            "Kafka %s ignores (README: Spark's Kafka options)",
            place,
            ", ".join(spelled(n) for n in names),
            place,
        )


def readme_tables() -> str:
    """The README's tables of Spark's Kafka options (a unit test keeps them equal)."""
    out = []
    for title, places in (
        ("Source options", (BATCH_SOURCE, STREAM_SOURCE)),
        ("Sink options", (BATCH_SINK, STREAM_SINK)),
    ):
        rows = [o for o in KAFKA_OPTIONS if any(o.use(p) for p in places)]
        out.append(f'{title} of Spark\'s Kafka connector (`format("kafka")`):\n')
        out.append(f"| option | {' | '.join(places)} | what seglake does |")
        out.append("|---" * (len(places) + 2) + "|")
        for o in rows:
            uses = " | ".join(o.use(p) or "-" for p in places)
            out.append(f"| `{o.name}` | {uses} | {o.what} |")
        out.append("")
    return "\n".join(out)


if __name__ == "__main__":
    print(readme_tables())
