"""Pictures of a lake with matplotlib (imported here only, when a picture is asked for;
figures are built without pyplot and render with Agg).

    plot_segments(lake, topic)    per partition, one bar per segment from its smallest to
                                  its largest timestamp, labelled with offsets and size
    plot_index(partition, base)   a segment's offset index (offset vs byte position, with
                                  every batch start) and time index (running max timestamp
                                  vs offset, over every record's timestamp)
    plot_rate(lake, topic, "1min")  messages per time bucket, per partition and in total

Each returns the :class:`matplotlib.figure.Figure` (save it with ``fig.savefig``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from seglake.api import Lake, Partition

_MAX_LABELS = 40  # segment labels drawn per figure; beyond that the bars speak alone


def _mpl():  # type: ignore[no-untyped-def]
    """``(new_figure, colormaps, dates)``. Figures are made without pyplot: no global
    figure registry, no backend switch; ``savefig`` renders with Agg, and a notebook shows
    the returned figure once."""
    import matplotlib
    import matplotlib.dates as mdates
    from matplotlib.figure import Figure

    def new_figure(**kw):  # type: ignore[no-untyped-def]
        return Figure(layout="constrained", **kw)

    return new_figure, matplotlib.colormaps, mdates


def _dates(ms: np.ndarray) -> np.ndarray:
    return np.asarray(ms, dtype="datetime64[ms]")


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def plot_segments(lake: Lake, topic: str) -> Figure:
    """One row per partition; each segment a bar over [min timestamp, max timestamp].

    Consecutive segments alternate between two lanes of the row, so the overlap that
    non-monotonic timestamps cause stays visible.
    """
    new_figure, colormaps, mdates = _mpl()
    parts = lake.partitions(topic)
    if not parts:
        raise ValueError(f"topic {topic!r} has no partitions in {lake.root}")
    segs = lake.segments(topic)
    fig = new_figure(figsize=(11, 1.0 + 0.9 * len(parts)))
    ax = fig.subplots()
    cmap = colormaps["tab10"]
    label = len(segs) <= _MAX_LABELS
    for row, p in enumerate(parts):
        s = segs[segs["partition"] == p].reset_index(drop=True)
        for i, r in s.iterrows():
            if r.max_timestamp < 0:
                continue
            lo, hi = _dates(np.array([r.min_timestamp, r.max_timestamp]))
            width = max(hi - lo, np.timedelta64(1, "ms"))
            y = row + (0.05 if i % 2 == 0 else -0.35)
            ax.barh(y, mdates.date2num(lo + width) - mdates.date2num(lo),
                    left=mdates.date2num(lo), height=0.3, align="edge",
                    color=cmap(i % 10), alpha=0.8, edgecolor="black", linewidth=0.5)
            if label:
                ax.text(mdates.date2num(lo + width / 2), y + 0.15,
                        f"{r.base_offset}..{r.next_offset - 1}\n{_size(r.size_bytes)}",
                        ha="center", va="center", fontsize=7)
    ax.set_yticks(range(len(parts)), [f"{topic}-{p}" for p in parts])
    ax.set_ylim(-0.6, len(parts) - 0.4)
    ax.invert_yaxis()
    ax.xaxis_date()
    ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(ax.xaxis.get_major_locator()))
    ax.set_xlabel("record timestamp (UTC); bar = segment's min..max timestamp")
    ax.set_title(f"{topic}: {len(segs)} segments in {len(parts)} partitions "
                 f"(labels: offsets first..last, .log size) - catalog version {lake.version}")
    ax.grid(axis="x", alpha=0.3)
    return fig


def plot_index(partition: Partition, segment_base_offset: int | None = None) -> Figure:
    """A segment's sparse indexes against its batches and records.

    Left: offset index entries (offset vs byte position) over the start of every batch.
    Right: time index entries (running largest timestamp vs offset) over every record's
    timestamp, so out-of-order CreateTime shows as points below the staircase.
    """
    new_figure, _, _ = _mpl()
    log = partition.log
    if not log.segments:
        raise ValueError(f"{partition.topic}-{partition.partition} has no segments")
    if segment_base_offset is None:
        seg = log.segments[0]
    else:
        found = [s for s in log.segments if s.base_offset == segment_base_offset]
        if not found:
            raise ValueError(f"{partition.topic}-{partition.partition}: no segment with base "
                             f"offset {segment_base_offset} (have "
                             f"{[s.base_offset for s in log.segments][:10]})")
        seg = found[0]
    oi, ti = seg.offset_index, seg.time_index
    scan = seg.scan()
    recs = seg.read_records()
    offs = recs.column("offset").to_numpy()
    ts = recs.column("timestamp").to_numpy()

    fig = new_figure(figsize=(12, 4.6))
    left, right = fig.subplots(1, 2)
    left.plot(scan.position, scan.base_offset, ".", color="0.7", markersize=3,
              label=f"batch starts ({len(scan)})")
    left.step(oi.positions, oi.offsets, where="post", color="C0", linewidth=1)
    left.plot(oi.positions, oi.offsets, "o", color="C0", markersize=5,
              label=f"offset index entries ({len(oi)})")
    left.set_xlabel("byte position in .log")
    left.set_ylabel("offset")
    left.set_title(f".index: 1 entry per {seg.index_interval_bytes}+ bytes "
                   f"({seg.size} bytes, {len(scan)} batches)", fontsize=10)
    left.legend(loc="upper left", fontsize=8)
    left.grid(alpha=0.3)

    t0 = int(ts.min()) if len(ts) else 0
    right.plot(offs, (ts - t0) / 1000, ".", color="C1", alpha=0.25, markersize=3,
               label=f"record timestamps ({len(ts)})")
    if len(ts):
        right.plot(offs, (np.maximum.accumulate(ts) - t0) / 1000, color="0.6", linewidth=0.8,
                   label="running max timestamp")
    if len(ti):
        right.step(ti.offsets, (ti.timestamps - t0) / 1000, where="post", color="C3",
                   linewidth=1)
        right.plot(ti.offsets, (ti.timestamps - t0) / 1000, "s", color="C3", markersize=5,
                   label=f"time index entries ({len(ti)})")
    late = int(np.count_nonzero(ts < np.maximum.accumulate(ts))) if len(ts) else 0
    right.set_xlabel("offset")
    right.set_ylabel(f"seconds after {_iso(t0)} UTC")
    right.set_title(f".timeindex: {late} of {len(ts)} records older than one before them",
                    fontsize=10)
    right.legend(loc="upper left", fontsize=8)
    right.grid(alpha=0.3)
    fig.suptitle(f"{partition.topic}-{partition.partition} segment {seg.base_offset} "
                 f"(offsets {seg.base_offset}..{seg.next_offset - 1})")
    return fig


def _iso(ms: int) -> str:
    return str(np.datetime64(int(ms), "ms")).replace("T", " ")


def plot_rate(lake: Lake, topic: str, bucket: str = "1min") -> Figure:
    """Messages per ``bucket`` (pandas frequency: "1s", "1min", "1h", ...) of ``topic``.

    Counts every record's timestamp (each segment is read and decoded once), per
    partition (up to 10 lines) and the total.
    """
    import pandas as pd

    new_figure, _, mdates = _mpl()
    parts = lake.partitions(topic)
    if not parts:
        raise ValueError(f"topic {topic!r} has no partitions in {lake.root}")
    counts = {}
    for p in parts:
        log = lake.partition(topic, p).log
        ts = np.concatenate([s.read_records().column("timestamp").to_numpy()
                             for s in log.segments] or [np.array([], np.int64)])
        idx = pd.to_datetime(ts, unit="ms", utc=True).floor(bucket)
        counts[p] = pd.Series(1, index=idx).groupby(level=0).sum()
    df = pd.DataFrame(counts).fillna(0).sort_index()
    if len(df):
        full = pd.date_range(df.index.min(), df.index.max(), freq=bucket)
        df = df.reindex(full, fill_value=0)
    fig = new_figure(figsize=(11, 4))
    ax = fig.subplots()
    x = df.index.tz_convert(None).to_numpy() if len(df) else np.array([], "datetime64[ms]")
    if len(parts) <= 10:
        for p in parts:
            ax.step(x, df[p].to_numpy(), where="post", linewidth=1, alpha=0.8,
                    label=f"{topic}-{p}")
    ax.step(x, df.sum(axis=1).to_numpy() if len(df) else [], where="post", color="black",
            linewidth=2, label="all partitions")
    ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(ax.xaxis.get_major_locator()))
    ax.set_ylabel(f"messages per {bucket}")
    ax.set_xlabel("record timestamp (UTC)")
    ax.set_title(f"{topic}: {int(df.to_numpy().sum())} messages, per {bucket} bucket "
                 f"(catalog version {lake.version})")
    ax.legend(loc="upper right", fontsize=8, ncols=2)
    ax.grid(alpha=0.3)
    ax.set_ylim(bottom=0)
    return fig
