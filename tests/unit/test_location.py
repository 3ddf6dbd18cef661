"""LakeLocation: a lake root parsed once (filesystem, base path, storage options for
pyarrow and deltalake), picklable for executors; ``seglake.open(root, storage_options=)``
gives the options to the catalog and the segment files alike (a SeaweedFS S3 server)."""

from __future__ import annotations

import pickle
from pathlib import Path

import pyarrow.fs as pafs
import pytest

import seglake
from seglake import fs
from seglake.errors import ConfigError
from seglake.lake.catalog import Catalog
from seglake.location import LakeLocation
from tests.s3_server import REGION, S3Server, gets
from tests.unit import test_fs
from tests.unit.test_compact_rules import keyed_lake

s3_root = test_fs.s3_root  # the module-scoped S3 fixture (SeaweedFS)


def test_a_local_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    loc = LakeLocation.of("lake/")
    assert (loc.root, loc.uri, loc.base) == (
        "lake/",
        str(tmp_path / "lake"),
        str(tmp_path / "lake"),
    )
    assert isinstance(loc.filesystem, pafs.LocalFileSystem) and loc.is_local
    assert loc.storage_options == {} and loc.pyarrow_options == ()
    assert LakeLocation.of(loc) is loc  # a location passes unchanged
    assert str(loc) == "lake/"
    assert Catalog(loc).uri == f"{tmp_path}/lake/_catalog" == Catalog("lake").uri


def test_an_s3_root_in_both_forms() -> None:
    from_query = LakeLocation.of("s3://b/p/?endpoint_override=127.0.0.1:9&scheme=http&region=r1")
    from_options = LakeLocation.of(
        "s3://b/p", {"AWS_ENDPOINT_URL": "http://127.0.0.1:9", "AWS_REGION": "r1"}
    )
    from_argument = LakeLocation.of("s3://b/p?region=r1", endpoint_override="http://127.0.0.1:9")
    for loc in (from_query, from_options, from_argument):
        assert (loc.uri, loc.base) == ("s3://b/p", "b/p")
        assert dict(loc.pyarrow_options) == {
            "endpoint_override": "127.0.0.1:9",
            "scheme": "http",
            "region": "r1",
        }
        assert {
            k: v for k, v in loc.storage_options.items() if k in ("AWS_ENDPOINT_URL", "AWS_REGION")
        } == {"AWS_ENDPOINT_URL": "http://127.0.0.1:9", "AWS_REGION": "r1"}
        assert loc.storage_options["AWS_ALLOW_HTTP"] == "true"
        assert loc.filesystem.type_name == "s3" and not loc.is_local
    # options given win over the URI's, and are passed to deltalake as given
    keys = {"AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s"}
    loc = LakeLocation.of(from_query, {"AWS_REGION": "r2", **keys})
    assert dict(loc.pyarrow_options)["region"] == "r2"
    assert (dict(loc.pyarrow_options)["access_key"], loc.storage_options["AWS_ACCESS_KEY_ID"]) == (
        "k",
        "k",
    )
    assert loc.filesystem.region == "r2"
    assert repr(loc) == f"LakeLocation({from_query.root!r})"  # no credentials in it


@pytest.mark.parametrize("root", ["", "   "])
def test_an_empty_root_is_refused(root: str) -> None:
    with pytest.raises(ConfigError, match="non-empty"):
        LakeLocation.of(root)
    with pytest.raises(ConfigError, match="s3://"):
        LakeLocation.of("file:///tmp/x", endpoint_override="http://127.0.0.1:9")


def test_pickled_the_filesystem_is_built_again() -> None:
    loc = LakeLocation.of("s3://b/p?endpoint_override=127.0.0.1:9&scheme=http")
    assert "filesystem" in vars(loc)  # built once while parsing (for the base path)
    copy = pickle.loads(pickle.dumps(loc))
    assert copy == loc and hash(copy) == hash(loc) and "filesystem" not in vars(copy)
    assert copy.filesystem.type_name == "s3" and copy.filesystem is copy.filesystem
    assert fs.resolve(copy) == (copy.filesystem, "b/p")


def test_open_gives_storage_options_to_the_catalog_and_the_segment_files(
    s3_credentials: S3Server, s3_root: str, tmp_path: Path
) -> None:
    """A lake on S3 opened by a plain ``s3://`` root and ``storage_options``: the catalog
    and every segment file are read from the endpoint the options name (before, only the
    catalog was: the segment files went to the default endpoint)."""
    local = tmp_path / "lake"
    n = len(keyed_lake(local))
    filesystem, _ = fs.resolve(s3_root)
    for p in local.rglob("*"):
        if p.is_file():
            fs.write_bytes(filesystem, f"lake/opts/{p.relative_to(local)}", p.read_bytes())
    options = {"AWS_ENDPOINT_URL": s3_credentials.endpoint, "AWS_REGION": REGION}
    mark = s3_credentials.mark()
    lake = seglake.open("s3://lake/opts", storage_options=options)
    got = lake.partition("c", 0).read(0, n, as_="arrow")
    want = seglake.open(str(local)).partition("c", 0).read(0, n, as_="arrow")
    assert got.num_rows == n and got.equals(want)
    read = {r.path for r in gets(s3_credentials.requests_since(mark), ".log")}
    assert read and all(p.startswith("/lake/opts/c-0/") for p in read)
