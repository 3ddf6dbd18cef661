"""Shared test helpers: the broker fixtures and their expected.json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT.parent / "shared" / "fixtures" / "kafka-3.8-broker"
FIXTURE_PARTITIONS = (sorted(p.name for p in FIXTURES.iterdir() if p.is_dir())
                      if FIXTURES.exists() else [])
# written in one broker run: indexes rebuilt from the .log equal the broker's byte for byte
SINGLE_RUN_PARTITIONS = ["__cluster_metadata-0", "first-0", "sensor-data-0"]


def load_expected(partition: str) -> dict:
    """expected.json of a fixture partition: {segment_name: {...}}."""
    return json.loads((FIXTURES / partition / "expected.json").read_text())


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    if not FIXTURES.exists():
        pytest.fail(f"broker fixtures not found at {FIXTURES} (shared/ must sit beside the repo)")
    return FIXTURES
