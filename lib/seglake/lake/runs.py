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
import re
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from seglake.errors import CatalogError, RunReuseError
from seglake.format import LONG_MAX
from seglake.storage.naming import validate_run_id

__all__ = [
    "INPUT_KEY",
    "RunInput",
    "check_reuse",
    "committed_input",
    "describe_input",
    "new_run_id",
    "recorded_input",
]

INPUT_KEY = "seglake.input"
MAX_PATHS = 5
MAX_INPUT_CHARS = 1 << 20  # MAX_PATHS paths, numbers and two digests: a few kB
Counts = Mapping[tuple[str, int], int]


def _count(v: Any, low: int = 0) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and low <= v <= LONG_MAX


def _digest(v: Any) -> bool:
    return v is None or (isinstance(v, str) and re.fullmatch("[0-9a-f]{64}", v) is not None)


# each recorded field: its check and what it must be (RunInput.from_json)
_FIELD_CHECKS: dict[str, Callable[[Any], bool]] = {
    "paths": lambda v: isinstance(v, list) and all(isinstance(p, str) for p in v),
    "files": _count,
    "files_sha256": _digest,
    "records": lambda v: v is None or _count(v),
    "counts_sha256": _digest,
    "num_partitions": lambda v: v is None or _count(v, 1),
}
_FIELD_FORMS = {
    "paths": "expected a list of strings",
    "files": f"expected a count 0..{LONG_MAX}",
    "files_sha256": "expected null or 64 hex digits",
    "records": f"expected null or a count 0..{LONG_MAX}",
    "counts_sha256": "expected null or 64 hex digits",
    "num_partitions": f"expected null or 1..{LONG_MAX}",
}


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
    def from_json(cls, text: Any, where: str = "a commit") -> RunInput:
        """What :meth:`to_json` wrote; anything else (a commit altered or damaged) is a
        :class:`~seglake.errors.CatalogError` naming ``where`` and what is wrong."""

        def damaged(why: str) -> CatalogError:
            return CatalogError(f"{where}: {INPUT_KEY} {why} (not what a seglake run records)")

        if not isinstance(text, str) or len(text) > MAX_INPUT_CHARS:
            size = f"{len(text)} characters" if isinstance(text, str) else type(text).__name__
            raise damaged(f"is {size}, not a JSON text of < {MAX_INPUT_CHARS} characters")
        try:
            d = json.loads(text)
        except RecursionError:
            raise damaged("is JSON nested too deep") from None
        except ValueError as exc:
            raise damaged(f"is not JSON: {exc}") from None
        if not isinstance(d, dict):
            raise damaged(f"is not a JSON object: {text[:80]!r}")
        wrong = [k for k, ok in _FIELD_CHECKS.items() if k in d and not ok(d[k])]
        if wrong:
            raise damaged(f"has {wrong[0]}={d[wrong[0]]!r:.80}: {_FIELD_FORMS[wrong[0]]}")
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
            return h.version, recorded_input(catalog, h)
    return None


def recorded_input(catalog: Any, entry: Any) -> RunInput | None:
    """The input the commit of history ``entry`` recorded (``None``: none); an altered
    record is a :class:`~seglake.errors.CatalogError` naming the catalog and version."""
    text = entry.metadata.get(INPUT_KEY)
    if text is None or text == "":
        return None
    return RunInput.from_json(text, f"{catalog.uri} version {entry.version}")


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
