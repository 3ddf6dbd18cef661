"""The lookup job's broadcast for many segments: its serialized size and the driver's memory
(issue 32: "the driver's broadcast for 10,000 segments stays under 64 MiB").

    .venv/bin/python bench/broadcast.py [--segments N] [--partitions P] [--keys K]

No Spark. A catalog of N synthetic segments (default 10,000) over P partitions (default
16) of one topic is committed to a temporary lake (rows as a writer makes them: paths,
counts, timestamps, ``tail_min_timestamps`` checkpoints), then, as the job's driver does
(:func:`seglake.spark.lookup._broadcast`): the snapshot read and
:func:`~seglake.lake.lookup_plan.partition_arrays` built, and the value pickled as
``SparkContext.broadcast`` pickles it (``pickle.dump`` at PySpark's protocol). Reported:
the pickled bytes (what Spark stores and ships to every executor) and the driver's RSS
increase over the build (VmRSS before the snapshot is read, after the value is pickled).

The job does not broadcast key filters (a task reads each segment's ``.keyindex`` where
it runs); the second row is what broadcasting them would cost: a filter a segment sized
for K distinct keys (default 10,000) at the 1 % target, folded to its share of
``BROADCAST_BYTES`` (:meth:`~seglake.storage.key_filter.KeyFilter.folded`), pickled with
the arrays. Replaces the "## broadcast (bench/broadcast.py)" section of bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import os
import pickle
import shutil
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parent))
from results import replace_section

SECTION = "## broadcast (bench/broadcast.py)"
TOPIC = "bench"
LIMIT = 64 << 20  # the bound
RECORDS = 100_000  # records a synthetic segment holds
PROTOCOL = 5  # PySpark's pickle_protocol (pickle.HIGHEST_PROTOCOL on 3.8+)


def rss() -> int:
    """This process's resident bytes now (VmRSS)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def synthetic_catalog(root: str, segments: int, partitions: int) -> None:
    """Commit ``segments`` rows spread over ``partitions`` (one commit), each segment
    ``RECORDS`` records of a second's timestamps, with a writer's tail checkpoints."""
    from seglake.lake.catalog import Catalog
    from seglake.lake.rows import rows_table, segment_row

    rows = []
    for i in range(segments):
        p, k = i % partitions, i // partitions
        base = k * RECORDS
        t0 = 1_700_000_000_000 + 1000 * k
        seg = SimpleNamespace(
            base_offset=base,
            next_offset=base + RECORDS,
            record_count=RECORDS,
            min_timestamp=t0,
            max_timestamp=t0 + 999,
            size_bytes=8 << 20,
            index_entries=2048,
            time_index_entries=2048,
            codec="lz4",
            tail_min_timestamps=[(base + RECORDS // 2, t0 + 500)],
            index_interval_bytes=4096,
        )
        rows.append(segment_row(TOPIC, p, seg, f"{TOPIC}-{p}/{base:020d}.log"))
    Catalog(root).commit(rows_table(rows), "bench-broadcast")


def measure(root: str, keys: int) -> dict[str, tuple[int, int]]:
    """(pickled bytes, RSS increase) of the job's broadcast, and of it with each
    segment's key filter folded to its share of ``BROADCAST_BYTES``."""
    import numpy as np

    from seglake.lake.handle import LakeHandle
    from seglake.lake.lookup_plan import partition_arrays
    from seglake.lake.snapshot import Snapshot
    from seglake.storage.key_filter import BROADCAST_BYTES, KeyFilter, filter_bytes

    before = rss()
    value = partition_arrays(Snapshot.read(LakeHandle.open(root)))
    blob = pickle.dumps(value, PROTOCOL)
    out = {"arrays": (len(blob), rss() - before)}
    del blob
    n = sum(len(a["base_offset"]) for a in value.values())
    share = BROADCAST_BYTES // max(n, 1)
    rng = np.random.default_rng(1)
    before = rss()
    for a in value.values():  # one filter a segment, folded to its share, beside the arrays
        a["key_filter"] = [
            KeyFilter.build(rng.integers(0, 2**63, keys, dtype=np.uint64), filter_bytes(keys))
            .folded(share)
            .to_bytes()
            for _ in range(len(a["base_offset"]))
        ]
    blob = pickle.dumps(value, PROTOCOL)
    out["arrays + key filters"] = (len(blob), rss() - before)
    out["share"] = (len(value[next(iter(value))]["key_filter"][0]), 0)
    return out


def report(args: argparse.Namespace, got: dict[str, tuple[int, int]]) -> str:
    mib = 1 << 20
    lines = [
        SECTION,
        "",
        f"A catalog of {args.segments:,} synthetic segments over {args.partitions} "
        "partitions (one commit); the lookup job's broadcast (`partition_arrays` of its "
        "snapshot: per partition, sorted base/next offsets, min/max timestamps, paths, "
        "sizes, run ids, index intervals and the `LogSegments` running maximum) pickled as "
        "`SparkContext.broadcast` pickles it; the driver's RSS increase over reading the "
        "snapshot, building the value and pickling it. The job broadcasts no key filters "
        "(a task reads each segment's `.keyindex` where it runs); the second row is what "
        f"broadcasting them would add: a filter for {args.keys:,} distinct keys a segment "
        f"folded to {got['share'][0]:,} bytes (its share of `BROADCAST_BYTES`). "
        f"Load average (1 min): {os.getloadavg()[0]:.1f}.",
        "",
        "| broadcast | segments | pickled MiB | driver RSS increase MiB | bound |",
        "|---|---:|---:|---:|---|",
    ]
    for name in ("arrays", "arrays + key filters"):
        size, grew = got[name]
        lines.append(
            f"| {name} | {args.segments:,} | **{size / mib:.2f}** | {grew / mib:.1f} | "
            f"< {LIMIT // mib} MiB: {'yes' if size < LIMIT else '**no**'} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--segments", type=int, default=10_000)
    ap.add_argument("--partitions", type=int, default=16)
    ap.add_argument("--keys", type=int, default=10_000, help="distinct keys a segment")
    ap.add_argument("--quick", action="store_true", help="1,000 segments")
    args = ap.parse_args(argv)
    if args.quick:
        args.segments = 1_000
    root = tempfile.mkdtemp(prefix="seglake-broadcast-")
    try:
        synthetic_catalog(root, args.segments, args.partitions)
        text = report(args, measure(root, args.keys))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(text)
    replace_section(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
