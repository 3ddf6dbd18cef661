"""Records of a table as plain tuples, to compare reads with an oracle."""

from __future__ import annotations

import pyarrow as pa


def record_tuples(t: pa.Table) -> list[tuple]:
    """``(offset, timestamp, key, value, ((header key, header value), ...))`` per row."""
    d = t.select(["offset", "timestamp", "key", "value", "headers"]).to_pydict()
    return list(
        zip(
            d["offset"],
            d["timestamp"],
            d["key"],
            d["value"],
            [tuple((h["key"], h["value"]) for h in hs) for hs in d["headers"]],
            strict=True,
        )
    )
