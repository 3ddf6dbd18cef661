"""Kafka's default partitioner: known vectors from Kafka's UtilsTest, and kafka-python as oracle."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.partitioner.default import murmur2 as kafka_python_murmur2

from seglake.record.partitioner import default_partition, murmur2

# org.apache.kafka.common.utils.UtilsTest#testMurmur2
KAFKA_VECTORS = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


def _as_int32(x: int) -> int:
    return (x + 2**31) % 2**32 - 2**31


def test_murmur2_kafka_vectors():
    got = murmur2(pa.array(list(KAFKA_VECTORS), pa.binary()))
    assert got.tolist() == list(KAFKA_VECTORS.values())


@settings(max_examples=60, deadline=None)
@given(st.lists(st.binary(max_size=70), min_size=1, max_size=50), st.integers(1, 64))
def test_murmur2_and_partition_equal_kafka_python(keys, n):
    arr = pa.array(keys, pa.binary())
    expected = [_as_int32(kafka_python_murmur2(k)) for k in keys]
    assert murmur2(arr).tolist() == expected
    assert default_partition(arr, n).tolist() == [(e & 0x7FFFFFFF) % n for e in expected]


def test_null_keys_round_robin_and_sliced_arrays():
    arr = pa.array([b"a", None, b"foobar", None, None, b"21"], pa.binary())
    parts = default_partition(arr, 3, null_start=1)
    assert parts[[1, 3, 4]].tolist() == [1, 2, 0]
    assert parts[2] == (KAFKA_VECTORS[b"foobar"] & 0x7FFFFFFF) % 3
    sliced = arr.slice(2, 4)
    assert murmur2(sliced)[[0, 3]].tolist() == [KAFKA_VECTORS[b"foobar"], KAFKA_VECTORS[b"21"]]
    assert np.array_equal(murmur2(pa.array(["abc"])), [KAFKA_VECTORS[b"abc"]])
