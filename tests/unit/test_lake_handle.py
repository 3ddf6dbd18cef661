"""The lake handle (issue 30 item 4): a root is opened once per operation, at the entry
points, and passed down; ``Catalog(`` is built in one place (the handle); the layout
names have one home (``lake_paths.py``). Read from the source with ``ast`` (nothing is
imported), as tests/unit/test_byte_rule_homes.py reads the byte rules; and the handle's
own behaviour: picklable without its catalog, its layout paths."""

from __future__ import annotations

import ast
import pickle
from pathlib import Path

from seglake.lake.handle import LakeHandle
from seglake.location import LakeLocation

LIB = Path(__file__).resolve().parents[2] / "lib" / "seglake"
SOURCES = {str(p.relative_to(LIB)): ast.parse(p.read_text()) for p in sorted(LIB.rglob("*.py"))}

# where a root (or a user's path) may be parsed, and why
ENTRY_POINTS = {
    "location.py": "LakeLocation itself",
    "fs/__init__.py": "fs.resolve, the path helper of the modules below",
    "lake/handle.py": "LakeHandle.open, the one parse of a lake root",
    "cli/main.py": "every lake command's root, opened once",
    "cli/jobargs.py": "a job's root and input paths, checked before Spark starts",
    **{
        f"cli/{name}.py": "run(args): cli/main's handle (itself), or a root given directly"
        for name in ("cleanup", "configs", "history", "index", "register", "retention", "serve")
    },
    "cli/recover.py": "a user's path: a lake or a partition directory",
    "cli/consume.py": "a user's path: a lake or a partition directory",
    "cli/offsets.py": "get_offsets, called with the command's handle (or a root)",
    **{
        f"cli/dump/{name}.py": "a user's file paths (no lake)"
        for name in ("indexes", "log", "snapshot")
    },
    "cli/read.py": "a user's partition directory",
    "cli/targets.py": "a user's partition directory",
    "spark/jobs.py": "the job main: the root opened once; output paths",
    "spark/read_options.py": "the data source's and stream source's options",
    "spark/stream_sink.py": "both sinks' options; the checkpoint path",
    "spark/ingest.py": "the public ingest(spark, df, root | handle)",
    "spark/extract.py": "the public extract(spark, root | handle, ...)",
    "spark/extract_plan.py": "the public plan_extract(root | handle, ...)",
    "spark/lookup.py": "the public lookup(spark, queries, root | handle)",
    "spark/compact_job.py": "the public compact(spark, root | handle)",
    "api/lake.py": "seglake.open(root)",
    "demo.py": "the demo's own lake",
    "lake/staging.py": "open_partition_dir: a user's directory that may be in a lake",
    "lake/pinned.py": "an executor's pin: its root arrives as a location (error paths only)",
    "lake/register.py": "the broker's data directory (not a lake root)",
    "lake/table.py": "CatalogTable(root): the handle passes its location (tests may pass a root)",
    "storage/log.py": "PartitionLog.open: a partition directory",
    "storage/recovery.py": "recover_partition: a partition directory",
    "storage/index_cache.py": "an executor's per-process cache of resolved locations",
}


def _calls(pred) -> list[str]:
    return [
        f"{name}:{node.lineno}"
        for name, tree in SOURCES.items()
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and pred(node.func)
    ]


def _parses_a_root(func: ast.expr) -> bool:
    """``LakeLocation.of(``, ``LakeHandle.open(``, ``fs.resolve(`` / ``lakefs.resolve(``,
    ``resolve(`` imported from seglake.fs, ``<location>.resolve()``."""
    if isinstance(func, ast.Name):
        return func.id == "resolve"
    if not isinstance(func, ast.Attribute) or not isinstance(func.value, ast.Name | ast.Attribute):
        return False
    owner = func.value.id if isinstance(func.value, ast.Name) else func.value.attr
    return (
        (func.attr == "of" and owner == "LakeLocation")
        or (func.attr == "open" and owner == "LakeHandle")
        or (func.attr == "resolve" and owner in ("fs", "lakefs", "location"))
    )


def test_one_catalog_construction_site() -> None:
    """``Catalog(`` only in the handle: every other module takes ``lake.catalog``."""
    found = _calls(
        lambda f: (
            (isinstance(f, ast.Name) and f.id == "Catalog")
            or (isinstance(f, ast.Attribute) and f.attr == "Catalog")
        )
    )
    assert [s.rsplit(":", 1)[0] for s in found] == ["lake/handle.py"], found


def test_roots_are_parsed_only_at_the_entry_points() -> None:
    """No module outside :data:`ENTRY_POINTS` parses a root: ``lake/`` takes the handle."""
    topic_config_resolve = {"lake/topic_config.py", "lake/topic_store.py", "cli/configs.py"}
    found = [
        site
        for site in _calls(_parses_a_root)
        if site.rsplit(":", 1)[0] not in ENTRY_POINTS
        and site.rsplit(":", 1)[0] not in topic_config_resolve  # a LogConfig's resolve()
    ]
    assert found == []
    lake_modules = [m for m in ENTRY_POINTS if m.startswith("lake/")]
    assert sorted(lake_modules) == [
        "lake/handle.py",
        "lake/pinned.py",
        "lake/register.py",
        "lake/staging.py",
        "lake/table.py",
    ]


def test_the_layout_names_have_one_home() -> None:
    """``"_catalog"``, ``"_staging"``, ``"_retired"`` spelled only in lake_paths.py."""
    names = {"_catalog", "_staging", "_retired"}
    found = [
        f"{name}:{node.lineno}"
        for name, tree in SOURCES.items()
        if name != "lake_paths.py"
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and node.value in names
    ]
    assert found == []


def test_the_handle_pickles_without_its_catalog(tmp_path: Path) -> None:
    lake = LakeHandle.open(str(tmp_path))
    assert LakeHandle.open(lake) is lake  # a handle passes unchanged
    assert lake.catalog is lake.catalog  # built once
    assert "catalog" in lake.__dict__
    back = pickle.loads(pickle.dumps(lake))
    assert "catalog" not in back.__dict__ and back == lake
    assert back.catalog.uri == lake.catalog.uri == f"{tmp_path}/_catalog"
    assert back.fs.type_name == "local" and back.base == str(tmp_path)


def test_the_handle_owns_the_layout(tmp_path: Path) -> None:
    lake = LakeHandle(LakeLocation.of(str(tmp_path)))
    assert lake.staging("r1") == f"{tmp_path}/_staging/r1"
    assert lake.retired("r1") == f"{tmp_path}/_retired/r1"
    assert lake.staging_root == f"{tmp_path}/_staging"
    assert lake.catalog_dir == f"{tmp_path}/_catalog"
    assert lake.partition_dir("orders", 3) == f"{tmp_path}/orders-3"
    assert lake.path("orders-3/00000000000000000000.log").startswith(f"{tmp_path}/orders-3/")
    assert str(lake) == str(tmp_path) and repr(lake) == f"LakeHandle({str(tmp_path)!r})"
