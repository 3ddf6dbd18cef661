"""The ``recover`` and ``retention`` Spark jobs on an ingested lake, local and on S3.

Recovery: a torn tail, a deleted ``.index`` and a garbage ``.timeindex`` in an ingested
lake; the job must give back exactly the records a brute-force decode of the undamaged
lake has below the torn batch, rebuild the indexes byte for byte and fix the catalog in
one commit. Retention: by time and by bytes as Kafka counts them (re-derived here), never
the newest segment of a partition, catalog first and files second. The driver halves are
also killed (SIGKILL, in a process of their own) between the catalog and the files.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from typing import Any

import pandas as pd
import pyarrow.fs as pafs
import pytest

from seglake import fs as lakefs
from seglake import lake_paths
from seglake.cli.main import main as seglake_cli
from seglake.errors import TruncatedSegmentError
from seglake.lake.catalog import Catalog
from seglake.record.batch import scan_batches
from seglake.sample import generate
from seglake.spark.ingest import ingest
from seglake.spark.jobs import RUNNERS
from seglake.testing_hooks import CRASH_AT
from tests.lake_check import lake_records
from tests.s3_server import S3Server

pytestmark = pytest.mark.spark
TOPIC = "j"
INTERVAL = "2048"
CONF = {"log.segment.bytes": "12000", "batch.size": "2048", "log.index.interval.bytes": INTERVAL}
SUFFIXES = (".log", ".index", ".timeindex")


@pytest.fixture(scope="module")
def template(spark, tmp_path_factory) -> str:
    """A local lake: two partitions of about ten segments each."""
    root = str(tmp_path_factory.mktemp("jobs") / "lake")
    ingest(
        spark,
        spark.createDataFrame(generate(4000, seed=51, topics=(TOPIC,))),
        root,
        num_partitions=2,
        conf=CONF,
    )
    return root


@pytest.fixture(scope="module")
def s3_bucket(spark_s3: S3Server) -> S3Server:
    spark_s3.create_bucket("jobs")
    return spark_s3


@pytest.fixture(params=["local", "s3"])
def lake(request, template, tmp_path) -> str:
    """A fresh copy of the template lake: a local directory or an S3 prefix."""
    if request.param == "local":
        root = str(tmp_path / "lake")
    else:
        root = request.getfixturevalue("s3_bucket").root("jobs", uuid.uuid4().hex)
    dst_fs, dst = lakefs.resolve(root)
    pafs.copy_files(
        template, dst, source_filesystem=pafs.LocalFileSystem(), destination_filesystem=dst_fs
    )
    return root


NO_DELAY = ("--conf", "file.delete.delay.ms=0")  # delete removed segments' files at once


def _run_job(spark, job: str, argv: list[str]) -> int:
    parser, runner = RUNNERS[job]
    return runner(spark, parser().parse_args(argv))


def _segments(root: str) -> list[dict[str, Any]]:
    return Catalog(root).segments().drop_columns(["committed_at"]).to_pylist()


def _read(root: str, rel: str) -> bytes:
    filesystem, base = lakefs.resolve(root)
    return lakefs.read_all(filesystem, lake_paths.safe_join(base, rel))


def _write(root: str, rel: str, data: bytes) -> None:
    filesystem, base = lakefs.resolve(root)
    lakefs.write_bytes(filesystem, lake_paths.safe_join(base, rel), data)


def _exists(root: str, rel: str) -> bool:
    filesystem, base = lakefs.resolve(root)
    return lakefs.exists(filesystem, lake_paths.safe_join(base, rel))


def _damage(root: str) -> tuple[dict[str, bytes], int, tuple[int, int]]:
    """Tear partition 0's last batch, flip a bit in a middle batch of its second segment,
    delete an ``.index`` and garble a ``.timeindex`` of partition 1. Returns the undamaged
    index bytes, the offset the tear cuts at and the flipped batch's offsets."""
    rows = _segments(root)
    p0 = [r for r in rows if r["partition"] == 0]
    p1 = [r for r in rows if r["partition"] == 1]
    assert len(p0) > 2
    mid = bytearray(_read(root, p0[1]["path"]))
    mscan = scan_batches(bytes(mid))
    k = len(mscan) // 2
    mid[int(mscan.position[k]) + 70] ^= 0x10  # CRC mismatch; the lake keeps the rest
    _write(root, p0[1]["path"], bytes(mid))
    flipped = (int(mscan.base_offset[k]), int(mscan.last_offset[k]))
    last = p0[-1]["path"]
    log = _read(root, last)
    scan = scan_batches(log)
    torn_at = int(scan.position[-1])
    _write(root, last, log[: torn_at + 30])
    index, timeindex = p1[1]["path"][:-4] + ".index", p1[2]["path"][:-4] + ".timeindex"
    originals = {index: _read(root, index), timeindex: _read(root, timeindex)}
    filesystem, base = lakefs.resolve(root)
    lakefs.delete_file(filesystem, lake_paths.safe_join(base, index), root=base)
    _write(root, timeindex, b"\x07" * 36)
    return originals, int(scan.base_offset[-1]), flipped


def test_recover_job_matches_brute_force(spark, lake):
    want = lake_records(lake)
    originals, cut, (lo, hi) = _damage(lake)
    gone = (want["partition"] == 0) & ((want["offset"] >= cut) | want["offset"].between(lo, hi))
    want = want[~gone].reset_index(drop=True)
    version = Catalog(lake).version()
    # no interval given: each row records the one its indexes were written with
    argv = ["--root", lake]
    assert _run_job(spark, "recover", [*argv, "--dry-run"]) == 0
    assert Catalog(lake).version() == version
    assert not any(_exists(lake, rel) for rel in originals if rel.endswith(".index"))
    assert _run_job(spark, "recover", argv) == 0
    assert Catalog(lake).version() == version + 1
    pd.testing.assert_frame_equal(lake_records(lake), want)
    for rel, data in originals.items():
        assert _read(lake, rel) == data, f"{rel} not rebuilt byte for byte"
    last = [r for r in _segments(lake) if r["partition"] == 0][-1]
    assert last["next_offset"] == cut and last["size_bytes"] == len(_read(lake, last["path"]))
    assert _run_job(spark, "recover", argv) == 0  # nothing left to fix
    assert Catalog(lake).version() == version + 1


def _kafka_retention(
    rows: list[dict[str, Any]], *, now_ms: int, retention_ms: int = -1, retention_bytes: int = -1
) -> list[dict[str, Any]]:
    """The rows Kafka's rules keep (UnifiedLog.deleteOldSegments), from scratch."""
    kept = []
    for p in sorted({r["partition"] for r in rows}):
        segs = sorted((r for r in rows if r["partition"] == p), key=lambda r: r["base_offset"])
        gone = 0
        while (
            retention_ms >= 0
            and gone < len(segs) - 1
            and now_ms - segs[gone]["max_timestamp"] > retention_ms
        ):
            gone += 1
        total = sum(r["size_bytes"] for r in segs[gone:])
        while (
            retention_bytes >= 0
            and gone < len(segs) - 1
            and total - segs[gone]["size_bytes"] >= retention_bytes
        ):
            total -= segs[gone]["size_bytes"]
            gone += 1
        kept += segs[gone:]
    return kept


def _check_retained(
    root: str, before: list[dict[str, Any]], kept: list[dict[str, Any]], records: pd.DataFrame
) -> None:
    """Rows, files and records of exactly the ``kept`` segments remain."""
    assert _segments(root) == kept
    kept_paths = {r["path"] for r in kept}
    for r in before:
        for suffix in (*SUFFIXES, ".log.deleted"):
            rel = r["path"][:-4] + suffix
            assert _exists(root, rel) == (r["path"] in kept_paths and suffix in SUFFIXES), rel
    starts = {r["partition"]: r["base_offset"] for r in reversed(kept)}
    want = records[records["offset"] >= records["partition"].map(starts)]
    pd.testing.assert_frame_equal(lake_records(root), want.reset_index(drop=True))


def test_retention_job_by_time_then_bytes(spark, lake):
    before = _segments(lake)
    records = lake_records(lake)
    p0_ts = sorted(r["max_timestamp"] for r in before if r["partition"] == 0)
    now = p0_ts[-1] + 10_000
    retention_ms = now - p0_ts[len(p0_ts) // 2]  # about half of partition 0 is older
    kept = _kafka_retention(before, now_ms=now, retention_ms=retention_ms)
    assert len(before) > len(kept) > 2
    assert (
        _run_job(
            spark,
            "retention",
            ["--root", lake, "--now-ms", str(now), "--conf", f"log.retention.ms={retention_ms}"],
        )
        == 0
    )
    # rows gone at once; files kept for readers pinned to the old version (the delay)
    assert _segments(lake) == kept and all(_exists(lake, r["path"]) for r in before)
    assert seglake_cli(["cleanup", lake, "--older-than", "0"]) == 0
    _check_retained(lake, before, kept, records)
    limit = sum(r["size_bytes"] for r in kept) // 4
    kept_bytes = _kafka_retention(kept, now_ms=now, retention_bytes=limit)
    assert len(kept) > len(kept_bytes)
    assert (
        _run_job(
            spark,
            "retention",
            [
                "--root",
                lake,
                "--now-ms",
                str(now),
                "--conf",
                "log.retention.ms=-1",
                "--conf",
                f"log.retention.bytes={limit}",
                *NO_DELAY,
            ],
        )
        == 0
    )
    _check_retained(lake, before, kept_bytes, records)
    # everything expired: the newest segment of each partition stays
    assert (
        _run_job(
            spark,
            "retention",
            ["--root", lake, "--now-ms", str(10**15), "--conf", "log.retention.ms=0", *NO_DELAY],
        )
        == 0
    )
    newest = [
        max((r for r in before if r["partition"] == p), key=lambda r: r["base_offset"])
        for p in (0, 1)
    ]
    _check_retained(lake, before, newest, records)


# ------------------------------------------------- the driver killed between catalog and files

_DRIVER = """
import json, sys
from seglake.lake.handle import LakeHandle
from seglake.lake.recovery import RecoverOptions, recover_lake
from seglake.lake.retention import RetentionOptions, apply_retention
from seglake.storage.retention import RetentionRules
spec = json.loads(sys.argv[1])
if spec["job"] == "recover":
    recover_lake(LakeHandle.open(spec["root"]), RecoverOptions(interval=spec["interval"]))
else:
    lake = LakeHandle.open(spec["root"])
    apply_retention(lake, RetentionRules(retention_ms=0), RetentionOptions(now_ms=spec["now_ms"]))
"""


def _killed_driver(root: str, job: str, point: str, **spec: Any) -> None:
    """The job's driver half (no Spark needed) in a process SIGKILLed at ``point``."""
    done = subprocess.run(
        [sys.executable, "-c", _DRIVER, json.dumps({"job": job, "root": root, **spec})],
        env={**os.environ, CRASH_AT: point},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 137, done.stderr[-3000:]


@pytest.mark.parametrize("lake", ["local"], indirect=True)  # driver logic only
def test_recover_killed_before_its_commit_then_rerun(spark, lake):
    """The files were fixed (log truncated, indexes rebuilt), the catalog not: a reader
    reports the torn records as lost (the file is shorter than its committed row: issue
    25), and the next run commits the fix, after which the lake reads whole."""
    want = lake_records(lake)
    _, cut, (lo, hi) = _damage(lake)
    gone = (want["partition"] == 0) & ((want["offset"] >= cut) | want["offset"].between(lo, hi))
    want = want[~gone].reset_index(drop=True)
    version = Catalog(lake).version()
    _killed_driver(lake, "recover", "catalog.replace.write", interval=int(INTERVAL))
    assert Catalog(lake).version() == version
    last = [r for r in _segments(lake) if r["partition"] == 0][-1]
    assert len(_read(lake, last["path"])) < last["size_bytes"]  # fixed, not committed
    with pytest.raises(TruncatedSegmentError, match=rf"offsets {cut}\.\.\d+ are gone"):
        lake_records(lake)
    assert _run_job(spark, "recover", ["--root", lake]) == 0
    assert Catalog(lake).version() == version + 1
    pd.testing.assert_frame_equal(lake_records(lake), want)


@pytest.mark.parametrize("lake", ["local"], indirect=True)  # driver logic only
def test_retention_killed_between_catalog_and_files(spark, lake):
    """Rows removed, files not yet: they are invisible, and the next run deletes them."""
    before = _segments(lake)
    records = lake_records(lake)
    kept = _kafka_retention(before, now_ms=10**15, retention_ms=0)
    _killed_driver(lake, "retention", "catalog.remove.done", now_ms=10**15)
    assert _segments(lake) == kept
    assert all(_exists(lake, r["path"]) for r in before)  # files outlived their rows
    starts = {r["partition"]: r["base_offset"] for r in kept}
    visible = records[records["offset"] >= records["partition"].map(starts)]
    pd.testing.assert_frame_equal(lake_records(lake), visible.reset_index(drop=True))
    argv = ["--root", lake, "--now-ms", str(10**15), "--conf", "log.retention.ms=0"]
    assert _run_job(spark, "retention", [*argv, *NO_DELAY]) == 0
    _check_retained(lake, before, kept, records)
