"""seglake.open(root): every call against brute force (every committed .log decoded whole
and filtered with pandas), on a lake written without Spark (PartitionLog.append + one
catalog commit per run), with non-monotonic timestamps, ties, and segment rolls."""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

import seglake
from seglake.config import LogConfig
from seglake.errors import SegmentNotFoundError
from seglake.lake.catalog import Catalog
from seglake.lake.rows import rows_table
from seglake.record.reader import read_log
from seglake.record.schema import HEADERS_TYPE, KAFKA_SOURCE_SCHEMA
from seglake.storage.log import PartitionLog

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z
CFG = LogConfig(segment_bytes=4_000, batch_size=600, index_interval_bytes=500)
# (topic, partition, first offset, records)
LAYOUT = [("orders", 0, 0, 400), ("orders", 1, 100, 300), ("clicks", 0, 0, 150)]


def records(first: int, n: int, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    # ~3 records per 10 ms, +-300 ms jitter in steps of 20 ms (many ties, out of order)
    ts = T0 + np.arange(n) * 10 // 3 + rng.integers(-15, 16, n) * 20
    return pa.table(
        {
            "offset": pa.array(np.arange(first, first + n), pa.int64()),
            "timestamp": pa.array(ts, pa.int64()),
            "key": pa.array([f"k{i % 17}".encode() for i in range(n)], pa.binary()),
            "value": pa.array(
                [f"v{first + i}".encode() * (1 + i % 7) for i in range(n)], pa.binary()
            ),
            "headers": pa.array(
                [[{"key": "h", "value": b"x"}] * (i % 2) for i in range(n)], HEADERS_TYPE
            ),
        }
    )


def append(root: Path, topic: str, partition: int, recs: pa.Table, run_id: str) -> None:
    d = root / f"{topic}-{partition}"
    d.mkdir(parents=True, exist_ok=True)
    log = PartitionLog.open(str(d))
    start = int(recs.column("offset")[0].as_py())
    writer = PartitionLog(
        log.fs, log.directory, log.segments, log_start_offset=start if not log.segments else None
    )
    infos = writer.append(recs, config=CFG)
    Catalog(str(root)).commit(
        rows_table(
            [
                i.catalog_row(topic, partition, f"{topic}-{partition}/{i.base_offset:020d}.log")
                for i in infos
            ]
        ),
        run_id,
    )


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("lake")
    for seed, (topic, p, first, n) in enumerate(LAYOUT):
        append(root, topic, p, records(first, n, seed), f"run-{topic}-{p}")
    return root


def brute(root: Path, topic: str, partition: int) -> pd.DataFrame:
    """Every committed record of one partition, decoded from whole .log files."""
    rows = Catalog(str(root)).segments(topic, partition).to_pylist()
    parts = [read_log((root / r["path"]).read_bytes())[0] for r in rows]
    df = pa.concat_tables(parts).to_pandas()
    return df.sort_values("offset").reset_index(drop=True)


@pytest.fixture(scope="module")
def lake(root):
    return seglake.open(str(root))


@pytest.fixture(scope="module")
def truth(root) -> dict[tuple[str, int], pd.DataFrame]:
    return {(t, p): brute(root, t, p) for t, p, _, _ in LAYOUT}


def ms(series: pd.Series) -> np.ndarray:
    """Kafka source timestamps (datetime64[us, UTC]) as epoch ms."""
    return (
        (series.astype("int64") // 1000).to_numpy()
        if series.dt.unit == "us"
        else series.dt.tz_convert(None).astype("datetime64[ms]").astype("int64").to_numpy()
    )


def test_import_is_light():
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            (
                "import sys, seglake; seglake.open; "
                "print(sorted(m for m in ('pyspark', 'matplotlib', 'pandas') if m in sys.modules))"
            ),
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert out == "['pandas']" or out == "[]", out  # pandas may come with deltalake
    bare = subprocess.run(
        [
            sys.executable,
            "-c",
            (
                "import sys, seglake; "
                "print([m for m in ('pyspark', 'matplotlib', 'deltalake') if m in sys.modules])"
            ),
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert bare == "[]"


def test_topics_partitions_segments(lake, root):
    assert lake.topics() == ["clicks", "orders"]
    assert lake.partitions("orders") == [0, 1]
    assert lake.partitions("nope") == []
    cat = Catalog(str(root)).segments().to_pandas()
    pd.testing.assert_frame_equal(lake.segments(), cat)
    orders = lake.segments("orders")
    assert set(orders["topic"]) == {"orders"} and len(orders) == (cat["topic"] == "orders").sum()
    assert len(orders) >= 6  # rolls happened
    with pytest.raises(SegmentNotFoundError, match="orders-7"):
        lake.partition("orders", 7)


@pytest.mark.parametrize("topic,p", [(t, p) for t, p, _, _ in LAYOUT])
def test_offsets(lake, truth, topic, p):
    part = lake.partition(topic, p)
    df = truth[(topic, p)]
    assert part.log_start_offset == df["offset"].min()
    assert part.log_end_offset == df["offset"].max() + 1
    assert lake.partition(topic, p) is part  # cached


@pytest.mark.parametrize("topic,p", [(t, p) for t, p, _, _ in LAYOUT])
def test_read_every_offset(lake, truth, topic, p):
    part = lake.partition(topic, p)
    df = truth[(topic, p)]
    lo, hi = part.log_start_offset, part.log_end_offset
    rng = np.random.default_rng(1)
    for offset in range(lo - 3, hi + 3):
        k = int(rng.integers(0, 40))
        got = part.read(offset, max_records=k)
        want = df[df["offset"] >= offset].head(k)
        assert got["offset"].tolist() == want["offset"].tolist(), (offset, k)
        assert got["value"].tolist() == want["value"].tolist()
        assert ms(got["timestamp"]).tolist() == want["timestamp"].tolist()
        assert (got["topic"] == topic).all() and (got["partition"] == p).all()
    t = part.read(lo + 5, 3, as_="arrow")
    assert t.schema == KAFKA_SOURCE_SCHEMA and t.num_rows == 3
    assert t.column("headers").to_pylist() == [  # none: null, as in Kafka's source
        [{"key": h["key"], "value": h["value"]} for h in hs] or None
        for hs in df[df["offset"] >= lo + 5].head(3)["headers"]
    ]
    with pytest.raises(ValueError, match="as_"):
        part.read(lo, 1, as_="polars")


@pytest.mark.parametrize("topic,p", [(t, p) for t, p, _, _ in LAYOUT])
def test_offsets_for_times(lake, truth, topic, p):
    part = lake.partition(topic, p)
    df = truth[(topic, p)]
    ts, offs = df["timestamp"].to_numpy(), df["offset"].to_numpy()
    targets = np.unique(np.concatenate([ts, ts + 1, ts - 1, [0, ts.min() - 1000, ts.max() + 1]]))
    for t in targets:
        hit = np.nonzero(ts >= t)[0]
        want = (int(ts[hit[0]]), int(offs[hit[0]])) if len(hit) else None
        got = part.offsets_for_times(int(t))
        assert (tuple(got) if got else None) == want, t
    assert tuple(part.offsets_for_times(-2)) == (-1, int(offs.min()))
    assert tuple(part.offsets_for_times(-1)) == (-1, int(offs.max()) + 1)
    first_max = int(np.argmax(ts))  # argmax: first occurrence
    assert tuple(part.offsets_for_times(-3)) == (int(ts[first_max]), int(offs[first_max]))
    # datetime, pandas Timestamp, ISO string, numpy datetime64 = the same ms
    t = int(np.median(ts)) + 7
    want = part.offsets_for_times(t)
    when = dt.datetime.fromtimestamp(t / 1000, dt.UTC)
    for form in (
        when,
        when.replace(tzinfo=None),
        pd.Timestamp(t, unit="ms", tz="UTC"),
        when.isoformat(),
        when.isoformat().replace("+00:00", "Z"),
        np.datetime64(t, "ms"),
        str(t),
    ):
        assert part.offsets_for_times(form) == want, form
    with pytest.raises(ValueError):
        part.offsets_for_times(-4)
    with pytest.raises(ValueError):
        part.offsets_for_times("yesterday")


def test_range_refuses_start_after_end(lake):
    part = lake.partition(*LAYOUT[0][:2])
    with pytest.raises(ValueError, match=r"start .* is after end"):
        part.range(T0 + 2_000, T0 + 1_000)
    assert len(part.range(T0 + 1_000, T0 + 1_000)) == 0  # equal: the empty range


@pytest.mark.parametrize("topic,p", [(t, p) for t, p, _, _ in LAYOUT])
def test_range_exact(lake, truth, topic, p):
    part = lake.partition(topic, p)
    df = truth[(topic, p)]
    ts = df["timestamp"].to_numpy()
    assert np.any(np.diff(ts) < 0), "test data must be out of order"
    rng = np.random.default_rng(5)
    bounds = [
        (int(ts.min()), int(ts.max()) + 1),
        (int(ts.min()) - 10, int(ts.min())),
        (int(ts.max()) + 1, int(ts.max()) + 100),
        (T0 + 300, T0 + 300),
    ]
    bounds += [tuple(sorted(rng.choice(ts, 2))) for _ in range(40)]
    bounds += [(a, a + int(rng.integers(1, 200))) for a in rng.choice(ts, 20)]
    for lo, hi in bounds:
        got = part.range(int(lo), int(hi))
        want = df[(df["timestamp"] >= lo) & (df["timestamp"] < hi)]
        assert got["offset"].tolist() == want["offset"].tolist(), (lo, hi)
        assert ms(got["timestamp"]).tolist() == want["timestamp"].tolist()
        assert got["value"].tolist() == want["value"].tolist()
    lo, hi = int(np.percentile(ts, 30)), int(np.percentile(ts, 60))
    t = part.range(
        pd.Timestamp(lo, unit="ms", tz="UTC").isoformat(),
        dt.datetime.fromtimestamp(hi / 1000, dt.UTC),
        as_="arrow",
    )
    assert t.schema == KAFKA_SOURCE_SCHEMA
    assert (
        t.column("offset").to_pylist()
        == df[(df["timestamp"] >= lo) & (df["timestamp"] < hi)]["offset"].tolist()
    )


def test_range_prunes_segments(lake, monkeypatch):
    part = lake.partition("orders", 0)
    seen = []
    for seg in part.log.segments:
        orig = seg.window

        def spy(*a, _orig=orig, _base=seg.base_offset, **k):
            seen.append(_base)
            return _orig(*a, **k)

        monkeypatch.setattr(seg, "window", spy)
    rows = part.rows.to_pandas()
    mid = rows.iloc[len(rows) // 2]
    part.range(int(mid.min_timestamp), int(mid.min_timestamp) + 1)
    want = rows[
        (rows.max_timestamp >= mid.min_timestamp) & (rows.min_timestamp < mid.min_timestamp + 1)
    ]["base_offset"].tolist()
    assert seen == want and len(seen) < len(rows)


def test_describe_and_html(lake, truth):
    d = lake.describe().set_index(["topic", "partition"])
    for (topic, p), df in truth.items():
        row = d.loc[(topic, p)]
        assert row.records == len(df)
        assert row.log_start_offset == df["offset"].min()
        assert row.log_end_offset == df["offset"].max() + 1
        assert row.min_timestamp == df["timestamp"].min()
        assert row.max_timestamp == df["timestamp"].max()
        assert row.min_timestamp_utc == pd.Timestamp(df["timestamp"].min(), unit="ms", tz="UTC")
    h = lake._repr_html_()
    assert f"catalog version {lake.version}" in h
    assert f"{sum(len(df) for df in truth.values())} records" in h
    for df in truth.values():
        assert f'<td style="text-align:right">{df["offset"].max() + 1}</td>' in h
    part = lake.partition("orders", 1)
    h = part._repr_html_()
    df = truth[("orders", 1)]
    assert f"offsets {df['offset'].min()}..{df['offset'].max() + 1}" in h
    assert f"{len(df)} records" in h
    for r in part.rows.to_pylist():
        assert f">{r['base_offset']}<" in h and f">{r['next_offset']}<" in h
    first = pd.Timestamp(df["timestamp"].min(), unit="ms", tz="UTC")
    assert first.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] in h


def test_version_pinned_and_refresh(root):
    lake = seglake.open(str(root))
    stays = lake.partition("orders", 1)
    moves = lake.partition("clicks", 0)
    assert len(moves.log.segments[0].offset_index)  # indexes read
    leo = moves.log_end_offset
    v = lake.version
    append(root, "clicks", 0, records(leo, 50, 99), "run-clicks-more")
    assert Catalog(str(root)).version() == v + 1
    assert lake.partition("clicks", 0).log_end_offset == leo  # pinned
    assert lake.partition("clicks", 0).read(leo, 5).empty
    assert lake.refresh() is lake and lake.version == v + 1
    assert lake.partition("orders", 1) is stays  # unchanged rows: cache kept
    fresh = lake.partition("clicks", 0)
    assert fresh is not moves and fresh.log_end_offset == leo + 50
    assert fresh.read(leo, 5)["offset"].tolist() == list(range(leo, leo + 5))
    old = seglake.open(str(root), version=v)
    assert old.partition("clicks", 0).log_end_offset == leo


def test_warm_lookup_reads_indexes_once(lake):
    part = lake.partition("orders", 0)
    part.read(200, 1)
    seg = part.log.segments[int(np.searchsorted(part.log.base_offsets, 200, "right")) - 1]
    oi = seg.offset_index
    part.read(201, 1)
    assert seg.offset_index is oi and seg.index_source == "file"


def test_plots(lake):
    from matplotlib.figure import Figure

    fig = lake.plot_segments("orders")
    assert isinstance(fig, Figure) and len(fig.axes) == 1
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == ["orders-0", "orders-1"]
    part = lake.partition("orders", 1)
    fig = part.plot_index()
    assert len(fig.axes) == 4  # .index, .timeindex, and a zoom of each
    base = part.log.segments[1].base_offset
    fig = part.plot_index(base)
    assert str(base) in fig.get_suptitle()
    with pytest.raises(ValueError, match="no segment"):
        part.plot_index(base + 1)
    fig = lake.plot_rate("orders", bucket="100ms")
    total = fig.axes[0].lines[-1].get_ydata()[:-1]  # last: the closing edge
    assert total.sum() == sum(
        p.summary()["records"] for p in (lake.partition("orders", 0), lake.partition("orders", 1))
    )
    for f in (fig,):
        f.savefig(Path("/dev/null"), format="png")


def test_read_with_tiny_cache(root, truth):
    lake = seglake.open(str(root), cache_bytes=1)  # every chunk evicted at once
    part = lake.partition("orders", 0)
    df = truth[("orders", 0)]
    for offset, k in [(0, 1), (57, 200), (399, 5), (123, 400)]:
        want = df[df["offset"] >= offset].head(k)["offset"].tolist()
        assert part.read(offset, k, as_="arrow").column("offset").to_pylist() == want
    assert len(lake._cache._items) <= 1


def test_find_keys_equals_brute_force(lake, truth):
    """lake.find(topic, key, start, end): every record of the keys (one or many, str or
    bytes) through the key indexes, equal to a brute-force filter of the decoded logs."""
    both = pd.concat([truth[("orders", p)].assign(partition=p) for p in (0, 1)], ignore_index=True)
    ts = both["timestamp"].to_numpy()
    lo, hi = int(np.percentile(ts, 20)), int(np.percentile(ts, 70))
    for key, start, end in [
        ("k3", None, None),
        (b"k16", None, None),
        ([b"k1", "k2", None, b"absent"], None, None),
        (["k5", "k6"], lo, hi),
        ("absent", None, None),
    ]:
        keys = [key] if isinstance(key, bytes | str) else key
        wanted = {k.encode() if isinstance(k, str) else k for k in keys if k is not None}
        want = both[both["key"].isin(wanted)]
        if start is not None:
            want = want[(want["timestamp"] >= start) & (want["timestamp"] < end)]
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # every segment answered by its key index
            got = lake.find("orders", key, start, end)
        assert list(zip(got["partition"], got["offset"], strict=True)) == list(
            zip(want["partition"], want["offset"], strict=True)
        ), key
        assert got["value"].tolist() == want["value"].tolist()
    t = lake.find("clicks", "k1", as_="arrow")
    assert t.schema == KAFKA_SOURCE_SCHEMA and t.num_rows == len(
        truth[("clicks", 0)].query("key == b'k1'")
    )
