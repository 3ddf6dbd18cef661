"""Errors of the data source, the stream source and the sink reach the user as seglake's
one line: the first line of the exception Spark raises ends with
``seglake.errors.<Class>: <message>`` (Spark's own condition prefix before it on that
line, its ``SQLSTATE`` after), no Python traceback anywhere in it (old code: 7-17 lines
of the worker's traceback came first), no ``UnboundLocalError`` (old code: a bad stream
option came out as pyspark's stream runner failing to stop a reader it never made), and
:func:`task_error` rebuilds seglake's error from it."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

import seglake.spark
from seglake import errors
from seglake.lake.catalog import Catalog
from seglake.spark.ingest import ingest
from seglake.spark.session import seglake_errors, task_error
from seglake.spark.worker_errors import HIDE_TRACEBACK, WORKER_MARKER, one_line_errors

pytestmark = pytest.mark.spark
T0 = 1_767_225_600_000


@pytest.fixture(scope="module")
def lake(spark, tmp_path_factory) -> str:
    seglake.spark.register(spark)
    root = str(tmp_path_factory.mktemp("errors") / "lake")
    rows = [(f"k{i}".encode(), b"v" * 50, T0 + i) for i in range(200)]
    df = spark.createDataFrame(rows, "key binary, value binary, timestamp long")
    ingest(spark, df, root, topic="t", num_partitions=1)
    return root


# PythonException's own first line (pyspark's __str__): a task's error follows it
WORKER_HEADER = "An exception was thrown from the Python worker:"


def assert_one_line(exc: BaseException, cls: type, message: str) -> None:
    """``exc`` names seglake's ``cls: message...`` (its whole message: ``message`` is its
    start) on its first line (after Spark's own header line for a task's error), nothing
    of a traceback in it; task_error gives the error back, and seglake_errors (the
    notebook API, ingest, compact) raises it alone: its str is the one line."""
    text = str(exc)
    assert "Traceback" not in text and "UnboundLocalError" not in text, text
    lines = text.splitlines()
    first = re.sub(r"(\s+SQLSTATE: \w+)+$", "", lines[1 if lines[0] == WORKER_HEADER else 0])
    name = f"seglake.errors.{cls.__name__}: "
    assert name in first, text
    whole = first.split(name, 1)[1]
    assert whole.startswith(message), first
    err = task_error(exc)
    assert type(err) is cls and str(err) == whole
    with pytest.raises(cls) as info, seglake_errors():
        raise exc
    assert str(info.value) == whole and "\n" not in whole
    assert info.value.__cause__ is None and info.value.__suppress_context__


def test_batch_read_option_and_planning_errors(spark, lake: str) -> None:
    with pytest.raises(Exception) as info:  # reader(): a planner worker
        spark.read.format("seglake").option("subscribePattern", ".*").option(
            "startingOffsets", "latest"
        ).load(lake).count()
    assert_one_line(info.value, errors.ConfigError, "startingOffsets: 'latest' is not allowed")
    with pytest.raises(Exception) as info:  # partitions(): a planner worker
        spark.read.format("seglake").option("subscribePattern", ".*").option(
            "startingTimestamp", str(T0 + 10**6)
        ).load(lake).count()
    assert_one_line(
        info.value,
        errors.ConfigError,
        f"startingTimestamp: no record of t-0 has a timestamp >= {T0 + 10**6} (largest",
    )


def test_a_tasks_error_is_one_line(spark, lake: str, tmp_path: Path) -> None:
    """A damaged batch found by an executor's read (a PythonException in a failed job)."""
    import shutil

    root = str(tmp_path / "lake")
    shutil.copytree(lake, root)
    log = Path(root, Catalog(root).segments().to_pylist()[0]["path"])
    data = bytearray(log.read_bytes())
    data[200] ^= 0xFF  # inside the first batch's records: its CRC no longer matches
    log.write_bytes(bytes(data))
    with pytest.raises(Exception) as info:
        spark.read.format("seglake").option("subscribePattern", ".*").load(root).count()
    assert_one_line(info.value, errors.CorruptRecordError, f"{log}")


def test_stream_source_errors(spark, lake: str, tmp_path: Path) -> None:
    def run(**options: str) -> None:
        q = (
            spark.readStream.format("seglake")
            .options(**options)
            .load(lake)
            .writeStream.format("noop")
            .option("checkpointLocation", str(tmp_path / f"cp{len(list(tmp_path.iterdir()))}"))
            .trigger(availableNow=True)
            .start()
        )
        q.awaitTermination()

    with pytest.raises(Exception) as info:  # old code: UnboundLocalError after it
        run(subscribePattern=".*", maxOffsetsPerTrigger="x")
    assert_one_line(info.value, errors.ConfigError, "maxOffsetsPerTrigger: 'x' is not an integer")
    with pytest.raises(Exception) as info:
        run(subscribe="nope")
    assert_one_line(info.value, errors.ConfigError, "subscribe: no topic nope in the lake")


def test_sink_errors(spark, lake: str, tmp_path: Path) -> None:
    def run(i: int, **options: str) -> None:
        q = (
            spark.readStream.format("seglake")
            .option("subscribePattern", ".*")
            .option("startingOffsets", "earliest")
            .load(lake)
            .writeStream.format("seglake")
            .option("checkpointLocation", str(tmp_path / f"cp{i}"))
            .options(**options)
            .trigger(availableNow=True)
            .start(str(tmp_path / "out"))
        )
        q.awaitTermination()

    with pytest.raises(Exception) as info:  # streamWriter(): the options
        run(0, **{"compression.type": "bogus"})
    assert_one_line(info.value, errors.ConfigError, "compression.type='bogus': expected one of")


def test_only_seglake_errors_in_a_spark_worker_hide_the_traceback(monkeypatch) -> None:
    @one_line_errors
    class Source:
        def fails(self, exc: Exception) -> None:
            raise exc

        def rows(self, exc: Exception):
            yield 1
            raise exc

    monkeypatch.setenv(HIDE_TRACEBACK, "")  # restored (removed) after the test
    monkeypatch.delenv(HIDE_TRACEBACK)
    with pytest.raises(errors.ConfigError):  # the driver's own process: nothing changes
        Source().fails(errors.ConfigError("bad"))
    assert HIDE_TRACEBACK not in os.environ
    monkeypatch.setenv(WORKER_MARKER, "x")  # a Spark Python worker
    with pytest.raises(ValueError):  # a bug keeps its traceback
        Source().fails(ValueError("bug"))
    assert HIDE_TRACEBACK not in os.environ
    with pytest.raises(errors.ConfigError, match=r"^two lines$"):
        list(Source().rows(errors.ConfigError("two\nlines")))
    assert os.environ[HIDE_TRACEBACK] == "1"


def test_task_error_keeps_every_seglake_class() -> None:
    """Old code: the stream source's DataLossError (not in seglake.errors) came back as a
    plain SeglakeError; an error after Spark's prefix on a line was not found at all."""
    line = "[PYTHON_DATA_SOURCE_ERROR] Failed to plan: seglake.errors.DataLossError: t-0 gone"
    err = task_error(Exception(line + " SQLSTATE: 38000"))
    assert type(err) is errors.DataLossError and str(err) == "t-0 gone"
