"""Spark integration: the only package of seglake that imports pyspark."""
