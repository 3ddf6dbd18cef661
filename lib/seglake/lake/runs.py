"""What a run id covered, so that reusing it for other input is refused, not a silent no-op.

A run's commit carries its input description in the Delta commit's custom metadata
(``seglake.input``, read back with :meth:`CatalogTable.history`)::

    {"paths": ["file:/data/in/part-0.parquet", ...],   first MAX_PATHS input files
     "files": 12, "files_sha256": "...",                sha256 of sorted (path, size, mtime ms)
     "records": 5000, "counts_sha256": "...",           sha256 of sorted (topic, partition, count);
                                                        partition -1: per topic (see below)
     "num_partitions": 8}                               Kafka's partitioner's N, if it was used

:func:`check_reuse` compares a reuse with the record: by the files when both sides know
them (cheap: no count pass), else by the records per partition. A different input raises
:class:`~seglake.errors.RunReuseError` naming both; a run committed before inputs were
recorded cannot be compared and stays a no-op.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from seglake.errors import RunReuseError
from seglake.storage.naming import validate_run_id

__all__ = [
    "INPUT_KEY",
    "RunInput",
    "check_reuse",
    "committed_input",
    "describe_input",
    "new_run_id",
]

INPUT_KEY = "seglake.input"
MAX_PATHS = 5
Counts = Mapping[tuple[str, int], int]


def new_run_id(prefix: str = "") -> str:
    """A sortable, unique run id: ``prefix`` + UTC time + 8 random hex digits
    (``compact-20261125T020715Z-1a2b3c4d``), checked as any run id is."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    return validate_run_id(prefix + stamp + "-" + uuid.uuid4().hex[:8])


def _sha(items: Iterable[Any]) -> str:
    return hashlib.sha256(json.dumps(sorted(items)).encode()).hexdigest()


@dataclasses.dataclass(frozen=True)
class RunInput:
    """A run's input as recorded (see the module docstring); ``None``: not known."""

    paths: tuple[str, ...] = ()
    files: int = 0
    files_sha256: str | None = None
    records: int | None = None
    counts_sha256: str | None = None
    num_partitions: int | None = None

    def to_json(self) -> str:
        return json.dumps({**dataclasses.asdict(self), "paths": list(self.paths)})

    @classmethod
    def from_json(cls, text: str) -> RunInput:
        d = json.loads(text)
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in known and k != "paths"}).with_paths(
            d.get("paths", ())
        )

    def with_paths(self, paths: Iterable[str]) -> RunInput:
        return dataclasses.replace(self, paths=tuple(paths)[:MAX_PATHS])

    def __str__(self) -> str:
        parts = []
        if self.files_sha256:
            left = self.files - len(self.paths)
            more = f", ... {left} more" if left > 0 else ""
            parts.append(
                f"{self.files} file(s) [{', '.join(self.paths)}{more}] "
                f"(sizes+mtimes sha256 {self.files_sha256[:12]})"
            )
        if self.counts_sha256:
            parts.append(
                f"{self.records} record(s) (per-partition counts sha256 {self.counts_sha256[:12]})"
            )
        return ", ".join(parts) or "unknown input"


def describe_input(
    files: Iterable[tuple[str, int, int]] | None = None,
    counts: Counts | None = None,
    *,
    num_partitions: int | None = None,
) -> RunInput:
    """A run's input: its files ``(path, size, mtime ms)`` and/or its records per
    ``(topic, partition)`` (per topic when Kafka's partitioner with ``num_partitions``
    chose the partitions: null keys go round robin, in an order the input decides)."""
    out = RunInput(num_partitions=num_partitions)
    if files:
        files = sorted(files)
        out = dataclasses.replace(
            out, files=len(files), files_sha256=_sha([list(f) for f in files])
        ).with_paths(p for p, _, _ in files)
    if counts is not None:
        if num_partitions is not None:  # Kafka's partitioner: null keys go round robin,
            by_topic: dict[tuple[str, int], int] = {}  # which depends on the input order
            for (t, _), n in counts.items():
                by_topic[(t, -1)] = by_topic.get((t, -1), 0) + int(n)
            counts = by_topic
        out = dataclasses.replace(
            out,
            records=int(sum(counts.values())),
            counts_sha256=_sha([[t, int(p), int(n)] for (t, p), n in counts.items() if n]),
        )
    return out


def committed_input(catalog: Any, run_id: str) -> tuple[int, RunInput | None] | None:
    """``(version, recorded input)`` of the commit ``run_id`` made (input ``None`` if it
    recorded none); ``None`` if the run id has not committed."""
    if not catalog.run_committed(run_id):
        return None
    for h in catalog.history():
        if h.run_id == run_id:
            text = h.metadata.get(INPUT_KEY)
            return h.version, (RunInput.from_json(text) if text else None)
    return None


def check_reuse(
    catalog: Any,
    run_id: str,
    current: RunInput,
    *,
    counts: Callable[[RunInput], Counts] | None = None,
) -> int | None:
    """Refuse reusing ``run_id`` for input other than what it committed.

    Args:
        catalog: the lake's catalog.
        run_id: the run id being reused.
        current: this run's input (files and/or counts as far as known).
        counts: computes this run's records per partition when the files do not decide
            (given the recorded input: its ``num_partitions``); skipped if not needed.

    Returns:
        The version the run id committed (``None``: it has not committed).

    Raises:
        RunReuseError: the run id committed other input (one line naming both).
    """
    found = committed_input(catalog, run_id)
    if found is None:
        return None
    version, stored = found
    if stored is None:
        return version
    if stored.files_sha256 and current.files_sha256:
        same = stored.files_sha256 == current.files_sha256
    else:
        if current.counts_sha256 is None and counts is not None:
            n = stored.num_partitions
            current = dataclasses.replace(
                current, **_count_fields(describe_input(counts=counts(stored), num_partitions=n))
            )
        same = stored.counts_sha256 is None or stored.counts_sha256 == current.counts_sha256
    if not same:
        raise RunReuseError(
            f"run id {run_id!r} committed catalog version {version} for {stored}; this run's "
            f"input is {current}: nothing was written (use a new run id for new input)"
        )
    return version


def _count_fields(d: RunInput) -> dict[str, Any]:
    return {"records": d.records, "counts_sha256": d.counts_sha256}
