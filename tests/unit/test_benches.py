"""Every bench in bench/ still starts as a script (issue 33, item 4), so a bench that stops
running fails ``make test`` instead of the next ``make bench``.

Each script is started as ``make bench`` starts it (``python bench/<name>.py``, its folder
first on ``sys.path``): ``--help`` for every one (exit 0, its usage, and no pyspark imported
on the way: ``-X importtime`` lists every import), and the Spark-free ones at their smallest
size, printing their table into a temporary ``$SEGLAKE_BENCH_RESULTS`` (bench/RESULTS.md and
bench/out are left alone). All of them run at once, in parallel processes, started when
the first test asks. No bench module may shadow an importable package (a bench/kafka.py
hid kafka-python from bench/encode.py, its peer). And bench/results.py, where every bench
writes its section, replaces only that section.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"
MODULES = {p.stem: p for p in sorted(BENCH.glob("*.py"))}
SCRIPTS = sorted(n for n, p in MODULES.items() if "if __name__ ==" in p.read_text())
# the Spark-free benches at their smallest size: (arguments, a line of the table printed)
SMALL: dict[str, tuple[list[str], str]] = {
    "encode": (["--records", "2000", "--repeat", "1"], "| encode | none |"),
    "notebook": (["--messages", "2000", "--lookups", "20"], "| seglake, warm index"),
    "broadcast": (["--segments", "200", "--keys", "100"], "| arrays | 200 |"),
}
SPARK = ("pyspark", "seglake.spark", "delta")  # an import of one of these needs Spark
TIMEOUT = 120.0


def _imports(path: Path) -> set[str]:
    """Every module ``path`` imports, at the top or in a function (``from a import b``: a
    and a.b)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
    return found


def _needs_spark(name: str, seen: frozenset[str] = frozenset()) -> bool:
    """Whether bench ``name`` or a bench module it imports imports pyspark or seglake.spark."""
    mods = _imports(MODULES[name])
    if any(m == s or m.startswith(s + ".") for m in mods for s in SPARK):
        return True
    local = {m for m in mods if m in MODULES} - seen - {name}
    return any(_needs_spark(m, seen | {name}) for m in local)


@dataclass
class Run:
    cmd: list[str]
    proc: subprocess.Popen[str]
    results: Path  # its $SEGLAKE_BENCH_RESULTS
    out: str = ""
    err: str = ""

    def wait(self) -> Run:
        if self.proc.returncode is None:
            try:
                self.out, self.err = self.proc.communicate(timeout=TIMEOUT)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.out, self.err = self.proc.communicate()
                pytest.fail(f"{' '.join(self.cmd)} still running after {TIMEOUT:.0f} s")
        return self

    def check(self) -> Run:
        self.wait()
        assert self.proc.returncode == 0, (
            f"{' '.join(self.cmd)} exited {self.proc.returncode}:\n{self.err[-3000:]}"
        )
        return self


def _tree(folder: Path) -> dict[str, int]:
    """bench/'s files (bench/out to two levels) and their mtimes, to see nothing changed."""
    paths = [*folder.iterdir(), *folder.glob("out/*"), *folder.glob("out/*/*")]
    return {str(p): p.stat().st_mtime_ns for p in paths}


@dataclass
class Runs:
    tmp: Path
    before: dict[str, int]  # _tree(BENCH) before any started
    runs: dict[str, Run]  # "help <name>", "small <name>"


@pytest.fixture(scope="module")
def benches(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runs]:
    """Every ``--help`` and every small run, started together; killed at the end if left."""
    tmp = tmp_path_factory.mktemp("benches")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "lib"), *filter(None, [env.get("PYTHONPATH")])])
    env.update(PYTHONDONTWRITEBYTECODE="1", TMPDIR=str(tmp))
    started = Runs(tmp, _tree(BENCH), {})

    def start(key: str, args: list[str]) -> None:
        cmd, results = [sys.executable, *args], tmp / f"{key.replace(' ', '-')}-RESULTS.md"
        proc = subprocess.Popen(
            cmd,
            cwd=tmp,
            env=env | {"SEGLAKE_BENCH_RESULTS": str(results)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        started.runs[key] = Run(cmd, proc, results)

    try:
        for name, (args, _) in SMALL.items():  # the slow ones first
            start(f"small {name}", [str(BENCH / f"{name}.py"), *args])
        for name in SCRIPTS:
            start(f"help {name}", ["-X", "importtime", str(BENCH / f"{name}.py"), "--help"])
        yield started
    finally:
        for run in started.runs.values():
            if run.proc.returncode is None:
                run.proc.kill()
                run.proc.communicate()


@pytest.mark.parametrize("name", SCRIPTS)
def test_help_imports_no_spark(benches: Runs, name: str) -> None:
    run = benches.runs[f"help {name}"].check()
    assert run.out.startswith(f"usage: {name}.py"), run.out[:500]
    # -X importtime: "import time: <self us> | <cumulative us> | <indent><module>"
    mods = [line.rsplit("|", 1)[-1].strip() for line in run.err.splitlines()]
    assert "argparse" in mods, run.err[-2000:]  # the listing is there
    spark = [m for m in mods if m.split(".")[0] in ("pyspark", "py4j")]
    assert not spark, f"{name}.py --help imports {spark[:5]}"


@pytest.mark.parametrize("name", sorted(SMALL))
def test_spark_free_bench_runs_small(benches: Runs, name: str) -> None:
    run = benches.runs[f"small {name}"].check()
    line = SMALL[name][1]
    assert line in run.out, f"{name}.py printed no table:\n{run.out[-2000:]}"
    assert line in run.results.read_text()  # its section, in $SEGLAKE_BENCH_RESULTS


def test_benches_write_nothing_into_bench(benches: Runs) -> None:
    """No run (small or --help) wrote into bench/ (RESULTS.md, bench/out, __pycache__), and
    no --help wrote a results file."""
    for run in benches.runs.values():
        run.wait()
    assert _tree(BENCH) == benches.before
    helps = [r for k, r in benches.runs.items() if k.startswith("help")]
    assert not [r.results for r in helps if r.results.exists()]


def test_every_spark_free_bench_runs_small() -> None:
    # run.py starts the others (make bench): its --help is enough
    free = {n for n in SCRIPTS if not _needs_spark(n)} - {"run"}
    assert free == set(SMALL), "a Spark-free bench without a small run here, or one needing Spark"
    assert _needs_spark("streaming") and _needs_spark("broker_peers")  # the walk sees Spark


def test_no_bench_module_shadows_a_package() -> None:
    """A script's folder is first on ``sys.path``: a bench module named like an installed or
    standard package hides it from every bench (bench/ is not on this process's path)."""
    assert str(BENCH) not in map(os.path.abspath, sys.path)
    shadowed = {}
    for n in MODULES:
        spec = importlib.util.find_spec(n)
        if spec is not None or n in sys.stdlib_module_names:
            shadowed[n] = spec.origin if spec else "the standard library"
    assert not shadowed, f"bench modules shadowing importable packages: {shadowed}"


def test_run_py_names_existing_scripts() -> None:
    """Every script bench/run.py (make bench) starts exists in bench/."""
    tree = ast.parse((BENCH / "run.py").read_text())
    benches = next(
        n.value
        for n in tree.body
        if isinstance(n, ast.AnnAssign) and getattr(n.target, "id", "") == "BENCHES"
    )
    assert isinstance(benches, ast.List)
    scripts = [ast.literal_eval(t)[1] for t in benches.elts]
    assert scripts and not set(scripts) - set(SCRIPTS), scripts


def test_replace_section_replaces_only_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """bench/results.py, where every bench writes: its own section replaced (backslashes
    and all), the others kept byte for byte, a new one appended, into
    ``$SEGLAKE_BENCH_RESULTS``."""
    spec = importlib.util.spec_from_file_location("bench_results", BENCH / "results.py")
    assert spec is not None and spec.loader is not None
    results = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(results)
    path = tmp_path / "R.md"
    monkeypatch.setenv("SEGLAKE_BENCH_RESULTS", str(path))
    path.write_text("# Benchmark results\n\n## a (x)\n\nold a\n\n## b\n\n| b | \\1 |\n")
    assert results.replace_section("## a (x)\n\nnew a \\1 \\g<0>\n") == path
    assert path.read_text() == (
        "# Benchmark results\n\n## a (x)\n\nnew a \\1 \\g<0>\n\n## b\n\n| b | \\1 |\n"
    )
    results.replace_section("## c\n\nc")
    results.replace_section("## b\n\nnew b")
    assert path.read_text() == (
        "# Benchmark results\n\n## a (x)\n\nnew a \\1 \\g<0>\n\n## b\n\nnew b\n\n## c\n\nc\n"
    )
    with pytest.raises(ValueError, match="title line"):
        results.replace_section("a table without its title")
    monkeypatch.delenv("SEGLAKE_BENCH_RESULTS")
    assert results.results_path() == BENCH / "RESULTS.md"
