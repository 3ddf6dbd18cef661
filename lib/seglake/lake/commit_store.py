"""Whether a lake's store gives the catalog's commit the put-if-absent it rests on.

A catalog commit is Delta's: the commit file ``_catalog/_delta_log/<V+1>.json`` is
written only if absent; a second writer of the same version is refused and re-plans
(``lake/transact.py``). That is the store's guarantee, not seglake's. deltalake 1.x
gets it from:

    local disk, file://     a rename that never replaces (link + unlink)
    s3://, s3a://           S3 conditional writes (PUT with ``If-None-Match: *``, 412 when
                            the key exists): AWS S3 since 2024-08, MinIO, Cloudflare R2,
                            SeaweedFS (4.53 measured); deltalake turns them on by default
    gs://                   Google Cloud Storage generation preconditions
    az://, abfs(s)://       Azure Blob ``If-None-Match``
    hdfs://                 a rename that refuses an existing target

:func:`require_put_if_absent` refuses, with one :class:`~seglake.errors.UnsafeCommitError`
line naming the lake, the store and the option, every configuration that gives no such
guarantee, before anything is written:

* ``conditional_put`` / ``aws_conditional_put`` = ``disabled`` (storage option or the
  ``AWS_CONDITIONAL_PUT`` environment variable): deltalake then has no put-if-absent on
  S3 (every commit would fail with "PutMode::Create ... not yet implemented");
* ``AWS_S3_ALLOW_UNSAFE_RENAME`` true (option or environment): deltalake's documented
  opt-out of safe concurrent writes, set for stores without conditional writes (deltalake
  1.6 still sends ``If-None-Match``, measured; on a store that ignores it a racing commit
  would overwrite another's version);
* a scheme not in the table above (no known put-if-absent).

A store that accepts ``If-None-Match`` and ignores it cannot be told from its
configuration: RELIABILITY.md names the stores measured.
"""

from __future__ import annotations

import os
from urllib.parse import urlsplit

from seglake.errors import UnsafeCommitError
from seglake.location import LakeLocation

__all__ = ["PUT_IF_ABSENT_SCHEMES", "put_if_absent_refusal", "require_put_if_absent"]

# schemes whose deltalake commit is put-if-absent ("": a local path)
PUT_IF_ABSENT_SCHEMES = frozenset(
    {"", "file", "s3", "s3a", "gs", "gcs", "az", "abfs", "abfss", "hdfs"}
)
_S3 = frozenset({"s3", "s3a"})
_TRUE = frozenset({"1", "true", "on", "yes", "y"})  # deltalake's str_is_truthy
_CONDITIONAL_PUT = ("conditional_put", "aws_conditional_put")
_UNSAFE_RENAME = "aws_s3_allow_unsafe_rename"


def _options(location: LakeLocation) -> dict[str, tuple[str, str]]:
    """``{lower-case name: (name as given, value)}`` of the storage options deltalake
    reads for this lake: the environment's, then the location's (which win)."""
    found = {k.lower(): (k, v) for k, v in os.environ.items()}
    found.update({k.lower(): (k, v) for k, v in location.storage_options.items()})
    return found


def put_if_absent_refusal(location: LakeLocation) -> str | None:
    """Why a catalog commit to ``location`` would have no put-if-absent (the option or
    scheme named), or ``None`` when the store as configured gives it (module docstring)."""
    scheme = "" if "://" not in location.root else urlsplit(location.root).scheme.lower()
    if scheme not in PUT_IF_ABSENT_SCHEMES:
        return f"the {scheme}:// store has no put-if-absent deltalake relies on"
    if scheme not in _S3:
        return None
    options = _options(location)
    for name in _CONDITIONAL_PUT:
        given, value = options.get(name, ("", ""))
        if value.strip().lower() == "disabled":
            return f"{given}={value} turns off S3 conditional writes (put-if-absent)"
    given, value = options.get(_UNSAFE_RENAME, ("", ""))
    if value.strip().lower() in _TRUE:
        return (
            f"{given}={value} opts out of safe concurrent commits (deltalake's setting for "
            "stores without conditional writes)"
        )
    return None


def require_put_if_absent(location: LakeLocation) -> None:
    """Refuse (:class:`UnsafeCommitError`, one line) to commit to ``location`` when its
    store as configured gives no put-if-absent (:func:`put_if_absent_refusal`)."""
    why = put_if_absent_refusal(location)
    if why is not None:
        raise UnsafeCommitError(
            f"{location.root}: refused to commit to the catalog on {location.endpoint}: {why}; "
            "without put-if-absent a concurrent commit could be lost (nothing written; "
            "see RELIABILITY.md, object stores)"
        )
