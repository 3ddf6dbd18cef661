"""Sample messages for the demo and the benchmarks: several topics, realistic keys,
headers and non-monotonic CreateTime (producers' clocks and retries disagree).

Columns are the Spark Kafka source's input shape (``topic, key, value, timestamp,
headers``), without partition and offset: ingest assigns them as a producer and a broker
would.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from seglake.record.schema import HEADERS_TYPE

TOPICS = ("orders", "clicks", "sensor.readings")
START_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z


def generate(
    n: int,
    *,
    seed: int = 7,
    topics: tuple[str, ...] = TOPICS,
    value_bytes: int = 100,
    start_ms: int = START_MS,
    rate_per_s: float = 1000.0,
    jitter_ms: int = 2000,
    headers: bool = True,
) -> pa.Table:
    """``n`` messages spread over ``topics`` (skewed 60/30/10 for three topics).

    Timestamps advance at ``rate_per_s`` with +-``jitter_ms`` noise, so CreateTime is
    not monotonic. Values are ``value_bytes`` long (JSON-like prefix, padded).
    """
    rng = np.random.default_rng(seed)
    weights = np.array([0.6, 0.3, 0.1][: len(topics)] + [0.1] * max(0, len(topics) - 3))
    topic_idx = rng.choice(len(topics), size=n, p=weights / weights.sum())
    users = rng.zipf(1.3, size=n) % 50_000
    keys = pa.compute.binary_join_element_wise(
        pa.array(np.array(topics, dtype=object)[topic_idx].tolist()),
        pa.array(users.astype(str).tolist()),
        ":",
    ).cast(pa.binary())
    ts = (
        start_ms
        + (np.arange(n) * (1000.0 / rate_per_s)).astype(np.int64)
        + rng.integers(-jitter_ms, jitter_ms + 1, size=n)
    )
    values = _values(rng, users, value_bytes)
    hdrs = _headers(rng, n) if headers else pa.array([[]] * n, HEADERS_TYPE)
    table = pa.table(
        {
            "topic": pa.array(np.array(topics, dtype=object)[topic_idx].tolist(), pa.string()),
            "key": keys,
            "value": values,
            "timestamp": pa.array(ts, pa.int64()),
            "headers": hdrs,
        }
    )
    return table


def _values(rng: np.random.Generator, users: np.ndarray, value_bytes: int) -> pa.Array:
    """Values ``{"id":i,"user":u,"amount":a}`` padded with spaces to ``value_bytes``."""
    n = len(users)
    prefix = pa.compute.binary_join_element_wise(
        pa.array(['{"id":'] * n),
        pa.array(np.arange(n).astype(str).tolist()),
        pa.array([',"user":'] * n),
        pa.array(users.astype(str).tolist()),
        pa.array([',"amount":'] * n),
        pa.array(np.round(rng.gamma(2.0, 20.0, size=n), 2).astype(str).tolist()),
        pa.array(["}"] * n),
        "",
    )
    return pa.compute.utf8_rpad(prefix, value_bytes, " ").cast(pa.binary())


def _headers(rng: np.random.Generator, n: int) -> pa.Array:
    """Two headers per message: ``source`` (web, ios, android, batch) and ``trace-id``."""
    sources = np.array(["web", "ios", "android", "batch"])[rng.integers(0, 4, size=n)]
    flat_keys = pa.array(np.repeat([["source", "trace-id"]], n, axis=0).ravel().tolist())
    trace = pa.array([f"{x:016x}" for x in rng.integers(0, 2**62, size=n)]).cast(pa.binary())
    flat_values = pa.array(
        np.stack(
            [np.char.encode(sources.astype(str)), np.asarray(trace.to_pylist(), dtype=object)],
            axis=1,
        )
        .ravel()
        .tolist(),
        pa.binary(),
    )
    structs = pa.StructArray.from_arrays(
        [flat_keys, flat_values], fields=list(HEADERS_TYPE.value_type)
    )
    return pa.ListArray.from_arrays(
        pa.array(np.arange(0, 2 * n + 1, 2), pa.int32()), structs, type=HEADERS_TYPE
    )
