"""Building a SparkSession the way seglake's jobs and tests want it."""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shlex
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyspark.sql import SparkSession

from seglake import errors
from seglake.errors import SeglakeError
from seglake.fs import refused
from seglake.lake.tasks import MapTasks

if TYPE_CHECKING:
    from pyspark import Accumulator
    from pyspark.sql.types import StructType

CONF_DIR = Path(__file__).resolve().parents[3] / "conf"
# `make jars` fetches Spark's Kafka connector and delta-spark here (jars/spark/pom.xml)
JARS_DIR = Path(__file__).resolve().parents[3] / ".jars" / "spark"
DELTA_CONF = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
}


def extra_jars() -> list[str]:
    """The jars ``make jars`` fetched for Spark (connector, Delta), sorted; none without mvn."""
    return sorted(str(p) for p in JARS_DIR.glob("*.jar"))


def has_delta_spark(spark: SparkSession) -> bool:
    """Delta's session extension is configured (delta-spark reads and writes ``delta``)."""
    return "delta" in (spark.conf.get("spark.sql.extensions", "") or "").lower()


def jar_conf() -> dict[str, str]:
    """``spark.jars`` and Delta's session extension when the jars are there."""
    jars = extra_jars()
    if not jars:
        return {}
    conf = {"spark.jars": ",".join(jars)}
    if any(Path(j).name.startswith("delta-spark") for j in jars):
        conf.update(DELTA_CONF)
    return conf


def log_file() -> Path:
    """Where the driver's Spark log goes (``conf/log4j2.properties``): ``$SEGLAKE_LOG_FILE``
    (spark-submit.sh sets it per run), else ``build/logs/spark.log``."""
    return Path(os.environ.get("SEGLAKE_LOG_FILE") or CONF_DIR.parent / "build/logs/spark.log")


# PYSPARK_PYTHON for a local session: this interpreter, its PYTHONPATH without the
# pyspark.zip Spark puts first (see worker_python)
_WORKER_SCRIPT = """#!/bin/sh
# written by seglake.spark.session.worker_python: {python} with pyspark imported from
# its installed package, not from {lib}/*.zip (compiled from source at every start)
set -f
new=
IFS=:
for p in $PYTHONPATH; do
  case "$p" in
    {lib_glob}) ;;
    *) new="${{new:+$new:}}$p" ;;
  esac
done
unset IFS
PYTHONPATH=$new
export PYTHONPATH
exec {python} "$@"
"""


def worker_python() -> str | None:
    """A ``PYSPARK_PYTHON`` for this interpreter whose Python workers import pyspark from
    the installed package (its cached ``.pyc``) instead of the ``pyspark.zip`` Spark puts
    first on their ``PYTHONPATH`` (pip's ``pyspark/python/lib``: no ``.pyc`` in it, every
    module compiled at every start, 3x the CPU). A driver-side Python worker (each
    ``readStream`` query's source runner, each data source's planner) must connect back
    within 10 s (Spark's ``PythonWorkerFactory``, not configurable): four streams started
    together on a loaded 2-core machine failed with ``Python worker failed to connect
    back`` (their imports took 2.5-8.5 s each from the zip, 1-2 s without). ``None`` when
    pyspark is not pip's layout (a Spark distribution's ``SPARK_HOME``): nothing to cut;
    or no folder to write the script to (``~/.cache/seglake``, else the temp directory)."""
    import pyspark

    lib = Path(pyspark.__file__).resolve().parent / "python" / "lib"
    if not (lib / "pyspark.zip").is_file() or ".zip" in pyspark.__file__:
        return None
    text = _WORKER_SCRIPT.format(
        python=shlex.quote(sys.executable), lib=lib, lib_glob=shlex.quote(str(lib)) + "/*.zip"
    )
    name = f"python-{hashlib.sha256(text.encode()).hexdigest()[:16]}"
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "seglake"
    # the user's cache (not cleaned under a long session as /tmp may be), else /tmp
    for folder in (cache, Path(tempfile.gettempdir()) / f"seglake-{os.getuid()}"):
        script = folder / name
        if script.is_file():
            return str(script)
        try:
            folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            tmp = folder / f".{name}.{os.getpid()}"
            tmp.write_text(text)
            tmp.chmod(0o755)
            os.replace(tmp, script)  # sessions started at once: each its whole file
        except OSError:
            continue
        return str(script)
    return None


DEFAULTS = {
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.sql.python.filterPushdown.enabled": "true",
    "spark.sql.session.timeZone": "UTC",
    "spark.python.worker.reuse": "true",
    # Arrow batches to Python: fewer, larger ones (ingest groups rows per batch), capped
    # in bytes so large messages do not make huge batches
    "spark.sql.execution.arrow.maxRecordsPerBatch": "65536",
    "spark.sql.execution.arrow.maxBytesPerBatch": str(32 * 1024 * 1024),
}


def get_session(
    app_name: str = "seglake",
    *,
    master: str | None = None,
    conf: dict[str, str] | None = None,
    quiet: bool = False,
) -> SparkSession:
    """The active session, or a new one with seglake's defaults.

    ``master`` defaults to ``local[*]`` unless spark-submit already set one. ``quiet``
    hides the console progress bar (tests); people running jobs keep it.
    """
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name)
    local = False
    if master or not os.environ.get("SPARK_SUBMIT_ORIGIN"):
        master = master or os.environ.get("SEGLAKE_MASTER", "local[*]")
        builder = builder.master(master)
        local = master.startswith("local")
    if os.environ.get("PYSPARK_PYTHON", sys.executable) == sys.executable:
        # this interpreter; on a local master its workers (all on this machine) start
        # without compiling pyspark.zip (a cluster's executors have no such script)
        os.environ["PYSPARK_PYTHON"] = (local and worker_python()) or sys.executable
    log4j = CONF_DIR / "log4j2.properties"
    if log4j.exists():
        opt = f"-Dlog4j.configurationFile=file:{log4j} -Dseglake.log.file={log_file()}"
        builder = builder.config("spark.driver.extraJavaOptions", opt)
        executor = CONF_DIR / "log4j2-executor.properties"
        opt = f"-Dlog4j.configurationFile=file:{executor}"
        builder = builder.config("spark.executor.extraJavaOptions", opt)
    # spark-submit.sh passes the jars itself
    extra = {} if os.environ.get("SPARK_SUBMIT_ORIGIN") else jar_conf()
    for key, value in {**DEFAULTS, **extra, **(conf or {})}.items():
        builder = builder.config(key, value)
    if quiet:
        builder = builder.config("spark.ui.showConsoleProgress", "false")
        builder = builder.config("spark.ui.enabled", "false")
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark


def spark_schema(schema: pa.Schema) -> StructType:
    """The Spark ``StructType`` of an Arrow schema (no DDL for the JVM to parse)."""
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(schema)


def task_mapper(spark: SparkSession) -> MapTasks:
    """A lake operation's ``map_tasks`` (:mod:`seglake.lake.tasks`) on Spark: one task per
    item, results in order."""
    sc = spark.sparkContext

    def map_tasks(fn: Callable[[Any], Any], items: list[Any]) -> list[Any]:
        return sc.parallelize(items, len(items)).map(fn).collect() if items else []

    return map_tasks


def list_accumulator(spark: SparkSession) -> Accumulator[list[str]] | None:
    """A Spark accumulator of lines (tasks ``add`` lists; the driver reads ``value``),
    or ``None`` where accumulators are not available (e.g. Spark Connect)."""
    from pyspark.accumulators import AccumulatorParam

    class _Lines(AccumulatorParam[list[str]]):
        def zero(self, value: list[str]) -> list[str]:
            return []

        def addInPlace(self, a: list[str], b: list[str]) -> list[str]:
            a.extend(b)
            return a

    try:
        return spark.sparkContext.accumulator([], _Lines())
    except Exception:  # no SparkContext here
        return None


# a worker's last line (its traceback before it), or after Spark's prefix on the line
# (``[PYTHON_DATA_SOURCE_ERROR] Failed to ...: seglake.errors.X: ...``, worker_errors.py),
# Spark's ``SQLSTATE: ...`` after it
_TASK_ERROR = re.compile(
    r"(?:^|: )seglake\.(?:\w+\.)*?(\w+(?:Error|Warning)): (.+?)(?:\s+SQLSTATE: \w+)*$",
    re.MULTILINE,
)
_LAST_ERROR = re.compile(r"^(?:\w+\.)*\w*(?:Error|Exception): (.+)$", re.MULTILINE)


def task_error(exc: BaseException) -> SeglakeError | None:
    """The :class:`SeglakeError` a Python worker raised, rebuilt from the Spark exception
    that carries its text (``PythonException``, ``AnalysisException``,
    ``StreamingQueryException``, ``Py4JJavaError``); ``exc`` itself if it is one; ``None``
    for other failures. Jobs print it as one line; the notebook API raises it."""
    if isinstance(exc, SeglakeError):
        return exc
    found = _TASK_ERROR.findall(str(exc))  # the last one named: the error the task raised
    if not found:  # a task's OSError the file system raised: one line too
        last = _LAST_ERROR.findall(str(exc))
        return refused(RuntimeError(last[-1])) if last else None
    name, message = found[-1]
    cls = getattr(errors, name, None)
    if cls is errors.VersionSupersededError:  # its version and run are in the text
        from seglake.lake.pinned import superseded_from_text

        return superseded_from_text(message.strip())
    if not (isinstance(cls, type) and issubclass(cls, SeglakeError)):
        cls = SeglakeError
    return cls(message.strip())


@contextlib.contextmanager
def seglake_errors() -> Iterator[None]:
    """Spark's exception that carries a seglake error (a task's, a data source's: see
    :func:`task_error`) re-raised as that error ``from None``: its one line is what a
    notebook shows, not Spark's header and traceback. Other exceptions pass unchanged.
    A context manager and a decorator (``ingest``, ``compact``)::

        with seglake.spark.seglake_errors():
            spark.read.format("seglake").option(...).load(root).count()
    """
    try:
        yield
    except Exception as exc:
        err = task_error(exc)
        if err is None or err is exc:
            raise
        raise err from None


def spark_error(exc: BaseException) -> Exception | None:
    """Spark's own refusal of what it was given (a file it cannot read, an output path
    that exists, a value it cannot cast): ``exc`` with its first line only, the JVM's
    stack trace dropped; ``None`` for anything else (a bug keeps its traceback)."""
    from pyspark.errors.exceptions.captured import CapturedException, PythonException

    if isinstance(exc, PythonException):  # a Python task failed: keep its traceback
        return None
    if isinstance(exc, CapturedException):
        text = exc.getMessage()
    elif type(exc).__name__ == "Py4JJavaError":  # py4j.protocol's (no type stubs)
        text = str(getattr(exc, "java_exception", exc))
    else:
        return None
    if "PythonException" in str(text):
        return None
    lines = [line.strip() for line in str(text).splitlines() if line.strip()]
    return SeglakeError(lines[0] if lines else type(exc).__name__)
