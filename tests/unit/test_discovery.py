"""``format("seglake")`` with no ``register(spark)`` call: pyspark's own lookup of Python
data sources (what a session's first data source lookup runs in a Python worker) finds
``pyspark_seglake.DefaultSource``. Old code: no such module, the lookup found nothing and
``format("seglake")`` was DATA_SOURCE_NOT_FOUND in a fresh session."""

from __future__ import annotations

import io

import pytest

pytest.importorskip("pyspark")


def test_pysparks_lookup_finds_the_seglake_source() -> None:
    from pyspark.serializers import UTF8Deserializer, read_int
    from pyspark.sql.datasource import DataSourceReader
    from pyspark.sql.worker.lookup_data_sources import _main
    from pyspark.worker_util import pickleSer

    out = io.BytesIO()
    _main(io.BytesIO(), out)
    out.seek(0)
    found = {}
    for _ in range(read_int(out)):
        name = UTF8Deserializer().loads(out)
        found[name] = pickleSer._read_with_length(out)
    assert "seglake" in found
    source = found["seglake"]
    assert source.name() == "seglake"
    # a fresh session has Python filter pushdown off: Spark refuses a reader that
    # implements pushFilters then, so the discovered source's reader pushes none
    assert source.reader_class.pushFilters is DataSourceReader.pushFilters
