"""What opening and reading a lake segment costs on object storage, in HEAD requests,
counted by the SeaweedFS server's proxy (tests/s3_server.py): one HEAD per file read,
the row's staged and retired copies probed once per open, a ``.log`` whose size is
asked opened once for both, an index cache hit probing the retired copy once per reader.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import pytest

from seglake import fs
from seglake.config import LogConfig
from seglake.errors import SegmentNotFoundError
from seglake.lake.rows import segment_ref
from seglake.storage.index_cache import IndexCache
from seglake.storage.log import PartitionLog
from seglake.storage.segment import LogSegment
from seglake.storage.segment_files import SegmentFiles
from tests.s3_server import Request, S3Server


@dataclass(frozen=True)
class Segment:
    """A partition's first segment, written to the S3 server under ``root``."""

    uri: str  # the lake root, an s3:// URI
    filesystem: pafs.FileSystem
    root: str
    path: str  # the .log, relative to the root
    size: int

    @property
    def row(self) -> dict[str, object]:
        return {"path": self.path, "size_bytes": self.size, "run_id": "r1"}


class Reader:
    """A reader's pin (:class:`~seglake.storage.segment_files.Pin`): errors unchanged."""

    def missing(self, files: SegmentFiles, exc: SegmentNotFoundError) -> Exception:
        return exc

    def short(self, files: SegmentFiles) -> Exception | None:
        return None


@pytest.fixture(scope="module")
def segment(s3_credentials: S3Server, tmp_path_factory: pytest.TempPathFactory) -> Segment:
    s3_credentials.create_bucket("segments")
    uri = s3_credentials.root("segments", "root")
    n = 2000
    recs = pa.table(
        {
            "offset": pa.array(np.arange(n), pa.int64()),
            "timestamp": pa.array(1_700_000_000_000 + np.arange(n), pa.int64()),
            "key": pa.array([b"k"] * n, pa.binary()),
            "value": pa.array([b"v" * 100] * n, pa.binary()),
        }
    )
    local = tmp_path_factory.mktemp("s3seg") / "t-0"
    local.mkdir()
    PartitionLog.open(str(local)).append(recs, config=LogConfig(batch_size=3000))
    filesystem, root = fs.resolve(uri)
    for p in local.iterdir():
        fs.write_bytes(filesystem, f"{root}/t-0/{p.name}", p.read_bytes())
    log = sorted(local.glob("*.log"))[0]
    return Segment(uri, filesystem, root, f"t-0/{log.name}", log.stat().st_size)


def _reads(server: S3Server, seg: LogSegment) -> list[Request]:
    """The requests of three windows' reads of ``seg``'s ``.log`` (each checked)."""
    mark = server.mark()
    for lo in (100, 900, 1500):
        assert seg.read_records(lo, lo + 10).column("offset").to_pylist()[0] == lo
    return [r for r in server.requests_since(mark) if r.path.endswith(".log")]


def _heads(requests: list[Request]) -> list[str]:
    """The paths HEADed, relative to the root, sorted."""
    return sorted(r.path.split("/root/", 1)[1] for r in requests if r.method == "HEAD")


def test_s3_reads_of_a_known_size_segment_head_each_file_once(
    s3_credentials: S3Server, segment: Segment
) -> None:
    """pyarrow 26's Python API opens an S3 object by path only (a HEAD for its size;
    ``open_input_file`` takes no FileInfo, ``FileFragment.open`` ignores ``file_size``),
    so a segment keeps its ``.log`` handle: one HEAD per file, then one ranged GET per
    read. The staged/retired copies of a catalog row are probed by opening them (a HEAD
    each, no listing). Old code: a HEAD before every read, a LIST per probe."""
    filesystem, root, path = segment.filesystem, segment.root, segment.path
    got = _reads(s3_credentials, LogSegment(filesystem, f"{root}/{path}", size=segment.size))
    assert [r.method for r in got].count("HEAD") == 1  # old code: one per GET
    assert [r.method for r in got if r.range].count("GET") >= 3
    got = _reads(s3_credentials, segment_ref(segment.row).open(filesystem, root))
    assert _heads(got) == [f"_retired/r1/{path}", f"_staging/r1/{path}", path]
    assert all(r.range for r in got if r.method == "GET")  # no listing, no whole object


def test_s3_a_log_size_asked_is_the_one_head_of_its_open(
    s3_credentials: S3Server, segment: Segment
) -> None:
    """A ``.log`` whose size is read from the file (no catalog size; or a row a later
    version replaced, ``exact_size``, checked against it) is opened for it: the HEAD
    that gives the size is the one its reads use. Old code: a HEAD for the size, then
    another to open it (two a file)."""
    filesystem, root, path = segment.filesystem, segment.root, segment.path
    got = _reads(s3_credentials, LogSegment(filesystem, f"{root}/{path}", committed=True))
    assert _heads(got) == [path]
    seg = segment_ref(segment.row).open(filesystem, root, exact_size=True)
    got = _reads(s3_credentials, seg)
    assert _heads(got) == [f"_retired/r1/{path}", f"_staging/r1/{path}", path]


def test_s3_index_cache_hits_probe_the_retired_copy_once_a_reader(
    s3_credentials: S3Server, segment: Segment
) -> None:
    """A cached segment's hits look for a retired copy (a compaction since) once per
    reader: a reader's (its pin's) later hits make no request; another reader's first
    hit probes again; an unpinned reader probes on every hit. Old code: a HEAD each hit."""
    cache, ref = IndexCache(), segment_ref(segment.row)
    retired = f"_retired/r1/{segment.path}"

    def probes(pin: Reader | None, hits: int) -> int:
        mark = s3_credentials.mark()
        for _ in range(hits):
            seg = cache.segment(segment.uri, ref, pin=pin)
            assert seg.read_records(100, 101).num_rows == 1
        return _heads(s3_credentials.requests_since(mark)).count(retired)

    first = Reader()
    assert probes(first, 4) == 1  # located (the miss), then three hits: none
    assert probes(Reader(), 3) == 1  # another reader: its first hit
    assert probes(None, 3) == 3
    assert cache.stats()["misses"] == 1


def test_s3_a_segment_txnindex_is_read_without_an_existence_check(
    s3_credentials: S3Server, segment: Segment
) -> None:
    """A read_committed read asks for the segment's ``.txnindex``: one request where
    there is none, and where there is one (empty here) its read alone, not an existence
    check first; asked again, none (the answer is kept on the segment)."""
    seg = segment_ref(segment.row).open(segment.filesystem, segment.root)
    seg.files.locate()
    mark = s3_credentials.mark()
    assert seg.txn_index is None
    txn = [r for r in s3_credentials.requests_since(mark) if r.path.endswith(".txnindex")]
    assert len(txn) == 1, [(r.method, r.path) for r in txn]  # old code: 2
    mark = s3_credentials.mark()
    assert seg.txn_index is None
    assert not s3_credentials.requests_since(mark)
    # where there is one: its read alone (old code: a HEAD first)
    stem = segment.path.removesuffix(".log")
    fs.write_bytes(segment.filesystem, f"{segment.root}/{stem}.txnindex", b"")
    seg = segment_ref(segment.row).open(segment.filesystem, segment.root)
    seg.files.locate()
    mark = s3_credentials.mark()
    assert seg.txn_index is not None and not len(seg.txn_index)
    txn = [r for r in s3_credentials.requests_since(mark) if r.path.endswith(".txnindex")]
    assert [r.method for r in txn] == ["HEAD"], [(r.method, r.path) for r in txn]  # old: 2
    fs.delete_file(segment.filesystem, f"{segment.root}/{stem}.txnindex", root=segment.root)
