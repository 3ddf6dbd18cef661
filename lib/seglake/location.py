"""LakeLocation: where a lake is, parsed once from its root (and storage options).

pyiceberg builds its FileIO once from a location and its properties; seglake's lake root
is parsed here, once, into everything its readers and writers need:

    root                 the root as given (messages name it)
    uri                  the root without its query: a local path made absolute, or
                         ``scheme://bucket/prefix`` (the catalog is at ``uri/_catalog``)
    base                 the base path on the filesystem (no trailing slash)
    filesystem           the pyarrow filesystem (built on first use, again after unpickling)
    pyarrow_options      S3 options for pyarrow (``endpoint_override``, ``scheme``, ...)
    storage_options      the same for deltalake (``AWS_ENDPOINT_URL``, ``AWS_REGION``, ...)

An ``s3://`` root's options come from its query (``?endpoint_override=host:port&scheme=
http&region=...``), from ``endpoint_override=`` and from deltalake-style storage options
(``AWS_ENDPOINT_URL``, ``AWS_REGION``, ``AWS_ACCESS_KEY_ID``, ...), the later winning;
both the catalog and the segment files get them. Without an endpoint, pyarrow and
deltalake read ``AWS_ENDPOINT_URL`` from the environment (an ``http://`` one turns on
deltalake's ``AWS_ALLOW_HTTP``). Every API may take ``str | LakeLocation``:
:meth:`LakeLocation.of` returns a location unchanged and parses a string.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import pyarrow.fs as pafs

from seglake.errors import ConfigError, FileSystemError

__all__ = ["LakeLocation", "Root", "nested"]

# deltalake (object_store) storage option -> pyarrow S3FileSystem option
_S3_OPTIONS = {
    "AWS_REGION": "region",
    "AWS_ACCESS_KEY_ID": "access_key",
    "AWS_SECRET_ACCESS_KEY": "secret_key",
    "AWS_SESSION_TOKEN": "session_token",
}
_ENDPOINT_OPTIONS = ("AWS_ENDPOINT_URL", "AWS_ENDPOINT")
_CREDENTIALS = frozenset({"access_key", "secret_key", "session_token"})
_S3_KEPT = ("endpoint_override", "scheme", "region")
# An endpoint that does not answer fails a command within seconds, not minutes: pyarrow's
# S3 client (AWS SDK standard retries: 3 attempts) with a connect timeout, and deltalake's
# (object_store: 10 retries over up to 3 minutes by default) with the same bounds, unless
# the storage options given set them.
S3_CONNECT_TIMEOUT_S = 10
S3_ATTEMPTS = 3
S3_RETRY_TIMEOUT_S = 30
_DELTA_BOUNDS = {
    "connect_timeout": f"{S3_CONNECT_TIMEOUT_S}s",
    "max_retries": str(S3_ATTEMPTS - 1),
    "retry_timeout": f"{S3_RETRY_TIMEOUT_S}s",
}
# what pyarrow (curl) and deltalake (reqwest) say when no connection could be made
_UNREACHABLE = re.compile(
    r"Could not connect|Couldn't connect|Failed to connect|Connection refused|"
    r"Could not resolve|dns error|Timeout was reached|timed out|NETWORK_CONNECTION|"
    r"error sending request|connection error",
    re.IGNORECASE,
)


@dataclass(frozen=True, repr=False)
class LakeLocation:
    """The file-system identity of a lake (see the module); build with :meth:`of`.

    Frozen, hashable (by root and options) and picklable: executors get it pickled and
    build the filesystem on first use. ``given_options``: the storage options given to
    :meth:`of`; its repr names the root only (options may hold credentials).
    """

    root: str
    uri: str
    base: str
    pyarrow_options: tuple[tuple[str, str], ...] = ()
    given_options: tuple[tuple[str, str], ...] = ()
    _storage_options: tuple[tuple[str, str], ...] = ()

    @classmethod
    def of(
        cls,
        root: Root,
        storage_options: Mapping[str, str] | None = None,
        *,
        endpoint_override: str | None = None,
    ) -> LakeLocation:
        """``root`` if it is a location (and no options are given), else ``root`` parsed.

        Args:
            root: a location, a local path (made absolute) or a URI pyarrow understands.
            storage_options: deltalake-style options (``AWS_ENDPOINT_URL``, ...), given
                to both the catalog and the segment files (see the module).
            endpoint_override: for ``s3://`` roots, ``http://host:port`` or
                ``host:port`` of an S3-compatible server.

        Raises:
            ConfigError: ``root`` is empty, pyarrow does not understand it, or an
                ``endpoint_override`` is given for a root that is not ``s3://``.
        """
        if isinstance(root, LakeLocation):
            if not storage_options and endpoint_override is None:
                return root
            storage_options = {**dict(root.given_options), **(storage_options or {})}
            root = root.root
        return _parse(os.fspath(root), dict(storage_options or {}), endpoint_override)

    @property
    def storage_options(self) -> dict[str, str]:
        """deltalake storage options of this lake (a new dict)."""
        return dict(self._storage_options)

    @property
    def is_local(self) -> bool:
        """Whether the lake is on this machine's file system (a path, or ``file://``)."""
        return isinstance(self.filesystem, pafs.LocalFileSystem)

    @functools.cached_property
    def filesystem(self) -> pafs.FileSystem:
        """The pyarrow filesystem (built once per object; not pickled)."""
        return _filesystem(self)

    def resolve(self) -> tuple[pafs.FileSystem, str]:
        """``(filesystem, base)``."""
        return self.filesystem, self.base

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.pop("filesystem", None)  # built again where it is unpickled
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    def __str__(self) -> str:
        return self.root

    def __repr__(self) -> str:
        return f"LakeLocation({self.root!r})"

    @property
    def endpoint(self) -> str:
        """The object store this lake is on: the endpoint given (``AWS_ENDPOINT_URL``),
        else AWS S3 (of the region, if given); a local lake: ``local``."""
        if "://" not in self.root:
            return "local"
        options = self.storage_options
        found = options.get("AWS_ENDPOINT_URL") or os.environ.get("AWS_ENDPOINT_URL")
        region = options.get("AWS_REGION") or os.environ.get("AWS_REGION")
        return found or f"AWS S3{f' ({region})' if region else ''}"

    def unreachable(self, exc: BaseException) -> FileSystemError | None:
        """``exc`` as one line naming this lake and its endpoint, if it says the object
        store could not be reached (connection refused, no such host, timeout: pyarrow's
        and deltalake's texts); else ``None``."""
        if "://" not in self.root or not isinstance(exc, OSError):
            return None
        said = str(exc)
        if _UNREACHABLE.search(said) is None:
            return None
        why = (
            "no such host"
            if re.search(r"resolve|dns error", said, re.IGNORECASE)
            else "timed out"
            if re.search(r"timed out|timeout was reached", said, re.IGNORECASE)
            else "connection refused or failed"
        )
        return FileSystemError(
            f"{self.root}: cannot reach the object store at {self.endpoint} ({why}): check "
            "the endpoint (endpoint_override=, AWS_ENDPOINT_URL) and that it is up"
        )


Root = str | os.PathLike[str] | LakeLocation


def _place(root: Root) -> tuple[str, str]:
    """``(store, path)`` where ``root`` is: ``("", real path)`` on this machine (links
    followed as far as the path exists), else ``(scheme://bucket, key prefix)``."""
    text = os.fspath(root.root if isinstance(root, LakeLocation) else root)
    parts = urlsplit(text)
    if "://" not in text or parts.scheme.lower() == "file":
        local = parts.path if "://" in text else text
        return "", os.path.realpath(os.path.abspath(local))
    scheme = parts.scheme.lower()
    scheme = "s3" if scheme in ("s3a", "s3n") else scheme  # Hadoop's names of S3
    return f"{scheme}://{parts.netloc}", "/" + parts.path.strip("/")


def nested(a: Root, b: Root) -> bool:
    """Whether ``a`` and ``b`` are the same place or one is inside the other (a job's
    output and a lake: writing one would write into the other)."""
    (store_a, path_a), (store_b, path_b) = _place(a), _place(b)
    if store_a != store_b:
        return False
    return os.path.commonpath([path_a, path_b]) in (path_a, path_b)


def _parse(root: str, given: dict[str, str], endpoint_override: str | None) -> LakeLocation:
    """The one parser of a lake root and its options."""
    if not isinstance(root, str) or not root.strip():
        raise ConfigError(f"lake root must be a non-empty path or URI, got {root!r}")
    frozen_given = tuple(sorted(given.items()))
    if "://" not in root:
        path = os.path.abspath(root)
        return LakeLocation(root, path, path.replace(os.sep, "/"), (), frozen_given, frozen_given)
    parts = urlsplit(root)
    if endpoint_override is not None and parts.scheme.lower() != "s3":
        raise ConfigError(f"endpoint_override applies to s3:// roots, not {root!r}")
    query = dict(parse_qsl(parts.query))
    options: dict[str, str] = {}
    if parts.scheme.lower() == "s3":
        query, options = _s3_options(query, given, endpoint_override)
    options.update(given)
    uri = urlunsplit(parts._replace(query="", fragment="")).rstrip("/")
    fs, path = _build(root, query)
    location = LakeLocation(
        root,
        uri,
        path.rstrip("/") or path,
        tuple(sorted(query.items())),
        frozen_given,
        tuple(sorted(options.items())),
    )
    location.__dict__["filesystem"] = fs  # built to find the base path: kept
    return location


def _s3_options(
    query: dict[str, str], given: Mapping[str, str], endpoint_override: str | None
) -> tuple[dict[str, str], dict[str, str]]:
    """An ``s3://`` root's pyarrow query and deltalake options, from its URI ``query``,
    the deltalake-style ``given`` options and ``endpoint_override`` (later ones win)."""
    upper = {k.upper(): v for k, v in given.items()}
    endpoint = None
    if "endpoint_override" in query:
        endpoint = f"{query.get('scheme', 'https')}://{query['endpoint_override']}"
    endpoint = next((upper[k] for k in _ENDPOINT_OPTIONS if k in upper), endpoint)
    if endpoint_override is not None:
        endpoint = endpoint_override
    options: dict[str, str] = {}
    if endpoint is not None:
        at = urlsplit(endpoint if "://" in endpoint else f"https://{endpoint}")
        query["endpoint_override"] = at.netloc
        if "://" in endpoint or "scheme" not in query:
            query["scheme"] = at.scheme
        endpoint = f"{query['scheme']}://{at.netloc}"
        options["AWS_ENDPOINT_URL"] = endpoint
    if (endpoint or os.environ.get("AWS_ENDPOINT_URL") or "").startswith("http://"):
        options["AWS_ALLOW_HTTP"] = "true"
    named = {k.lower() for k in given}
    options.update({k: v for k, v in _DELTA_BOUNDS.items() if k not in named})
    for name, pa_name in _S3_OPTIONS.items():
        if name in upper:
            query[pa_name] = upper[name]
    if "region" in query:
        options["AWS_REGION"] = query["region"]
    return query, options


def _filesystem(location: LakeLocation) -> pafs.FileSystem:
    if "://" not in location.root:
        return pafs.LocalFileSystem()
    return _build(location.root, dict(location.pyarrow_options))[0]


def _build(root: str, options: Mapping[str, str]) -> tuple[pafs.FileSystem, str]:
    """pyarrow's filesystem and path of URI ``root`` with ``options`` as its query;
    credentials, which a URI cannot carry, make an ``S3FileSystem`` of the endpoint,
    scheme, region and them."""
    keys = {k: v for k, v in options.items() if k in _CREDENTIALS}
    query = urlencode({k: v for k, v in options.items() if k not in _CREDENTIALS})
    try:
        fs, path = pafs.FileSystem.from_uri(urlunsplit(urlsplit(root)._replace(query=query)))
        if keys:
            kept = {k: v for k, v in options.items() if k in _S3_KEPT}
            fs = pafs.S3FileSystem(**kept, **keys)
    except (ValueError, OSError) as exc:
        raise ConfigError(f"lake root {root!r}: {exc}") from exc
    return _bounded(fs), path


def _bounded(fs: pafs.FileSystem) -> pafs.FileSystem:
    """An S3 filesystem with :data:`S3_CONNECT_TIMEOUT_S` (unless it has one),
    :data:`S3_ATTEMPTS` attempts per request and delayed opens of written files (a missing
    bucket is then named at the close); others unchanged."""
    if not isinstance(fs, pafs.S3FileSystem):
        return fs
    rebuild, (kwargs,) = fs.__reduce__()  # every option the filesystem was made with
    if kwargs.get("connect_timeout", -1) < 0:
        kwargs["connect_timeout"] = float(S3_CONNECT_TIMEOUT_S)
    kwargs["retry_strategy"] = pafs.AwsStandardS3RetryStrategy(max_attempts=S3_ATTEMPTS)
    # a file written is one PUT when it ends before the first multipart part (10 MiB),
    # not a multipart upload begun at its open (a POST, a PUT of the part, a POST)
    kwargs["allow_delayed_open"] = True
    return rebuild(kwargs)
