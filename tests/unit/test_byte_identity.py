"""The bytes the stream commit and the ingest rebase write, pinned to the hashes main
wrote before their byte rules moved to one home each (issue 33 item 2): the segments,
indexes and rows must stay byte for byte what they were."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import pytest

from seglake.config import LogConfig
from seglake.lake.catalog import Catalog
from seglake.spark.ingest_rebase import _patch
from seglake.storage.writer import SegmentWriter
from tests.unit import test_stream_commit as sc

ROWS = ("base_offset", "next_offset", "size_bytes", "index_entries", "time_index_entries")


def _digest(root: Path) -> str:
    """The files main wrote then (the ``.keyindex`` came later: test_stream_commit holds its
    bytes) and the catalog rows."""
    h = hashlib.sha256()
    for name, data in sc._files(root).items():
        if not name.endswith(".keyindex"):
            h.update(name.encode() + b"\0" + data)
    segs = (
        Catalog(str(root))
        .segments()
        .sort_by([("partition", "ascending"), ("base_offset", "ascending")])
    )
    h.update(repr(segs.select(["partition", *ROWS]).to_pylist()).encode())
    return h.hexdigest()[:16]


@pytest.mark.parametrize(
    ("append", "roll_ms", "expected"),
    [
        ("copy", None, "b0ea6622882814e1"),
        ("true", None, "b0ea6622882814e1"),
        ("copy", "300", "6d3e63f4143e2d5d"),
        ("true", "300", "6d3e63f4143e2d5d"),
    ],
)
def test_stream_commit_writes_mains_bytes(tmp_path, monkeypatch, append, roll_ms, expected):
    if roll_ms is not None:  # time rolls as well as size rolls
        monkeypatch.setattr(sc, "CONF", sc.CONF.with_overrides({"log.roll.ms": roll_ms}))
    root = tmp_path / "lake"
    for i, pieces in enumerate(sc._batches(root, 6)):
        sc._commit(root, f"stream-q-{i}", pieces, True, append=append)
    assert _digest(root) == expected


def test_ingest_patch_writes_mains_bytes(tmp_path):
    n = 3_000
    records = pa.table(
        {
            "offset": pa.array(np.arange(n, dtype=np.int64)),
            "timestamp": pa.array(np.arange(n, dtype=np.int64) + 1_700_000_000_000),
            "value": pa.array([b"v%d" % i for i in range(n)]),
        }
    )
    config = LogConfig.load(overrides={"batch.size": "2048"})
    w = SegmentWriter(pafs.LocalFileSystem(), str(tmp_path), config=config)
    (info,) = [*w.append(records), *w.close()]
    _patch(info.log_path, 7_000_000_123, n)
    assert hashlib.sha256(Path(info.log_path).read_bytes()).hexdigest()[:16] == "f93bbb95bacb4da0"
