"""The S3 server of the object-storage tests: SeaweedFS on loopback behind a request log
(:mod:`seglake.s3_server`), one per session.

:class:`S3Server` starts ``weed`` (``.bin/weed``, ``make weed``) with the counting proxy
in front of it: every request, whatever process sent it (driver, Spark executor, a
racing child), is one JSON line of the log (method, path, query, ``Range`` header,
status, length), so a test can tell a ranged GET from a whole-object GET.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow.fs as pafs

from seglake.s3_server import REGION, WeedServer, count_requests

CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "test",
    "AWS_SECRET_ACCESS_KEY": "test",
    "AWS_REGION": REGION,
    "AWS_DEFAULT_REGION": REGION,
    # no instance-metadata probing when something looks for credentials elsewhere
    "AWS_EC2_METADATA_DISABLED": "true",
}


@dataclass(frozen=True)
class Request:
    """One request the server answered."""

    method: str
    path: str  # /bucket/key, URL-decoded
    range: str | None  # the Range header (``bytes=a-b``), None for a whole object
    status: int  # HTTP status of the answer
    length: int | None  # Content-Length of the answer
    query: str | None = None  # the raw query string (``list-type=2&prefix=...``)


class S3Server:
    """SeaweedFS in a child process on ``127.0.0.1``, its requests logged to a file.

    Args:
        data_dir: weed's data and its ``weed.log``; the request log is
            ``data_dir/requests.jsonl``.
    """

    def __init__(self, data_dir: str | os.PathLike[str]) -> None:
        self.log_path = Path(data_dir) / "requests.jsonl"
        self.weed = WeedServer(data_dir, log_path=self.log_path)
        self.port = 0
        self.endpoint = ""

    def start(self) -> None:
        """Start weed and the proxy; raises ``S3ServerError`` when it cannot."""
        self.weed.start()
        self.port = self.weed.port
        self.endpoint = self.weed.endpoint

    def stop(self) -> None:
        self.weed.stop()

    def filesystem(self) -> pafs.S3FileSystem:
        """A pyarrow filesystem on this server that may create buckets."""
        return pafs.S3FileSystem(
            access_key=CREDENTIALS["AWS_ACCESS_KEY_ID"],
            secret_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
            region=REGION,
            endpoint_override=f"127.0.0.1:{self.port}",
            scheme="http",
            allow_bucket_creation=True,
        )

    def create_bucket(self, name: str) -> None:
        """Create a bucket (3+ characters, an S3 name); an existing one is emptied."""
        filesystem = self.filesystem()
        if filesystem.get_file_info(name).type == pafs.FileType.Directory:
            filesystem.delete_dir_contents(name)
        else:
            filesystem.create_dir(name)

    def root(self, bucket: str, prefix: str) -> str:
        """An ``s3://`` lake root on this server (endpoint carried in the URI)."""
        return (
            f"s3://{bucket}/{prefix.strip('/')}?endpoint_override=127.0.0.1:{self.port}"
            f"&scheme=http&region={REGION}"
        )

    def requests(self) -> list[Request]:
        """Every request logged so far."""
        if not self.log_path.exists():
            return []
        lines = self.log_path.read_text().splitlines()
        return [Request(**json.loads(line)) for line in lines if line.strip()]

    def mark(self) -> int:
        """How many requests are logged now (pass to :meth:`requests_since`)."""
        return len(self.requests())

    def requests_since(self, mark: int) -> list[Request]:
        """Requests logged after :meth:`mark` returned ``mark``."""
        return self.requests()[mark:]


def gets(requests: Iterable[Request], suffix: str) -> Iterator[Request]:
    """The GETs of objects whose key ends with ``suffix``."""
    return (r for r in requests if r.method == "GET" and r.path.endswith(suffix))


def counts(requests: Iterable[Request]) -> dict[str, int]:
    """Requests per kind (:func:`seglake.s3_server.request_kind`: GET, ranged GET, PUT,
    LIST, HEAD, DELETE, POST; zero when absent)."""
    return count_requests(dataclasses.asdict(r) for r in requests)
