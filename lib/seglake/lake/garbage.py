"""Retired files: segment files a catalog commit removed or replaced, kept for readers
still pinned to an older catalog version, deleted once older than ``file.delete.delay.ms``
(Kafka's delayed segment delete, with a lake's delay: see ``conf/seglake.properties``).

    <root>/_retired/<version, 20 digits>-<12 hex>.json     one manifest per retirement
        {"version": W, "retired_at_ms": T, "operation": "retention", "run_id": "...",
         "paths": ["t-0/00000000000000000000.log", "t-0/00000000000000000000.index", ...]}

:func:`retire` writes a manifest after the commit ``W`` that removed the rows (a ``.log``
path retires its ``.index``/``.timeindex``/``.txnindex`` too). :func:`collect` deletes the
files of manifests retired more than ``older_than_ms`` ago, then the manifest; it never
deletes a path that a current catalog row names, nor a file modified after it was retired
(a new segment that took the same name). A crash between a commit and its :func:`retire`
leaves files without rows: retention finds them and retires them then.

A reader pinned to a version older than ``W`` that still needs a deleted file gets one
:class:`~seglake.errors.VersionSupersededError` (:mod:`seglake.lake.pinned`).

:func:`catalog_orphans` finds the catalog's own garbage: parquet files under ``_catalog/``
that no Delta log entry names (a commit that failed after writing its data file, e.g. on
a full disk), as Delta's VACUUM does for files never committed.
"""

from __future__ import annotations

import dataclasses
import json
import time
import urllib.parse
import uuid
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, cast

import pyarrow.fs as pafs

from seglake import fs as lakefs
from seglake import lake_paths
from seglake.errors import CorruptManifestError, InvalidTopicError, SegmentNotFoundError
from seglake.lake.handle import LakeHandle
from seglake.lake_paths import RETIRED_DIR
from seglake.storage.naming import LOG_SUFFIX, SEGMENT_SUFFIXES

__all__ = [
    "CATALOG_ORPHAN_MIN_AGE_MS",
    "Collected",
    "catalog_orphans",
    "collect",
    "retire",
    "retired_paths",
]

_COMPANIONS = SEGMENT_SUFFIXES


def _expand(rel_paths: Iterable[str]) -> list[str]:
    out: list[str] = []
    for p in rel_paths:
        p = lake_paths.validate_relative(p)
        if p.endswith(LOG_SUFFIX):
            out += [p[: -len(LOG_SUFFIX)] + s for s in _COMPANIONS]
        else:
            out.append(p)
    return sorted(set(out))


def retire(
    lake: LakeHandle,
    rel_paths: Iterable[str],
    *,
    version: int,
    operation: str | None = None,
    run_id: str | None = None,
    now_ms: int | None = None,
) -> str | None:
    """Record that catalog ``version`` removed the files at ``rel_paths`` (relative to
    ``root``; a ``.log`` stands for all the segment's files). They stay readable until
    :func:`collect` runs past the delay. Returns the manifest path (``None``: no paths)."""
    fs, base = lake.fs, lake.base
    paths = _expand(rel_paths)
    infos = fs.get_file_info([lake_paths.safe_join(base, p) for p in paths]) if paths else []
    paths = [p for p, i in zip(paths, infos, strict=True) if i.type == pafs.FileType.File]
    if not paths:
        return None
    manifest = {
        "version": int(version),
        "retired_at_ms": int(time.time() * 1000) if now_ms is None else int(now_ms),
        "operation": operation,
        "run_id": run_id,
        "paths": paths,
    }
    name = f"{int(version):020d}-{uuid.uuid4().hex[:12]}.json"
    path = lakefs.join(base, RETIRED_DIR, name)
    fs.create_dir(lakefs.join(base, RETIRED_DIR), recursive=True)
    lakefs.write_bytes(fs, path, json.dumps(manifest).encode())
    return path


def _manifests(fs: pafs.FileSystem, base: str) -> list[tuple[str, dict[str, Any]]]:
    """Every manifest ``(path, document)``, each checked (:func:`_checked`); one gone
    meanwhile (another ``cleanup``) or not JSON (half-written) counts as empty."""
    out = []
    for name in sorted(lakefs.listdir(fs, lakefs.join(base, RETIRED_DIR), missing_ok=True)):
        if not name.endswith(".json"):
            continue
        path = lakefs.join(base, RETIRED_DIR, name)
        try:
            doc = json.loads(lakefs.read_all(fs, path))
        except (SegmentNotFoundError, ValueError):  # half-written by a crash: unusable
            doc = {"retired_at_ms": 0, "paths": []}
        out.append((path, _checked(path, doc)))
    return out


def _checked(path: str, doc: object) -> dict[str, Any]:
    """``doc`` if it is a manifest's shape (the module docstring): an object whose
    ``retired_at_ms`` is an integer and whose ``paths`` are lake paths
    (:func:`~seglake.lake_paths.validate_relative`); else :class:`CorruptManifestError`."""
    why = None
    if not isinstance(doc, dict):
        why = f"is a JSON {type(doc).__name__}, not an object"
    elif not _is_int(doc.get("retired_at_ms")):
        why = f"retired_at_ms is {doc.get('retired_at_ms')!r}, not an integer"
    elif "version" in doc and not _is_int(doc["version"]):
        why = f"version is {doc['version']!r}, not an integer"
    elif not isinstance(doc.get("paths"), list):
        why = f"paths is {type(doc.get('paths')).__name__}, not a list"
    else:
        for p in doc["paths"]:
            try:
                lake_paths.validate_relative(p)
            except InvalidTopicError as exc:
                why = f"paths: {exc}"
                break
    if why:
        raise CorruptManifestError(
            f"{path}: damaged retired-files manifest: {why}; nothing was deleted "
            "(remove or fix the file, then rerun)"
        )
    return cast(dict[str, Any], doc)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def retired_paths(lake: LakeHandle) -> set[str]:
    """Every path some manifest retires (not collected yet)."""
    fs, base = lake.fs, lake.base
    return {p for _, m in _manifests(fs, base) for p in m.get("paths", [])}


@dataclasses.dataclass
class Collected:
    """What :func:`collect` deleted (or would), and what it kept."""

    deleted: list[str]
    kept_young: int
    kept_in_use: list[str]

    def __str__(self) -> str:
        return (
            f"deleted {len(self.deleted)} retired file(s); kept {self.kept_young} younger "
            f"than the delay"
            + (f" and {len(self.kept_in_use)} in use again" if self.kept_in_use else "")
        )


def collect(
    lake: LakeHandle,
    *,
    older_than_ms: int,
    dry_run: bool = False,
    in_use: set[str] | None = None,
    now_ms: int | None = None,
) -> Collected:
    """Delete the files retired more than ``older_than_ms`` ago, then their manifests.

    ``in_use``: paths (relative, ``.log`` stands for the segment) that current catalog
    rows name; default: read from the catalog. Those, and files modified after their
    retirement, are kept (their manifest entry is dropped).
    """
    fs, base = lake.fs, lake.base
    now = int(time.time() * 1000) if now_ms is None else now_ms
    manifests = _manifests(fs, base)
    due = [(p, m) for p, m in manifests if now - m["retired_at_ms"] >= older_than_ms]
    young = sum(len(m["paths"]) for _, m in manifests) - sum(len(m["paths"]) for _, m in due)
    report = Collected([], young, [])
    if not due:
        return report
    if in_use is None:
        catalog = lake.catalog
        in_use = set(catalog.segments().column("path").to_pylist()) if catalog.exists() else set()
    used = set(_expand(in_use))
    wanted = sorted({p for _, m in due for p in m["paths"]})
    infos = fs.get_file_info([lake_paths.safe_join(base, p) for p in wanted]) if wanted else []
    retired_at = {p: m["retired_at_ms"] for _, m in due for p in m["paths"]}
    doomed = []
    for rel, info in zip(wanted, infos, strict=True):
        if info.type != pafs.FileType.File:
            continue
        changed = info.mtime is not None and info.mtime.timestamp() * 1000 > retired_at[rel] + 1
        if rel in used or changed:
            report.kept_in_use.append(rel)
        else:
            doomed.append(rel)
    report.deleted = doomed
    if dry_run:
        return report

    for rel in doomed:  # every target checked before the first delete: all or nothing
        lake_paths.check_delete(fs, base, lake_paths.safe_join(base, rel))

    def delete(rel: str) -> None:
        lakefs.delete_file(fs, lake_paths.safe_join(base, rel), root=base)

    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(delete, doomed))
    for path, _ in due:
        lakefs.delete_file(fs, path, root=base)
    return report


# a commit in flight has written its data file but not yet its log entry: never younger
CATALOG_ORPHAN_MIN_AGE_MS = 3600 * 1000
_DELTA_LOG = "_delta_log"


def _logged_paths(fs: pafs.FileSystem, table: str) -> set[str]:
    """Every data file path (relative to the table) an add or remove action of the Delta
    log names: its JSON commits and its checkpoints."""
    import pyarrow.parquet as pq

    from seglake.lake.table import log_commits

    log_dir = lakefs.join(table, _DELTA_LOG)
    paths: set[str] = set()
    for _, actions in log_commits(fs, table):  # a damaged log: nothing is an orphan
        for action in actions:
            for kind in ("add", "remove"):
                if isinstance(action.get(kind), dict) and isinstance(action[kind].get("path"), str):
                    paths.add(action[kind]["path"])
    for name in lakefs.listdir(fs, log_dir, missing_ok=True):
        path = lakefs.join(log_dir, name)
        if ".checkpoint" in name and name.endswith(".parquet"):
            cols = pq.read_table(path, filesystem=fs, columns=["add", "remove"])
            for kind in ("add", "remove"):
                for a in cols.column(kind).to_pylist():
                    if a is not None and a.get("path"):
                        paths.add(a["path"])
    return {urllib.parse.unquote(p) for p in paths}


def catalog_orphans(
    lake: LakeHandle, *, older_than_ms: int, dry_run: bool = False, now_ms: int | None = None
) -> list[str]:
    """Delete (or list) the parquet files under ``<root>/_catalog/`` that the Delta log
    does not name and that are older than ``older_than_ms`` (at least
    :data:`CATALOG_ORPHAN_MIN_AGE_MS`). Returns their paths relative to the table."""
    from seglake.lake_paths import CATALOG_DIR

    fs, base = lake.fs, lake.base
    table = lakefs.join(base, CATALOG_DIR)
    if not lakefs.exists(fs, lakefs.join(table, _DELTA_LOG)):
        return []
    now = int(time.time() * 1000) if now_ms is None else now_ms
    age = max(older_than_ms, CATALOG_ORPHAN_MIN_AGE_MS)
    selector = pafs.FileSelector(table, recursive=True)
    files = {
        i.path[len(table) + 1 :]: i
        for i in fs.get_file_info(selector)
        if i.type == pafs.FileType.File and i.path.endswith(".parquet")
    }
    files = {rel: i for rel, i in files.items() if not rel.startswith(_DELTA_LOG + "/")}
    logged = _logged_paths(fs, table)
    orphans = sorted(
        rel
        for rel, i in files.items()
        if rel not in logged and i.mtime is not None and now - i.mtime.timestamp() * 1000 >= age
    )
    if not dry_run:
        for rel in orphans:
            lakefs.delete_file(fs, lakefs.join(table, rel), root=base, catalog=True)
    return orphans
