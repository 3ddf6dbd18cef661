"""Pictures of a lake with matplotlib (imported here only, when a picture is asked for;
figures are built without pyplot and render with Agg).

    plot_segments(topic, rows, v) per partition, one bar per segment from its smallest to
                                  its largest timestamp, labelled with offsets and size
    plot_index(name, seg, recs)   a segment's offset index (offset vs byte position, with
                                  every batch start) and time index (running max timestamp
                                  vs offset, over every record's timestamp: ``recs``, read
                                  by the caller through the plan)
    plot_rate(topic, ts, "1min")  messages per time bucket, per partition and in total

Each takes data (catalog rows, a segment and its records, timestamps), not the notebook API's
objects, and returns the :class:`matplotlib.figure.Figure` (save it with ``fig.savefig``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from seglake.render import size_text

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    import pandas as pd
    import pyarrow as pa
    from matplotlib.axes import Axes
    from matplotlib.cm import ColormapRegistry
    from matplotlib.figure import Figure

    from seglake.record.batch import BatchScan
    from seglake.storage.log import PartitionLog
    from seglake.storage.offset_index import OffsetIndex
    from seglake.storage.segment import LogSegment
    from seglake.storage.time_index import TimeIndex

_MAX_LABELS = 40  # segment labels drawn per figure; beyond that the bars speak alone


def _mpl() -> tuple[Callable[..., Figure], ColormapRegistry, Any]:
    """``(new_figure, colormaps, dates)``. Figures are made without pyplot: no global
    figure registry, no backend switch; ``savefig`` renders with Agg, and a notebook shows
    the returned figure once."""
    import matplotlib
    import matplotlib.dates as mdates
    from matplotlib.figure import Figure

    def new_figure(**kw: Any) -> Figure:
        return Figure(layout="constrained", **kw)

    _ipython_display_support(Figure)
    return new_figure, matplotlib.colormaps, mdates


def _ipython_display_support(figure_type: type) -> None:
    """In IPython/Jupyter, show returned figures as PNG even if pyplot (which registers
    the formatter) was never imported; a user's own figure formats are left alone."""
    import sys

    if "IPython" not in sys.modules:
        return
    try:
        from IPython import get_ipython
        from IPython.core.pylabtools import select_figure_formats
    except ImportError:
        return
    ip = get_ipython()
    if ip is None or not hasattr(ip, "display_formatter"):
        return
    formatters = ip.display_formatter.formatters
    if any(
        figure_type in formatters[f].type_printers
        for f in ("image/png", "image/svg+xml", "image/jpeg", "application/pdf")
        if f in formatters
    ):
        return
    select_figure_formats(ip, {"png"})  # type: ignore[no-untyped-call]


def _dates(ms: np.ndarray) -> np.ndarray:
    return np.asarray(ms, dtype="datetime64[ms]")


def plot_segments(topic: str, segs: pd.DataFrame, version: int) -> Figure:
    """One row per partition; each segment a bar over [min timestamp, max timestamp].

    ``segs`` are the topic's catalog rows (at catalog ``version``, named in the title).

    Consecutive segments alternate between two lanes of the row, so the overlap that
    non-monotonic timestamps cause stays visible.
    """
    new_figure, colormaps, mdates = _mpl()
    parts = sorted(int(p) for p in set(segs["partition"]))
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
            ax.barh(
                y,
                mdates.date2num(lo + width) - mdates.date2num(lo),
                left=mdates.date2num(lo),
                height=0.3,
                align="edge",
                color=cmap(i % 10),
                alpha=0.8,
                edgecolor="black",
                linewidth=0.5,
            )
            if label:
                ax.text(
                    mdates.date2num(lo + width / 2),
                    y + 0.15,
                    f"{r.base_offset}..{r.next_offset - 1}\n{size_text(int(r.size_bytes))}",
                    ha="center",
                    va="center",
                    fontsize=7,
                )
    ax.set_yticks(range(len(parts)), [f"{topic}-{p}" for p in parts])
    ax.set_ylim(-0.6, len(parts) - 0.4)
    ax.invert_yaxis()
    ax.xaxis_date()
    ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(ax.xaxis.get_major_locator()))
    ax.set_xlabel("record timestamp (UTC); bar = segment's min..max timestamp")
    ax.set_title(
        f"{topic}: {len(segs)} segments in {len(parts)} partitions "
        f"(labels: offsets first..last, .log size) - catalog version {version}"
    )
    ax.grid(axis="x", alpha=0.3)
    return fig


def plot_index(name: str, seg: LogSegment, recs: pa.Table) -> Figure:
    """A segment's sparse indexes against its batches and its records ``recs`` (offset
    and millisecond timestamp columns; see :func:`segment_of`).

    Left: offset index entries (offset vs byte position) over the start of every batch.
    Right: time index entries (running largest timestamp vs offset) over every record's
    timestamp, so out-of-order CreateTime shows as points below the staircase.
    """
    new_figure, _, _ = _mpl()
    oi, ti = seg.offset_index, seg.time_index
    scan = seg.scan()
    offs = recs.column("offset").to_numpy()
    ts = recs.column("timestamp").to_numpy()
    z0, z1 = _zoom(ti.offsets, offs)
    fig = new_figure(figsize=(13, 8.5))
    (left, right), (lzoom, rzoom) = fig.subplots(2, 2)
    _offset_index_panels(left, lzoom, seg, oi, scan, z0, z1)
    _time_index_panels(right, rzoom, ti, offs, ts, z0, z1)
    fig.suptitle(
        f"{name} segment {seg.base_offset} (offsets {seg.base_offset}..{seg.next_offset - 1})"
    )
    return fig


def segment_of(name: str, log: PartitionLog, base_offset: int | None) -> LogSegment:
    """The segment at ``base_offset`` of ``log`` (its first when None)."""
    if not log.segments:
        raise ValueError(f"{name} has no segments")
    if base_offset is None:
        return log.segments[0]
    found = [s for s in log.segments if s.base_offset == base_offset]
    if not found:
        raise ValueError(
            f"{name}: no segment with base "
            f"offset {base_offset} (have "
            f"{[s.base_offset for s in log.segments][:10]})"
        )
    return found[0]


def _zoom(entries: np.ndarray, offs: np.ndarray) -> tuple[int, int]:
    """The offsets the zoomed panels show: a few time index intervals (``entries``) in the
    middle, where sparsity and out-of-order records show; all records' without two."""
    m = len(entries) // 2
    if len(entries) >= 2:
        return int(entries[max(m - 2, 0)]), int(entries[min(m + 2, len(entries) - 1)])
    return (int(offs[0]), int(offs[-1])) if len(offs) else (0, 1)


def _offset_index_panels(
    left: Axes,
    lzoom: Axes,
    seg: LogSegment,
    oi: OffsetIndex,
    scan: BatchScan,
    z0: int,
    z1: int,
) -> None:
    """The ``.index`` panels: its entries (offset vs byte position) over every batch
    start, the whole segment and offsets ``z0..z1``."""
    for ax, zoomed in ((left, False), (lzoom, True)):
        bsel = (scan.base_offset <= z1) & (scan.last_offset >= z0) if zoomed else slice(None)
        isel = (oi.offsets >= z0 - 1) & (oi.offsets <= z1) if zoomed else slice(None)
        ax.plot(
            scan.position[bsel],
            scan.base_offset[bsel],
            ".",
            color="0.45",
            markersize=4 if not zoomed else 7,
            label=f"batch starts ({len(scan)})",
        )
        ax.step(oi.positions[isel], oi.offsets[isel], where="post", color="C0", linewidth=1)
        ax.plot(
            oi.positions[isel],
            oi.offsets[isel],
            "o",
            color="C0",
            markersize=6,
            alpha=0.7,
            label=f"offset index entries ({len(oi)})",
        )
        ax.set_xlabel("byte position in .log")
        ax.set_ylabel("offset")
        ax.grid(alpha=0.3)
    left.set_title(
        f".index: {len(oi)} entries for {len(scan)} batches ({size_text(seg.size)})", fontsize=10
    )
    left.legend(loc="upper left", fontsize=8)
    gap = int(np.median(np.diff(oi.positions))) if len(oi) > 1 else seg.size
    lzoom.set_title(
        f"zoom, offsets {z0}..{z1}: an entry every ~{gap} bytes; batches "
        "between entries are found by a scan",
        fontsize=9,
    )


def _time_index_panels(
    right: Axes,
    rzoom: Axes,
    ti: TimeIndex,
    offs: np.ndarray,
    ts: np.ndarray,
    z0: int,
    z1: int,
) -> None:
    """The ``.timeindex`` panels: its entries (largest timestamp so far vs offset) over
    every record's timestamp and their running max, the whole segment and ``z0..z1``."""
    t0 = int(ts.min()) if len(ts) else 0
    late = int(np.count_nonzero(ts < np.maximum.accumulate(ts))) if len(ts) else 0
    for ax, zoomed in ((right, False), (rzoom, True)):
        sel = (offs >= z0) & (offs <= z1) if zoomed else slice(None)
        tsel = (ti.offsets >= z0) & (ti.offsets <= z1) if zoomed else slice(None)
        ax.plot(
            offs[sel],
            (ts[sel] - t0) / 1000,
            ".",
            color="C1",
            alpha=0.35,
            markersize=5 if zoomed else 3,
            label=f"record timestamps ({len(ts)})",
        )
        if len(ts):
            ax.plot(
                offs[sel],
                (np.maximum.accumulate(ts)[sel] - t0) / 1000,
                color="0.4",
                linewidth=0.8,
                label="running max timestamp",
            )
        if len(ti):
            ax.step(
                ti.offsets[tsel],
                (ti.timestamps[tsel] - t0) / 1000,
                where="post",
                color="C3",
                linewidth=1,
            )
            ax.plot(
                ti.offsets[tsel],
                (ti.timestamps[tsel] - t0) / 1000,
                "s",
                color="C3",
                markersize=5,
                label=f"time index entries ({len(ti)})",
            )
        ax.set_xlabel("offset")
        ax.set_ylabel(f"s after {_iso(t0)}")
        ax.grid(alpha=0.3)
    right.axvspan(z0, z1, color="C2", alpha=0.2, label="zoomed below")
    right.set_title(
        f".timeindex: {len(ti)} entries (largest timestamp so far, offset)", fontsize=10
    )
    right.legend(loc="upper left", fontsize=8)
    rzoom.set_title(
        f"zoom: {late} of {len(ts)} records are older than an earlier record "
        "(points below the line)",
        fontsize=9,
    )


def _iso(ms: int) -> str:
    return str(np.datetime64(int(ms), "ms")).replace("T", " ")


MAX_BUCKETS = 2000  # plot_rate draws at most this many time buckets
_BUCKETS = ("1s", "10s", "1min", "10min", "1h", "6h", "1D", "7D", "30D", "365D")


def _bounded_bucket(timestamps: Mapping[int, np.ndarray], bucket: str) -> str:
    """``bucket``, or the first of :data:`_BUCKETS` (then multiples of 365 days) that
    cuts the span of ``timestamps`` into at most :data:`MAX_BUCKETS` buckets."""
    import pandas as pd

    spans = [(int(np.min(t)), int(np.max(t))) for t in timestamps.values() if len(t)]
    if not spans:
        return bucket
    span_ms = max(hi for _, hi in spans) - min(lo for lo, _ in spans)

    def count(b: str) -> int:
        return span_ms // max(1, int(pd.Timedelta(b).total_seconds() * 1000)) + 2

    if count(bucket) <= MAX_BUCKETS:
        return bucket
    for b in _BUCKETS:
        if count(b) <= MAX_BUCKETS:
            return b
    years = -(-count("365D") // MAX_BUCKETS) + 1
    return f"{365 * years}D"


def plot_rate(
    topic: str, timestamps: Mapping[int, np.ndarray], bucket: str = "1min", version: int = 0
) -> Figure:
    """Messages per ``bucket`` (pandas frequency: "1s", "1min", "1h", ...) of ``topic``.

    ``timestamps`` holds every record's timestamp per partition; drawn per partition (up
    to 10 lines) and in total. The buckets are at most :data:`MAX_BUCKETS`: where
    ``bucket`` would make more (records years apart), the first of :data:`_BUCKETS` (then
    whole multiples of 365 days) that does not is drawn, and the title names it.
    """
    import pandas as pd

    new_figure, _, mdates = _mpl()
    parts = sorted(timestamps)
    asked, bucket = bucket, _bounded_bucket(timestamps, bucket)
    counts = {}
    for p in parts:
        ts = timestamps[p]
        idx = pd.to_datetime(ts, unit="ms", utc=True).floor(bucket)
        counts[p] = pd.Series(1, index=idx).groupby(level=0).sum()
    df = pd.DataFrame(counts).fillna(0).sort_index()
    if len(df):
        full = pd.date_range(df.index.min(), df.index.max(), freq=bucket)
        df = df.reindex(full, fill_value=0)
    fig = new_figure(figsize=(11, 4))
    ax = fig.subplots()
    if len(df):  # one more edge so the last bucket is drawn as wide as the others
        x = df.index.tz_convert(None).to_numpy()
        x = np.append(x, x[-1] + pd.Timedelta(bucket).to_timedelta64())
    else:
        x = np.array([], "datetime64[ms]")

    def ys(col: np.ndarray) -> np.ndarray:
        return np.append(col, col[-1]) if len(col) else col

    if len(parts) <= 10:
        for p in parts:
            ax.step(
                x, ys(df[p].to_numpy()), where="post", linewidth=1, alpha=0.8, label=f"{topic}-{p}"
            )
    ax.step(
        x,
        ys(df.sum(axis=1).to_numpy()),
        where="post",
        color="black",
        linewidth=2,
        label="all partitions",
    )
    ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(ax.xaxis.get_major_locator()))
    ax.set_ylabel(f"messages per {bucket}")
    ax.set_xlabel("record timestamp (UTC)")
    coarser = f" ({asked} would make over {MAX_BUCKETS} buckets)" if bucket != asked else ""
    ax.set_title(
        f"{topic}: {int(df.to_numpy().sum())} messages, per {bucket} bucket{coarser} "
        f"(catalog version {version})"
    )
    ax.legend(loc="center right", fontsize=8, ncols=2)
    ax.grid(alpha=0.3)
    ax.set_ylim(bottom=0)
    return fig
