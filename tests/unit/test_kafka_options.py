"""The table of Spark's Kafka options (seglake.spark.kafka_options) against Spark 4.2's
connector jar and the README, what each parser does with them, and Spark's time strings
(seglake.spark.time_strings) against a brute-force model of ``JavaUtils.timeStringAs``."""

from __future__ import annotations

import logging
import re
import zipfile
from fractions import Fraction
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from seglake.errors import ConfigError
from seglake.spark import kafka_options as ko
from seglake.spark.read_options import parse_options
from seglake.spark.stream_sink import sink_options
from seglake.spark.time_strings import duration_ms, time_string_as

REPO = Path(__file__).resolve().parents[2]
JAR = REPO / ".jars" / "spark" / "spark-sql-kafka-0-10_2.13-4.2.0.jar"
# KafkaSourceProvider's option keys (its companion object's constants, lower-cased as
# Spark compares them), and the Kafka client params it refuses or names
SPARK_OPTION_KEYS = [
    "assign",
    "subscribe",
    "subscribepattern",
    "startingoffsets",
    "endingoffsets",
    "startingoffsetsbytimestamp",
    "endingoffsetsbytimestamp",
    "startingtimestamp",
    "endingtimestamp",
    "failondataloss",
    "minpartitions",
    "maxrecordsperpartition",
    "maxoffsetspertrigger",
    "minoffsetspertrigger",
    "maxtriggerdelay",
    "fetchoffset.numretries",
    "fetchoffset.retryintervalms",
    "kafkaconsumer.polltimeoutms",
    "startingoffsetsbytimestampstrategy",
    "groupidprefix",
    "includeheaders",
    "topic",
]
KAFKA_PARAMS = {  # kafka.<param>: what Spark's connector does with it
    "bootstrap.servers": "required",
    "group.id": "warned",
    "auto.offset.reset": "refused",
    "key.deserializer": "refused",
    "value.deserializer": "refused",
    "enable.auto.commit": "refused",
    "interceptor.classes": "refused",
    "key.serializer": "refused sink",
    "value.serializer": "refused sink",
}


# ------------------------------------------------------------------ the table and Spark
def test_the_table_has_every_option_of_sparks_kafka_source_provider():
    names = {o.name.lower() for o in ko.KAFKA_OPTIONS}
    assert set(SPARK_OPTION_KEYS) <= names
    for param, what in KAFKA_PARAMS.items():
        row = ko.find(f"kafka.{param}")
        assert row is not None and row.name == f"kafka.{param}", param
        places = (ko.BATCH_SINK, ko.STREAM_SINK) if "sink" in what else (ko.BATCH_SOURCE,)
        want = ko.REFUSED if what.startswith("refused") else ko.IGNORED
        assert all(row.use(p) == want for p in places), (param, row)
    assert ko.find("kafka.security.protocol").name == "kafka.*"
    assert ko.find("KAFKA.Group.Id", ko.BATCH_SINK).name == "kafka.*"  # a producer's
    assert ko.find("Kafka.Partitioner.Class", ko.BATCH_SOURCE).name == "kafka.*"
    for o in ko.KAFKA_OPTIONS:
        uses = [o.use(p) for p in ko.PLACES]
        assert any(uses) and set(uses) <= {None, ko.WORKS, ko.LAKE, ko.IGNORED, ko.REFUSED}


@pytest.mark.skipif(not JAR.exists(), reason="make jars: Spark's Kafka connector")
def test_the_option_names_are_the_pinned_jars():
    with zipfile.ZipFile(JAR) as jar:
        text = jar.read("org/apache/spark/sql/kafka010/KafkaSourceProvider$.class")
    strings = set(re.findall(rb"[a-z][a-z.]+", text))
    assert {k.encode() for k in SPARK_OPTION_KEYS} <= strings


def test_the_readme_tables_are_the_modules():
    readme = (REPO / "README.md").read_text()
    start, end = "<!-- kafka-options: start -->\n", "<!-- kafka-options: end -->"
    assert start in readme and end in readme, "python -m seglake.spark.kafka_options"
    body = readme.split(start, 1)[1].split(end, 1)[0]
    assert body.strip() == ko.readme_tables().strip()


# The integration guide's tables of source and sink options (Spark 4.x): each option with
# the example value or default the guide gives, and its "query type"
GUIDE_SOURCE_OPTIONS = [
    ("assign", '{"topicA":[0,1],"topicB":[2,4]}', "streaming and batch"),
    ("subscribe", "topicA,topicB", "streaming and batch"),
    ("subscribePattern", "topic.*", "streaming and batch"),
    ("kafka.bootstrap.servers", "host1:port1,host2:port2", "streaming and batch"),
    ("startingTimestamp", "1000", "streaming and batch"),
    (
        "startingOffsetsByTimestamp",
        """ {"topicA":{"0": 1000, "1": 1000}, "topicB": {"0": 2000, "1": 2000}} """,
        "streaming and batch",
    ),
    ("startingOffsets", """ {"topicA":{"0":23,"1":-1},"topicB":{"0":-2}} """, "streaming"),
    ("startingOffsets", "earliest", "streaming and batch"),
    ("endingTimestamp", "1000", "batch"),
    (
        "endingOffsetsByTimestamp",
        """ {"topicA":{"0": 1000, "1": 1000}, "topicB": {"0": 2000, "1": 2000}} """,
        "batch",
    ),
    ("endingOffsets", '{"topicA":{"0":23,"1":-1},"topicB":{"0":-1}}', "batch"),
    ("failOnDataLoss", "true", "streaming and batch"),
    ("kafkaConsumer.pollTimeoutMs", "120000", "streaming and batch"),
    ("fetchOffset.numRetries", "3", "streaming and batch"),
    ("fetchOffset.retryIntervalMs", "10", "streaming and batch"),
    ("maxOffsetsPerTrigger", "1000", "streaming"),
    ("minOffsetsPerTrigger", "100", "streaming"),
    ("maxTriggerDelay", "15m", "streaming"),
    ("minPartitions", "8", "streaming and batch"),
    ("maxRecordsPerPartition", "10000", "streaming and batch"),
    ("groupIdPrefix", "spark-kafka-source", "streaming and batch"),
    ("kafka.group.id", "my-group", "streaming and batch"),
    ("includeHeaders", "false", "streaming and batch"),
    ("startingOffsetsByTimestampStrategy", "error", "streaming and batch"),
    ("startingOffsetsByTimestampStrategy", "latest", "streaming and batch"),
]
GUIDE_SINK_OPTIONS = [
    ("kafka.bootstrap.servers", "host1:port1,host2:port2"),
    ("topic", "topic1"),
    ("includeHeaders", "false"),
]


@pytest.mark.parametrize(("name", "value", "kind"), GUIDE_SOURCE_OPTIONS)
def test_every_source_option_of_the_guide_parses(name, value, kind):
    for stream in [s for s in (False, True) if ("streaming" if s else "batch") in kind]:
        chosen = name in ("assign", "subscribe", "subscribePattern")  # one is required
        read = parse_options({**(ROOT if chosen else READ), name: value}, stream=stream)
        assert (name in read.ignored) == (
            ko.find(name).use(ko.STREAM_SOURCE if stream else ko.BATCH_SOURCE) == ko.IGNORED
        )


@pytest.mark.parametrize(("name", "value"), GUIDE_SINK_OPTIONS)
def test_every_sink_option_of_the_guide_is_taken(name, value):
    for place in (ko.BATCH_SINK, ko.STREAM_SINK):
        o = sink_options(
            {"path": "/lake", "topic": "t", name.lower(): value}, "q", False, False, place
        )
        assert str(o.root) == "/lake"


# ------------------------------------------------------------------ the parsers
ROOT = {"path": "/lake"}
READ = {**ROOT, "subscribe": "t"}  # Kafka's source requires subscribe, subscribePattern or assign


def test_a_kafka_source_map_reads_with_its_broker_options_ignored():
    opts = {
        **ROOT,
        "kafka.bootstrap.servers": "host1:port1,host2:port2",
        "subscribe": "topic1",
        "groupIdPrefix": "g",
        "fetchOffset.numRetries": "3",
        "kafkaConsumer.pollTimeoutMs": "1000",
        "kafka.security.protocol": "SASL_SSL",
        "maxOffsetsPerTrigger": "10",  # stream only: a batch read ignores it, as Spark's
        "MinPartitions": "4",
        "maxRecordsPerPartition": "1000",
        "kafka.isolation.level": "read_committed",
    }
    read = parse_options(opts)
    assert read.topics == ("topic1",) and read.isolation_level == "read_committed"
    assert (read.min_partitions, read.max_records_per_partition) == (4, 1000)
    assert read.ignored == (
        "kafka.bootstrap.servers",
        "groupIdPrefix",
        "fetchOffset.numRetries",
        "kafkaConsumer.pollTimeoutMs",
        "kafka.security.protocol",
        "maxOffsetsPerTrigger",
    )
    stream = parse_options(
        {**opts, "endingTimestamp": "later", "maxTriggerDelay": "1d"}, stream=True
    )
    assert "maxOffsetsPerTrigger" not in stream.ignored  # a stream's
    assert "endingTimestamp" in stream.ignored  # not checked by Spark in a stream
    assert parse_options(READ).min_partitions is None


@pytest.mark.parametrize(
    ("options", "stream", "message"),
    [
        ({"subscrbe": "t"}, False, "unknown option(s) subscrbe (did you mean 'subscribe'?)"),
        ({"minPartition": "2"}, True, "(did you mean 'minPartitions'?)"),
        ({"topic": "t"}, False, "topic: an option of Spark's Kafka batch sink and stream sink"),
        ({"kafka.AUTO.offset.reset": "x"}, True, "kafka.auto.offset.reset: refused"),
        ({"kafka.auto.offset.reset": "earliest"}, False, "use startingOffsets"),
        ({"kafka.key.deserializer": "x"}, True, "kafka.key.deserializer: refused"),
        ({"endingOffsets": "latest"}, True, "endingOffsets: batch:"),
        ({"versionAsOf": "1"}, True, "versionAsOf: not for a streaming read"),
        ({"minPartitions": "0"}, False, "minPartitions: 0 is below 1"),
        ({"maxRecordsPerPartition": "many"}, True, "maxRecordsPerPartition: 'many' is not"),
        # KafkaSourceProvider.validateGeneralOptions' refusals, in its words
        ({"subscribe": None}, False, "One of the following options must be specified for"),
        ({"subscribe": None}, True, "Kafka source: subscribe, subscribePattern, assign."),
        ({"assign": '{"t":[0]}'}, False, "Only one of the following options can be specified"),
        ({"subscribe": " , "}, False, "No topics to subscribe to as specified value for"),
        ({"subscribe": None, "subscribePattern": ""}, True, "Pattern to subscribe is empty"),
        ({"subscribe": None, "assign": "{}"}, False, "No topicpartitions to assign"),
        ({"subscribe": None, "subscribePattern": "top{"}, False, "illegal repetition near"),
    ],
)
def test_read_option_errors_are_one_line(options, stream, message):
    given = {k: v for k, v in {**READ, **options}.items() if v is not None}
    with pytest.raises(ConfigError) as info:
        parse_options(given, stream=stream)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_subscribe_drops_empty_names_as_sparks():
    assert parse_options({**ROOT, "subscribe": "t1,, t2 ,"}).topics == ("t1", "t2")


def test_sinks_take_a_kafka_sink_map(caplog):
    opts = {
        "path": "/lake",
        "topic": "topic1",
        "kafka.bootstrap.servers": "h:1",
        "kafka.partitioner.class": "org.example.P",
        "kafka.acks": "all",
        "includeheaders": "true",
        "compression.type": "zstd",
    }
    with caplog.at_level(logging.WARNING, logger=ko.__name__):
        for place in (ko.BATCH_SINK, ko.STREAM_SINK):
            o = sink_options(opts, "q", False, False, place)
            assert o.topic == "topic1" and o.config.compression_type == "zstd"
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2  # one line a job or query, naming every ignored option
    assert "kafka.bootstrap.servers, kafka.partitioner.class, kafka.acks" in lines[0]
    for bad, message in [
        ({"kafka.value.serializer": "x"}, "kafka.value.serializer: refused"),
        ({"subscribe": "t"}, "subscribe: an option of Spark's Kafka batch source"),
        ({"compresion.type": "zstd"}, "(did you mean 'compression.type'?)"),
    ]:
        with pytest.raises(ConfigError, match=re.escape(message)):
            sink_options({**opts, **bad}, "q", False, False)


def test_ignored_options_are_one_warning_line(caplog):
    with caplog.at_level(logging.WARNING, logger=ko.__name__):
        ko.warn_ignored((), "source")
        ko.warn_ignored(("kafka.bootstrap.servers", "groupidprefix", "kafka.ACKS"), "source")
    [line] = [r.getMessage() for r in caplog.records]  # as Spark's docs spell them
    assert "ignored option(s) kafka.bootstrap.servers, groupIdPrefix, kafka.ACKS:" in line


# ------------------------------------------------------------------ Spark's time strings
LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1
MICROS = {"us": 1, "ms": 10**3, "s": 10**6, "m": 6 * 10**7, "min": 6 * 10**7}
MICROS |= {"h": 36 * 10**8, "d": 864 * 10**8}


def spark_time_string_ms(text: str) -> int | None:
    """Brute force of ``JavaUtils.timeStringAs(text, MILLISECONDS)``: None where it throws.
    Character by character: Java's trim (code points <= U+0020), lower case, an optional
    '-', ASCII digits, ASCII letters; ``Long.parseLong``; ``TimeUnit.convert``."""
    chars = list(text)
    while chars and ord(chars[0]) <= 0x20:
        chars.pop(0)
    while chars and ord(chars[-1]) <= 0x20:
        chars.pop()
    s = "".join(chars).lower()
    i = 1 if s.startswith("-") else 0
    j = i
    while j < len(s) and s[j] in "0123456789":
        j += 1
    if j == i or any(c not in "abcdefghijklmnopqrstuvwxyz" for c in s[j:]):
        return None
    number, suffix = int(s[:j]), s[j:] or "ms"
    if not LONG_MIN <= number <= LONG_MAX or suffix not in MICROS:
        return None
    ms = Fraction(number * MICROS[suffix], 1000)  # exact; int(): toward zero, as Java's
    return max(LONG_MIN, min(LONG_MAX, int(ms)))  # TimeUnit.convert saturates


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("1d", 86_400_000),
        ("500ms", 500),
        ("10us", 0),
        ("1500us", 1),
        ("-1500us", -1),
        ("15m", 900_000),
        ("15min", 900_000),
        ("1h", 3_600_000),
        ("42", 42),
        (" 5S\t", 5000),
        ("9223372036854775807d", LONG_MAX),
        ("-9223372036854775808d", LONG_MIN),
    ],
)
def test_time_strings(text, ms):
    assert time_string_as(text, "ms") == ms == spark_time_string_ms(text)
    assert duration_ms("maxTriggerDelay", text) == ms


@pytest.mark.parametrize("text", ["", "1 s", "1w", "1.5s", "+1s", "s", "9223372036854775808"])
def test_time_strings_spark_refuses(text):
    assert spark_time_string_ms(text) is None
    with pytest.raises(ConfigError, match=r"maxTriggerDelay: .* is not a duration"):
        duration_ms("maxTriggerDelay", text)


@settings(max_examples=500, deadline=None)
@given(
    st.text(alphabet=st.sampled_from(list("0123456789-+ \t\x00\xa0usmhdinwSMHD.")), max_size=12)
    | st.builds(
        lambda n, s, pad: f"{pad}{n}{s}{pad}",
        st.integers(LONG_MIN - 10, LONG_MAX + 10),
        st.sampled_from(["", *MICROS, "MS", "Min", "x", "sec"]),
        st.sampled_from(["", " ", "\n"]),
    )
)
@example("007ms")
@example("-0us")
def test_time_string_as_is_sparks_rule(text):
    want = spark_time_string_ms(text)
    if want is None:
        with pytest.raises(ValueError):
            time_string_as(text, "ms")
    else:
        assert time_string_as(text, "ms") == want


@pytest.mark.parametrize("place", [ko.BATCH_SINK, ko.STREAM_SINK])
def test_a_producers_codec_is_the_batches_unless_the_topic_says_otherwise(place):
    """Kafka: a producer's ``compression.type`` is kept by a broker whose topic says
    ``producer``, else the topic's codec wins (recompressed); here the lake's settings are
    the broker's, so the producer's codec is broker level, under the topic's."""
    from seglake.lake.topic_config import with_topics

    producer = {"path": "/lake", "kafka.compression.type": "lz4"}
    producer["kafka.compression.LZ4.level"] = "3"
    o = sink_options(producer, "q", False, False, place)
    assert (o.config.compression_type, o.config.lz4_level) == ("lz4", 3)
    stored = with_topics(o.config, {"t": {"compression.type": "gzip"}})
    assert stored.for_topic("t").codec == 1 and stored.for_topic("u").codec == 3
    job = sink_options({**producer, "compression.type": "zstd"}, "q", False, False, place)
    assert with_topics(job.config, {"t": {"compression.type": "gzip"}}).for_topic("t").codec == 4
    with pytest.raises(ConfigError, match=r"compression\.type"):
        sink_options({**producer, "kafka.compression.type": "brotli"}, "q", False, False, place)
