"""What an ingest run did (:class:`IngestResult`, with a table for people) and its run id.

run id:  20261125T020715Z-1a2b3c4d   (UTC time, sortable; 8 random hex digits)
"""

from __future__ import annotations

import dataclasses

import pyarrow as pa
import pyarrow.compute as pc

from seglake.lake.runs import new_run_id

__all__ = ["IngestResult", "new_run_id"]


@dataclasses.dataclass
class IngestResult:
    """What an ingest run did."""

    run_id: str
    committed: bool
    already_committed: bool
    segments: pa.Table
    seconds: float
    catalog_version: int | None = None

    @property
    def records(self) -> int:
        return int(pc.sum(self.segments["record_count"]).as_py() or 0)

    @property
    def bytes(self) -> int:
        return int(pc.sum(self.segments["size_bytes"]).as_py() or 0)

    def summary(self) -> str:
        """A table for people: topics, partitions, segments, records, bytes, s, MB/s."""
        if self.already_committed:
            return f"run {self.run_id} was already committed: nothing to do"
        seg = self.segments.to_pandas()
        lines = [f"{'topic':<24}{'partitions':>11}{'segments':>10}{'records':>12}{'bytes':>14}"]
        for topic, g in seg.groupby("topic"):
            lines.append(
                f"{topic:<24}{g['partition'].nunique():>11}{len(g):>10}"
                f"{int(g['record_count'].sum()):>12,}{int(g['size_bytes'].sum()):>14,}"
            )
        mbs = self.bytes / 1e6 / self.seconds if self.seconds > 0 else 0.0
        lines.append(
            f"{'total':<24}{seg.groupby(['topic', 'partition']).ngroups:>11}"
            f"{len(seg):>10}{self.records:>12,}{self.bytes:>14,}"
        )
        lines.append(
            f"run {self.run_id}: {self.seconds:.1f} s, {mbs:.1f} MB/s, "
            f"catalog version {self.catalog_version}"
        )
        return "\n".join(lines)
