"""The package layers, read from the source with ``ast`` (nothing is imported).

Import cycles count only module-level imports (those run when the module is imported;
an import inside a function is how a cycle is broken, and those under ``if
TYPE_CHECKING:`` never run). The layer rules count every import, inside functions too:
a lazy import upwards is still a dependency upwards. Layers,
bottom up: ``record -> storage -> lake -> api -> spark -> jobs``, ``cli`` beside (no Spark);
``errors``, ``config``, ``format``, ``fs``, ``location``, ``render`` and ``testing_hooks`` are
shared by all of them; ``times`` (a user's time -> epoch ms, Kafka's sentinels from
``storage/log.py``) lies above storage, below lake, api, cli and spark.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

LIB = Path(__file__).resolve().parents[2] / "lib"


def _module_name(path: Path) -> str:
    return ".".join(path.relative_to(LIB).with_suffix("").parts).removesuffix(".__init__")


MODULES = {_module_name(p): p for p in sorted((LIB / "seglake").rglob("*.py"))}


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _top_level_imports(body: list[ast.stmt]) -> list[ast.Import | ast.ImportFrom]:
    """Imports run when the module is imported: not in functions, not under TYPE_CHECKING."""
    found: list[ast.Import | ast.ImportFrom] = []
    for node in body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.append(node)
        elif isinstance(node, ast.If):
            if not _is_type_checking(node.test):
                found += _top_level_imports(node.body)
            found += _top_level_imports(node.orelse)
        elif isinstance(node, ast.Try):
            for part in (node.body, node.orelse, node.finalbody, *(h.body for h in node.handlers)):
                found += _top_level_imports(part)
        elif isinstance(node, ast.With | ast.ClassDef):
            found += _top_level_imports(node.body)
    return found


def _all_imports(body: list[ast.stmt]) -> list[ast.Import | ast.ImportFrom]:
    """Every import that can run: in functions too, not under TYPE_CHECKING."""
    found: list[ast.Import | ast.ImportFrom] = []
    skip: set[int] = set()
    for node in ast.walk(ast.Module(body=body, type_ignores=[])):
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            skip.update(id(n) for part in node.body for n in ast.walk(part))
        elif isinstance(node, ast.Import | ast.ImportFrom) and id(node) not in skip:
            found.append(node)
    return found


def imports_of(module: str, *, lazy: bool = False) -> set[str]:
    """Everything ``module`` imports at module level, or anywhere with ``lazy`` (absolute
    names; for ``from x import y``: ``x``, and ``x.y`` too when that is a module of ours)."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out: set[str] = set()
    tree = ast.parse(path.read_text(), str(path)).body
    for node in _all_imports(tree) if lazy else _top_level_imports(tree):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
            continue
        base = node.module or ""
        if node.level:
            parts = package.split(".")
            parent = ".".join(parts[: len(parts) - node.level + 1])
            base = f"{parent}.{base}" if base else parent
        out.add(base)
        out.update(f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in MODULES)
    return out


GRAPH = {m: {i for i in imports_of(m) if i in MODULES and i != m} for m in MODULES}
USES = {m: {i for i in imports_of(m, lazy=True) if i in MODULES and i != m} for m in MODULES}


def _layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_parser_sees_imports() -> None:
    """The checks below would pass vacuously if the parser missed imports."""
    assert "seglake.storage.segment" in MODULES
    assert {"seglake.record.batch", "seglake.errors"} <= GRAPH["seglake.storage.segment"]
    assert "seglake.storage.index_buffer" in GRAPH["seglake.storage.index_file"]
    assert "pyspark.sql" in imports_of("seglake.spark.session") or any(
        i.startswith("pyspark") for i in imports_of("seglake.spark.session")
    )
    # lazy (in a function) imports count for the layers only, TYPE_CHECKING ones never
    assert "seglake.api" not in GRAPH["seglake"]
    assert "seglake.api" in USES["seglake"]
    assert "seglake.storage.segment" not in USES["seglake.storage.segment_window"]


def test_cycle_finder_finds_cycles() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e"}}
    assert _cycles(graph) == [["a", "b", "c"]]


def test_no_import_cycles() -> None:
    assert _cycles(GRAPH) == []


SHARED = {
    "errors",
    "config",
    "format",
    "fs",
    "io_stats",
    "lake_paths",
    "location",
    "properties",
    "render",
    "testing_hooks",
}
ALLOWED = {
    **{shared: {"", *SHARED} for shared in SHARED},
    "record": {"", "record", "errors", "config", "format"},
    "storage": {"", "record", "storage", *SHARED},
    "lake": {"", "record", "storage", "lake", "times", *SHARED},
    "times": {"", "record", "storage", *SHARED},
}
FORBIDDEN = {"lake": {"api", "spark", "cli"}, "api": {"spark", "cli"}, "cli": {"spark"}}


@pytest.mark.parametrize("layer", sorted(ALLOWED))
def test_layer_imports_only_what_lies_below(layer: str) -> None:
    wrong = {
        m: sorted(i for i in USES[m] if _layer(i) not in ALLOWED[layer])
        for m in MODULES
        if _layer(m) == layer
    }
    assert {m: i for m, i in wrong.items() if i} == {}


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_no_import_of_a_layer_beside_or_above(layer: str) -> None:
    wrong = {
        m: sorted(i for i in USES[m] if _layer(i) in FORBIDDEN[layer])
        for m in MODULES
        if _layer(m) == layer
    }
    assert {m: i for m, i in wrong.items() if i} == {}


# the notebook API is a leaf: only the package's ``seglake.open`` (``seglake/__init__.py``,
# lazily) reaches into it; what the CLI, the jobs and ``plot.py`` share with it (times,
# tables) lies below, in ``seglake/times.py`` and ``seglake/render.py`` (issue 33 item 3)
API_IMPORTERS = {"seglake"}


def test_only_the_package_entry_imports_the_notebook_api() -> None:
    wrong = {
        m: sorted(i for i in USES[m] if _layer(i) == "api")
        for m in MODULES
        if _layer(m) != "api" and m not in API_IMPORTERS
    }
    assert {m: i for m, i in wrong.items() if i} == {}


def test_no_command_imports_the_cli_entry() -> None:
    """``cli/main.py`` is the parser and the command table only: the commands (one module
    each) import what they share from ``cli/targets.py`` and ``cli/jobargs.py``, never
    from main (it once held those helpers: main -> consume -> main, a circle)."""
    wrong = sorted(m for m in MODULES if "seglake.cli.main" in USES[m] and m != "seglake.cli.main")
    assert wrong == []


def test_pyspark_only_in_spark() -> None:
    """Below ``spark/`` nothing imports pyspark at module level (see test_no_pyspark.py for
    the run-time check)."""
    wrong = {
        m: sorted(i for i in imports_of(m) if i.split(".")[0] in ("pyspark", "delta"))
        for m in MODULES
        if _layer(m) != "spark"
    }
    assert {m: i for m, i in wrong.items() if i} == {}


def test_record_loads_no_storage_or_lake() -> None:
    """Importing the record layer (config and format with it) loads nothing above it: the
    format's numbers come from the dependency-free ``seglake.format``, not from storage."""
    code = (
        "import seglake.record, seglake.record.encode, seglake.record.decode_fused, sys;"
        "print([m for m in sys.modules if m.startswith(('seglake.storage', 'seglake.lake'))])"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=LIB
    )
    assert out.stdout.strip() == "[]"


def test_format_imports_nothing() -> None:
    assert imports_of("seglake.format") <= {"__future__"}


# the record reader's paths: only record/reader.py chooses among them (issue 24 item 2)
READER_PATHS = {
    "seglake.record.decode": "the numpy columns",
    "seglake.record.decode_native": "the kernel walk and copy",
    "seglake.record.decode_fused": "the one-pass decode",
    "seglake.record.pick_native": "the kernel picks",
    "seglake.record.batch_walk": "the numpy walk",
}


def test_only_the_record_reader_chooses_a_decode_path() -> None:
    """No module but ``record/reader.py`` (and the paths among themselves) imports a
    decode path: every read of records goes through the one reader."""
    wrong = sorted(
        f"{m} imports {p} ({why})"
        for m, uses in USES.items()
        for p, why in READER_PATHS.items()
        if p in uses and m != "seglake.record.reader" and m not in READER_PATHS
    )
    assert not wrong, wrong


def test_no_reader_entry_point_sends_its_caller_another_way() -> None:
    """The reader's public functions always answer: none returns ``None`` for "the
    kernel did not take it" (its caller would then choose the numpy path itself, as
    ``storage/point_gather.py`` once did with ``pick_records``)."""
    tree = ast.parse(MODULES["seglake.record.reader"].read_text())
    public = next(
        ast.literal_eval(n.value)
        for n in tree.body
        if isinstance(n, ast.Assign) and any(getattr(t, "id", "") == "__all__" for t in n.targets)
    )
    maybe_none = sorted(
        f.name
        for f in tree.body
        if isinstance(f, ast.FunctionDef)
        and f.name in public
        and f.returns is not None
        and "None"
        in {getattr(n, "id", None) or getattr(n, "value", None) for n in _union(f.returns)}
    )
    assert maybe_none == []


def _union(node: ast.expr) -> list[ast.expr]:
    """The members of an ``a | b | ...`` annotation (the node itself if it is no union)."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        return _union(node.left) + _union(node.right)
    return [node]
