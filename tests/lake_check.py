"""Brute-force views of a lake for the tests: every committed segment decoded whole,
through ``pyarrow.fs`` (local paths and ``s3://`` roots alike)."""

from __future__ import annotations

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from seglake import fs as lakefs
from seglake.lake.catalog import Catalog
from seglake.lake.rows import segment_refs
from seglake.storage.log import PartitionLog

RECORD_KEY = ["topic", "partition", "offset"]


def lake_records(root: str, *, version: int | None = None) -> pd.DataFrame:
    """Every data record a reader of the catalog (at ``version``) sees, sorted by
    (topic, partition, offset): ``topic, partition, offset, timestamp, key, value``.

    Read through :class:`PartitionLog` (so a committed run's files still in
    ``_staging/`` are found there), every segment decoded whole."""
    catalog = Catalog(root)
    columns = [*RECORD_KEY, "timestamp", "key", "value"]
    if not catalog.exists():
        return pd.DataFrame(columns=columns)
    filesystem, base = lakefs.resolve(root)
    rows = catalog.segments(version=version)
    frames = []
    for topic, partition in sorted(
        set(zip(rows["topic"].to_pylist(), rows["partition"].to_pylist(), strict=True))
    ):
        mine = rows.filter(
            pc.and_(pc.equal(rows["topic"], topic), pc.equal(rows["partition"], partition))
        )
        log = PartitionLog.from_refs(filesystem, base, segment_refs(mine))
        df = (
            log.read_range(log.log_start_offset, log.log_end_offset)
            .select(["offset", "timestamp", "key", "value"])
            .to_pandas()
        )
        df["topic"], df["partition"] = topic, partition
        frames.append(df)
    if not frames:
        return pd.DataFrame(columns=columns)
    return pd.concat(frames)[columns].sort_values(RECORD_KEY).reset_index(drop=True)


def values_per_partition(records: pd.DataFrame) -> dict[tuple[str, int], list[bytes]]:
    """``{(topic, partition): values in offset order}``."""
    return {
        (str(t), int(p)): g.sort_values("offset")["value"].tolist()
        for (t, p), g in records.groupby(["topic", "partition"])
    }


def same_records_as_input(records: pd.DataFrame, messages: pa.Table) -> bool:
    """Whether the lake holds each input message exactly once (as a multiset of
    (topic, key, value, timestamp)) with gapless offsets from 0 in every partition."""
    want = messages.select(["topic", "key", "value", "timestamp"]).to_pandas()
    got = records[["topic", "key", "value", "timestamp"]]
    cols = ["topic", "key", "value", "timestamp"]
    rows_want = sorted(map(tuple, want[cols].astype(object).itertuples(index=False)))
    rows_got = sorted(map(tuple, got[cols].astype(object).itertuples(index=False)))
    gapless = all(
        g["offset"].tolist() == list(range(len(g)))
        for _, g in records.groupby(["topic", "partition"])
    )
    return rows_want == rows_got and gapless
