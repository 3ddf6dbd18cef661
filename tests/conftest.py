"""Shared test helpers: the broker fixtures and their expected.json, an S3 server."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from seglake.s3_server import missing_requirements
from tests.s3_server import CREDENTIALS, S3Server

ROOT = Path(__file__).resolve().parent.parent
# beside the repo; SEGLAKE_FIXTURES points elsewhere (a git worktree, another checkout)
FIXTURES = Path(
    os.environ.get("SEGLAKE_FIXTURES", ROOT.parent / "shared" / "fixtures" / "kafka-3.8-broker")
)
FIXTURE_PARTITIONS = (
    sorted(p.name for p in FIXTURES.iterdir() if p.is_dir()) if FIXTURES.exists() else []
)
# written in one broker run: indexes rebuilt from the .log equal the broker's byte for byte
SINGLE_RUN_PARTITIONS = ["__cluster_metadata-0", "first-0", "sensor-data-0"]


def load_expected(partition: str) -> dict:
    """expected.json of a fixture partition: {segment_name: {...}}."""
    return json.loads((FIXTURES / partition / "expected.json").read_text())


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    if not FIXTURES.exists():
        pytest.fail(
            f"broker fixtures not found at {FIXTURES} (shared/ must sit beside the repo, "
            "or set SEGLAKE_FIXTURES)"
        )
    return FIXTURES


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """SeaweedFS's S3 on loopback for the whole session (started on first use, stopped at
    the end); the tests that use it skip, saying why, where the ``weed`` binary is absent."""
    why = missing_requirements()
    if why:
        pytest.skip(f"object-storage tests need SeaweedFS: {why}")
    server = S3Server(tmp_path_factory.mktemp("s3"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def s3_credentials(s3_server: S3Server) -> Iterator[S3Server]:
    """The server, with its dummy credentials in this process's environment."""
    with pytest.MonkeyPatch.context() as mp:
        for key, value in CREDENTIALS.items():
            mp.setenv(key, value)
        mp.delenv("AWS_ENDPOINT_URL", raising=False)
        yield s3_server

