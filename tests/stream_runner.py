"""One streaming query in its own Spark session: the driver the streaming crash tests kill.

    python tests/stream_runner.py SPEC_JSON

``SPEC_JSON``: ``{"input" (a directory of JSON files), "schema" (DDL), "root", "checkpoint",
"options" (the sink's), "max_files" (files per micro-batch)}``, or ``"kafka"`` (the Kafka
source's options: a topic archived) instead of input and schema; the query runs with
``Trigger.AvailableNow`` and prints ``{"batches": N}``. With ``SEGLAKE_CRASH_AT`` set, a
crash point SIGKILLs the whole process group (driver, JVM, Python workers), as in
tests/crash_runner.py.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: the repo root
from tests.crash_runner import JVM_OPTIONS


def run(spec: dict[str, Any]) -> dict[str, Any]:
    import seglake.spark
    from seglake.spark.session import CONF_DIR, get_session

    log4j = f"-Dlog4j.configurationFile=file:{CONF_DIR / 'log4j2.properties'}"
    conf = {"spark.driver.extraJavaOptions": f"{log4j} {JVM_OPTIONS}", **spec.get("spark_conf", {})}
    spark = get_session("seglake-stream-crash", master="local[1]", quiet=True, conf=conf)
    seglake.spark.register(spark)
    if "kafka" in spec:
        df = spark.readStream.format("kafka").options(**spec["kafka"]).load()
    else:
        df = (
            spark.readStream.schema(spec["schema"])
            .option("maxFilesPerTrigger", spec.get("max_files", 1))
            .json(spec["input"])
        )
    writer = df.writeStream.format("seglake").option("checkpointLocation", spec["checkpoint"])
    for k, v in spec.get("options", {}).items():
        writer = writer.option(k, v)
    query = writer.trigger(availableNow=True).start(spec["root"])
    query.awaitTermination()
    return {"batches": len(query.recentProgress)}


def main(argv: list[str]) -> int:
    from seglake.testing_hooks import CRASH_AT, CRASH_PGID

    spec = json.loads(argv[0])
    if os.environ.get(CRASH_AT):
        if os.getpgrp() != os.getpid():
            print("stream_runner: not a process group leader", file=sys.stderr)
            return 2
        os.environ[CRASH_PGID] = str(os.getpgrp())
    print(json.dumps(run(spec)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
