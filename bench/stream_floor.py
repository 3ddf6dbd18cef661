"""The floor of any Python streaming source (bench/streaming.py's ``python floor`` case):
the source's rows decoded beforehand into Arrow IPC files, one per task, which a
``DataSourceStreamReader`` memory-maps and hands to Spark as they are (no planning, no
reading of segments, no decoding). What is left is the Python data source API's own cost:
its driver-side Python runner and planner, one Python worker per task, and the Arrow
batches' way into the JVM.

    register(spark)   then spark.readStream.format("pyfloor").load(folder)
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark import cloudpickle
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow

BATCH_ROWS = 100_000


def write_floor(rows: Path, folder: Path, schema: pa.Schema, tasks: int) -> None:
    """The parquet rows (cast to ``schema``) as ``tasks`` Arrow IPC files in ``folder``."""
    table = pq.read_table(rows).select(schema.names).cast(schema)
    folder.mkdir(parents=True)
    step = -(-table.num_rows // tasks)
    for i in range(tasks):
        path = str(folder / f"{i:03d}.arrow")
        with pa.OSFile(path, "wb") as f, pa.ipc.new_file(f, schema) as w:
            w.write_table(table.slice(i * step, step), max_chunksize=BATCH_ROWS)


class FloorReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """One micro-batch of every file (offsets ``{"files": n}``)."""

    def __init__(self, folder: str) -> None:
        self.files = sorted(str(p) for p in Path(folder).glob("*.arrow"))

    def initialOffset(self) -> dict:
        return {"files": 0}

    def latestOffset(self, start: dict, limit: Any) -> dict:
        return {"files": len(self.files)}

    def prepareForTriggerAvailableNow(self) -> None:
        pass

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        return [InputPartition(f) for f in self.files[start["files"] : end["files"]]]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        with pa.memory_map(partition.value) as src:
            yield from pa.ipc.open_file(src).read_all().to_batches()

    def commit(self, end: dict) -> None:
        pass


class FloorSource(DataSource):
    schema_: pa.Schema = pa.schema([])

    @classmethod
    def name(cls) -> str:
        return "pyfloor"

    def schema(self) -> Any:
        return from_arrow_schema(self.schema_)

    def streamReader(self, schema: Any) -> FloorReader:
        return FloorReader(self.options["path"])


def register(spark: Any, schema: pa.Schema) -> None:
    """Register ``pyfloor`` with rows of ``schema`` (sent by value: the executors' Python
    does not see bench/)."""
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    spark.dataSource.register(type("SessionFloorSource", (FloorSource,), {"schema_": schema}))
