"""One ingest in its own Spark session: the driver process the crash tests kill.

    python tests/crash_runner.py SPEC_JSON

``SPEC_JSON``: ``{"root", "input" (parquet path), "run_id", "num_partitions", "conf"
(Kafka-named overrides), "master", "spark_conf", "via"}`` (``"via": "write"``: the input
appended by ``df.write.format("seglake")`` instead, ``conf`` as its options). Prints the
result as one JSON line.

Started by the tests in a session of its own (``start_new_session=True``), so with
``SEGLAKE_CRASH_AT`` set and ``"kill": "group"`` in the spec the crash point SIGKILLs
the whole process group: this driver, its JVM and its Python workers, never the test
process. Otherwise only the process reaching the point dies (an executor's task).
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

# a short-lived driver JVM: C1 only and the serial GC start it about a third faster
JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def run(spec: dict[str, Any]) -> dict[str, Any]:
    """Ingest ``spec["input"]`` into ``spec["root"]``; the result as a dict."""
    from seglake.spark.ingest import ingest
    from seglake.spark.session import CONF_DIR, get_session

    log4j = f"-Dlog4j.configurationFile=file:{CONF_DIR / 'log4j2.properties'}"
    conf = {"spark.driver.extraJavaOptions": f"{log4j} {JVM_OPTIONS}", **spec.get("spark_conf", {})}
    spark = get_session(
        "seglake-crash", master=spec.get("master", "local[1]"), quiet=True, conf=conf
    )
    if spec.get("via") == "write":  # df.write.format("seglake"): the batch sink
        from seglake.lake.catalog import Catalog
        from seglake.spark import register

        register(spark)
        (
            spark.read.parquet(spec["input"])
            .write.format("seglake")
            .options(**spec.get("conf", {}))
            .mode("append")
            .save(spec["root"])
        )
        return {"committed": True, "version": Catalog(spec["root"]).version()}
    result = ingest(
        spark,
        spark.read.parquet(spec["input"]),
        spec["root"],
        run_id=spec["run_id"],
        num_partitions=spec["num_partitions"],
        conf=spec.get("conf"),
    )
    return {
        "committed": result.committed,
        "already_committed": result.already_committed,
        "records": result.records,
        "version": result.catalog_version,
    }


def main(argv: list[str]) -> int:
    from seglake.testing_hooks import CRASH_AT, CRASH_PGID

    spec = json.loads(argv[0])
    if os.environ.get(CRASH_AT) and spec.get("kill") == "group":
        if os.getpgrp() != os.getpid():
            print(
                "crash_runner: not a process group leader, refusing to arm a group kill",
                file=sys.stderr,
            )
            return 2
        os.environ[CRASH_PGID] = str(os.getpgrp())  # inherited by the JVM and workers
    print(json.dumps(run(spec)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
