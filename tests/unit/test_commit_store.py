"""The catalog commits only where the store gives put-if-absent (issue 30 item 2): a
configuration without it is refused with one line naming the store and the option,
before any request; on the S3 server (SeaweedFS) deltalake's conditional write refuses a
stale writer's commit of a version another wrote, whatever S3 options seglake lets
through."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from seglake.errors import UnsafeCommitError
from seglake.lake.commit_store import put_if_absent_refusal
from seglake.lake.handle import LakeHandle
from seglake.location import LakeLocation
from tests.s3_server import S3Server

# nothing listens on port 9: a request would fail with a connection error, not the refusal
UNREACHABLE = "s3://bucket/lake?endpoint_override=127.0.0.1:9&scheme=http&region=us-east-1"


@pytest.fixture(autouse=True)
def _no_s3_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AWS_S3_ALLOW_UNSAFE_RENAME", "AWS_CONDITIONAL_PUT", "CONDITIONAL_PUT"):
        monkeypatch.delenv(name, raising=False)


def test_local_and_default_s3_lakes_commit(tmp_path: Path) -> None:
    assert put_if_absent_refusal(LakeLocation.of(str(tmp_path))) is None
    assert put_if_absent_refusal(LakeLocation.of(f"file://{tmp_path}")) is None
    assert put_if_absent_refusal(LakeLocation.of(UNREACHABLE)) is None
    multipart = {"copy_if_not_exists": "multipart"}  # measured below: still put-if-absent
    assert put_if_absent_refusal(LakeLocation.of(UNREACHABLE, multipart)) is None


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"AWS_S3_ALLOW_UNSAFE_RENAME": "true"}, "AWS_S3_ALLOW_UNSAFE_RENAME=true"),
        ({"aws_s3_allow_unsafe_rename": "1"}, "aws_s3_allow_unsafe_rename=1"),
        ({"conditional_put": "disabled"}, "conditional_put=disabled"),
        ({"AWS_CONDITIONAL_PUT": "Disabled"}, "AWS_CONDITIONAL_PUT=Disabled"),
    ],
)
def test_an_s3_lake_without_put_if_absent_is_refused_before_any_request(
    options: dict[str, str], named: str
) -> None:
    lake = LakeHandle.open(UNREACHABLE, options)
    with pytest.raises(UnsafeCommitError) as caught:
        lake.catalog.remove([("t", 0, 0)], "r1")
    line = str(caught.value)
    assert "\n" not in line and line.startswith(UNREACHABLE)
    assert named in line and "http://127.0.0.1:9" in line and "put-if-absent" in line


def test_the_environment_counts_too(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_S3_ALLOW_UNSAFE_RENAME", "yes")
    with pytest.raises(UnsafeCommitError, match="AWS_S3_ALLOW_UNSAFE_RENAME=yes"):
        LakeHandle.open(UNREACHABLE).catalog.create_if_missing()
    monkeypatch.setenv("AWS_S3_ALLOW_UNSAFE_RENAME", "false")
    assert put_if_absent_refusal(LakeLocation.of(UNREACHABLE)) is None


def test_a_store_with_no_known_put_if_absent_is_refused() -> None:
    location = LakeLocation.of("mock://lake")  # pyarrow's test filesystem
    assert "mock:// store" in (put_if_absent_refusal(location) or "")


@pytest.mark.parametrize(
    ("name", "options"),
    [
        ("default", {}),
        ("copy", {"copy_if_not_exists": "multipart"}),
        ("unsafe", {"AWS_S3_ALLOW_UNSAFE_RENAME": "true"}),
    ],
)
def test_seaweedfs_keeps_the_other_writers_version(
    s3_credentials: S3Server, name: str, options: dict[str, str]
) -> None:
    """A writer that read version 0 commits after another wrote version 1: refused, and
    version 1 stays the other's, with each S3 option seglake lets through or refuses
    (deltalake 1.6 finds version 1 before its conditional PUT: the proxy sees no PUT of
    it; the PUT's ``If-None-Match`` is the backstop of a closer race, as the two- and
    four-process races of test_catalog.py show)."""
    from deltalake import DeltaTable, write_deltalake
    from deltalake.transaction import CommitProperties

    s3_credentials.create_bucket("races")
    location = LakeLocation.of(s3_credentials.root("races", name))
    uri, base = f"{location.uri}/t", location.storage_options
    t = pa.table({"x": [1]})
    write_deltalake(uri, t, storage_options=base)
    stale = DeltaTable(uri, storage_options={**base, **options})
    write_deltalake(uri, t, mode="append", storage_options=base)
    v1 = f"{location.base}/t/_delta_log/{1:020d}.json"
    before = location.filesystem.open_input_file(v1).read()
    mark = s3_credentials.mark()
    with pytest.raises(Exception, match="Failed to commit transaction"):
        write_deltalake(
            stale, t, mode="append", commit_properties=CommitProperties(max_commit_retries=0)
        )
    assert location.filesystem.open_input_file(v1).read() == before
    puts = [r.path for r in s3_credentials.requests_since(mark) if r.method == "PUT"]
    assert not [p for p in puts if "_delta_log" in p], puts
