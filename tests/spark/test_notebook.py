"""notebooks/explore.ipynb runs headless, without errors, on a small lake built by ingest
(its last cells start their own local[2] session for the Spark data source)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from seglake.sample import generate
from seglake.spark.ingest import ingest

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "explore.ipynb"


@pytest.fixture(scope="module")
def lake_root(spark, tmp_path_factory) -> str:
    root = str(tmp_path_factory.mktemp("nb") / "lake")
    msgs = generate(3_000, seed=5, rate_per_s=200.0)
    ingest(
        spark,
        spark.createDataFrame(msgs),
        root,
        num_partitions=2,
        conf={"log.segment.bytes": "60000", "log.index.interval.bytes": "4096"},
    )
    return root


def test_explore_notebook_runs(lake_root, tmp_path, monkeypatch):
    nb = nbformat.read(NOTEBOOK, as_version=4)
    # the kernel is this interpreter: "python3" resolves to ipykernel's own spec, which
    # jupyter_client launches with sys.executable (the venv's python) in a fresh clone too
    monkeypatch.setenv("SEGLAKE_LAKE", lake_root)
    monkeypatch.setenv(
        "PATH", str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", "")
    )
    client = NotebookClient(
        nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    )
    client.execute()  # raises CellExecutionError on any failing cell
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    html = [o["data"]["text/html"] for o in outputs if "text/html" in o.get("data", {})]
    assert any("catalog version" in h for h in html)  # the Lake's _repr_html_
    pngs = [o for o in outputs if "image/png" in o.get("data", {})]
    assert len(pngs) >= 3  # segments, index, rate
    printed = "".join(o.get("text", "") for o in outputs if o.get("output_type") == "stream")
    assert "data source == p.range(): True" in printed  # the Spark data source cell
