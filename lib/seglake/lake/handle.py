"""LakeHandle: one lake, opened once per operation and passed down.

The entry points (the CLI commands, the Spark job mains, ``seglake.open``, the data
source's and both sinks' options) turn a root string into a handle with :meth:`open`;
every ``lake/`` function below them takes the handle and never parses a root again. It
owns:

    location      the :class:`~seglake.location.LakeLocation` (root, options, filesystem)
    fs, base      the pyarrow filesystem and the base path on it
    catalog       the :class:`~seglake.lake.catalog.Catalog` at ``<root>/_catalog``, built
                  on first use and kept (the one place a ``Catalog`` is constructed)
    the layout    partition directories, ``_staging/<run>``, ``_retired/<run>``, a catalog
                  row's files (names from ``seglake.lake_paths`` and ``storage/naming.py``)

Picklable as the location is: executors get the handle (or a ``SegmentRef``) and build
the filesystem again on first use; the catalog is never pickled.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import pyarrow.fs as pafs

from seglake import fs as lakefs
from seglake.lake.catalog import Catalog
from seglake.lake_paths import CATALOG_DIR, RETIRED_DIR, STAGING_DIR, safe_join
from seglake.location import LakeLocation, Root
from seglake.storage.naming import partition_dir_name, run_dir

__all__ = ["LakeHandle"]


class LakeHandle:
    """A lake opened once (see the module): build with :meth:`open` at an entry point,
    or around a location already parsed (``LakeHandle(location)``)."""

    def __init__(self, location: LakeLocation) -> None:
        if not isinstance(location, LakeLocation):
            raise TypeError(f"LakeHandle takes a LakeLocation, got {type(location).__name__}")
        self.location = location

    @classmethod
    def open(
        cls,
        root: Root | LakeHandle,
        storage_options: Mapping[str, str] | None = None,
        *,
        endpoint_override: str | None = None,
    ) -> LakeHandle:
        """The handle of ``root`` (a handle without options: itself), parsed once: the
        entry points' call (``ConfigError`` for a root pyarrow does not understand)."""
        if isinstance(root, LakeHandle):
            if not storage_options and endpoint_override is None:
                return root
            root = root.location
        return cls(LakeLocation.of(root, storage_options, endpoint_override=endpoint_override))

    # ------------------------------------------------------------------ identity

    @property
    def root(self) -> str:
        """The root as given (messages name it)."""
        return self.location.root

    @property
    def fs(self) -> pafs.FileSystem:
        """The pyarrow filesystem (the location's, built once)."""
        return self.location.filesystem

    @property
    def base(self) -> str:
        """The lake's base path on :attr:`fs` (no trailing slash)."""
        return self.location.base

    @property
    def is_local(self) -> bool:
        """Whether the lake is on this machine's file system."""
        return self.location.is_local

    @functools.cached_property
    def catalog(self) -> Catalog:
        """The lake's catalog, built on first use and kept (not pickled)."""
        return Catalog(self.location)

    # ------------------------------------------------------------------ layout

    def path(self, relative: str) -> str:
        """``<base>/<relative>`` for a path read from the catalog (``safe_join``: one
        that would leave the lake is refused)."""
        return safe_join(self.base, relative)

    def join(self, *parts: str) -> str:
        """``<base>/<parts...>`` for names seglake built itself."""
        return lakefs.join(self.base, *parts)

    @property
    def catalog_dir(self) -> str:
        """``<base>/_catalog``."""
        return lakefs.join(self.base, CATALOG_DIR)

    @property
    def staging_root(self) -> str:
        """``<base>/_staging``: every run's staged files."""
        return lakefs.join(self.base, STAGING_DIR)

    @property
    def retired_root(self) -> str:
        """``<base>/_retired``: every run's retired files."""
        return lakefs.join(self.base, RETIRED_DIR)

    def staging(self, run_id: str) -> str:
        """``<base>/_staging/<run>`` (the run id validated)."""
        return run_dir(self.base, STAGING_DIR, run_id)

    def retired(self, run_id: str) -> str:
        """``<base>/_retired/<run>`` (the run id validated)."""
        return run_dir(self.base, RETIRED_DIR, run_id)

    def partition_dir(self, topic: str, partition: int) -> str:
        """``<base>/<topic>-<partition>`` (both validated)."""
        return lakefs.join(self.base, partition_dir_name(topic, partition))

    # ------------------------------------------------------------------ object

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.pop("catalog", None)  # built again where it is needed
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, LakeHandle) and other.location == self.location

    def __hash__(self) -> int:
        return hash(self.location)

    def __str__(self) -> str:
        return self.root

    def __repr__(self) -> str:
        return f"LakeHandle({self.root!r})"
