"""``make notebook``: execute ``notebooks/explore.ipynb`` on a small sample lake and save
it with its outputs (tables, plots as PNG), so that a code host shows them.

Run as ``python -m seglake.notebook [--lake PATH]``; without ``--lake`` (or
``$SEGLAKE_LAKE``) it first builds ``demo-lake/notebook-lake`` from 3,000 sample messages
(Spark, ``local[2]``). Outputs keep no stderr streams (Spark's log lines) and no timings;
the lake is named by a path relative to ``notebooks/``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "notebooks" / "explore.ipynb"
SAMPLE_LAKE = ROOT / "demo-lake" / "notebook-lake"


def build_sample_lake(root: Path, records: int = 3_000) -> None:
    """A fresh lake at ``root``: ``records`` sample messages, two partitions a topic,
    small segments (several per partition, so the plots have something to show)."""
    from seglake.sample import generate
    from seglake.spark.ingest import ingest
    from seglake.spark.session import get_session

    if root.exists():
        shutil.rmtree(root)
    spark = get_session("notebook-lake", master="local[2]", quiet=True)
    try:
        ingest(
            spark,
            spark.createDataFrame(generate(records, seed=5, rate_per_s=200.0)),
            str(root),
            num_partitions=2,
            conf={"log.segment.bytes": "60000", "log.index.interval.bytes": "4096"},
        )
    finally:
        spark.stop()


def strip_outputs(nb: Any) -> Any:
    """What is kept of an executed notebook: outputs without stderr streams, no timings."""
    for cell in nb.cells:
        cell.metadata.pop("execution", None)
        if cell.cell_type == "code":
            cell.outputs = [
                o
                for o in cell.outputs
                if not (o.get("output_type") == "stream" and o.get("name") == "stderr")
            ]
    return nb


def execute(notebook: Path, lake: Path) -> Any:
    """``notebook`` executed in its directory with ``SEGLAKE_LAKE`` = ``lake`` (relative)."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(notebook, as_version=4)  # type: ignore[no-untyped-call]
    os.environ["SEGLAKE_LAKE"] = os.path.relpath(lake, notebook.parent)
    # the kernel is this interpreter: ipykernel's "python3" spec runs sys.executable
    os.environ["PATH"] = str(Path(sys.executable).parent) + os.pathsep + os.environ["PATH"]
    NotebookClient(
        nb,
        timeout=600,
        kernel_name="python3",
        record_timing=False,
        resources={"metadata": {"path": str(notebook.parent)}},
    ).execute()
    return strip_outputs(nb)


def main(argv: list[str] | None = None) -> int:
    import nbformat

    p = argparse.ArgumentParser(prog="python -m seglake.notebook", description=__doc__)
    p.add_argument("--lake", default=os.environ.get("SEGLAKE_LAKE"), help="an existing lake")
    p.add_argument("--notebook", default=str(NOTEBOOK))
    args = p.parse_args(argv)
    lake = Path(args.lake).resolve() if args.lake else SAMPLE_LAKE
    if not args.lake:
        print(f"building a sample lake at {lake}", flush=True)
        build_sample_lake(lake)
    notebook = Path(args.notebook).resolve()
    nb = execute(notebook, lake)
    nbformat.write(nb, notebook)  # type: ignore[no-untyped-call]
    print(f"executed {notebook} ({notebook.stat().st_size:,} bytes with outputs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
