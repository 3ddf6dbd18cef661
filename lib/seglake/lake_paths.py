"""The lake's layout names and which of its paths may be touched: the one home of both.

    <root>/_catalog/            the Delta catalog (lake/table.py); never deleted unless asked
    <root>/_staging/<run>/...   a run's files before they are published (lake/staging.py)
    <root>/_retired/<run>/...   a run's files after a later run replaced them under the same
                                name; kept for pinned readers until collected (lake/garbage.py)
    <root>/<topic>-<p>/...      partition directories (storage/naming.py)

:func:`validate_relative` and :func:`safe_join`: a path read from the catalog stays below
the root; :func:`check_delete`: the one guard every delete of seglake's goes through
(``fs.delete_file`` / ``fs.delete_dir``). Below ``fs`` and ``storage`` (imports only
``errors``), so both use it.
"""

from __future__ import annotations

import os
import re

import pyarrow.fs as pafs

from seglake.errors import InvalidTopicError, OutsideLakeError

__all__ = [
    "CATALOG_DIR",
    "LAYOUT_DIRS",
    "RETIRED_DIR",
    "STAGING_DIR",
    "check_delete",
    "safe_join",
    "validate_relative",
]

CATALOG_DIR = "_catalog"  # the lake's Delta table: <root>/_catalog
STAGING_DIR = "_staging"  # <root>/_staging/<run>/<path>: a run's files before they are published
RETIRED_DIR = "_retired"  # <root>/_retired/<run>/<path>: a run's files after a later run
# (compaction, segment merging) replaced them under the same name; kept for pinned readers
LAYOUT_DIRS = (CATALOG_DIR, STAGING_DIR, RETIRED_DIR)  # a lake's directories that hold no topic

_SCHEME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
_UNSAFE_CHARS = re.compile(r"[\\:%?#~\x00-\x1f\x7f]")


def validate_relative(relative: str) -> str:
    """Return ``relative`` if it is a plain relative path that stays below its root.

    Refused: absolute paths, URIs and drive letters, ``.``/``..`` or empty components,
    backslashes, and characters that URL decoding or a shell could turn into an escape
    (``%``, ``?``, ``#``, ``~``, ``:``, control characters).

    Raises:
        InvalidTopicError: the path is unsafe (the message names it).
    """
    if not isinstance(relative, str):
        raise InvalidTopicError(f"lake path must be a string, got {type(relative).__name__}")
    reason = None
    if not relative:
        reason = "is empty"
    elif relative.startswith("/"):
        reason = "is absolute"
    elif _SCHEME_RE.match(relative) or "://" in relative:
        reason = "is a URI, not a path relative to the lake root"
    elif m := _UNSAFE_CHARS.search(relative):
        reason = f"contains {m.group()!r}"
    else:
        for part in relative.split("/"):
            if part in ("", ".", ".."):
                reason = f"has a {part or 'empty'!r} component"
                break
    if reason:
        raise InvalidTopicError(f"unsafe lake path {relative!r}: {reason}")
    return relative


def safe_join(root: str, relative: str) -> str:
    """``root/relative`` for a path read from the catalog, refusing anything that escapes.

    Raises:
        InvalidTopicError: ``relative`` is absolute, a URI, or contains ``..`` (see
            :func:`validate_relative`).
    """
    validate_relative(relative)
    base = root.rstrip("/")
    out = f"{base}/{relative}" if base else relative
    if base and not out.startswith(base + "/"):  # belt and braces
        raise InvalidTopicError(f"unsafe lake path {relative!r}: leaves {root!r}")
    return out


def check_delete(
    fs: pafs.FileSystem,
    root: str,
    path: str,
    *,
    catalog: bool = False,
    root_itself: bool = False,
) -> str:
    """``path`` if it may be deleted in the lake (or partition directory) at ``root``:
    the one guard every delete of seglake's goes through.

    Refused, with one :class:`~seglake.errors.OutsideLakeError` line naming both: a
    target whose real path is not strictly under ``root``'s, ``root`` itself (unless
    ``root_itself``: an empty root a failed run made), and anything in
    ``<root>/_catalog`` unless ``catalog``. On a local file system the
    target is ``realpath(parent) + name``: a symlinked directory on the way is followed
    (and refused if it leads out), a symlink as the target itself is not (deleting the
    link is fine). On object stores the key must lie under the base prefix, with no
    empty, ``.`` or ``..`` component.
    """
    rel = _relative_real(fs, root, path)
    why = None
    if rel is None:
        why = "is not inside the lake root"
    elif rel == "" and not root_itself:
        why = "is the lake root itself"
    elif rel.split("/", 1)[0] == CATALOG_DIR and not catalog:
        why = "is in the lake's catalog"
    if why:
        raise OutsideLakeError(f"refused to delete {path}: {why} {root} (nothing deleted)")
    return path


def _relative_real(fs: pafs.FileSystem, root: str, path: str) -> str | None:
    """``path`` relative to ``root`` after resolving (``""``: the root; ``None``:
    outside it)."""
    if isinstance(fs, pafs.LocalFileSystem):
        base = os.path.realpath(root)
        parent, name = os.path.split(path.rstrip("/") or "/")
        if name in ("", ".", ".."):
            target = os.path.realpath(path)
        else:
            target = os.path.join(os.path.realpath(parent or "."), name)
        if target == base:
            return ""
        if not target.startswith(base.rstrip("/") + "/"):
            return None
        return target[len(base.rstrip("/")) + 1 :]
    base, key = root.rstrip("/"), path.rstrip("/")
    if key == base:
        return ""
    prefix = base + "/" if base else ""
    if not key.startswith(prefix):
        return None
    rel = key[len(prefix) :]
    if any(part in ("", ".", "..") for part in rel.split("/")):
        return None
    return rel
