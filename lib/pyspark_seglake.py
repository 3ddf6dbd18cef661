"""``format("seglake")`` without ``seglake.spark.register(spark)``: Spark 4 registers every
Python data source it finds as a top-level module named ``pyspark_*`` with a
``DefaultSource`` (a ``pyspark.sql.datasource.DataSource``) on the Python path of its
workers (``pyspark/sql/worker/lookup_data_sources.py``, at a session's first data source
lookup). ``register(spark)`` (or ``seglake.spark.session.get_session``) still adds what
discovery cannot: Python filter pushdown and the session's parallelism for packing."""

from seglake.spark.datasource import DiscoveredDataSource as DefaultSource

__all__ = ["DefaultSource"]
