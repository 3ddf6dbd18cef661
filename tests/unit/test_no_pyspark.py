"""seglake without pyspark: the package, every non-Spark module and the CLI dump work
in a process where ``import pyspark`` fails."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.conftest import FIXTURES

ROOT = Path(__file__).resolve().parents[2]
LIB = ROOT / "lib" / "seglake"
NON_SPARK = sorted(
    ".".join(("seglake", *p.relative_to(LIB).with_suffix("").parts)).removesuffix(".__init__")
    for p in LIB.rglob("*.py")
    if "spark" not in p.relative_to(LIB).parts
)

BLOCK = textwrap.dedent("""
    import importlib.abc, sys

    class _NoPyspark(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in ("pyspark", "delta"):  # delta: delta-spark
                raise ImportError(f"No module named {name!r} (blocked by the test)")
            return None

    sys.meta_path.insert(0, _NoPyspark())
    for name in [m for m in sys.modules if m == "pyspark" or m.startswith("pyspark.")]:
        del sys.modules[name]
""")


def run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", BLOCK + textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=ROOT,
    )


def test_block_works() -> None:
    out = run("""
        try:
            import pyspark
        except ImportError:
            print("blocked")
    """)
    assert out.stdout.strip() == "blocked", out.stderr


def test_every_non_spark_module_imports() -> None:
    assert "seglake" in NON_SPARK and "seglake.cli.main" in NON_SPARK
    assert not [m for m in NON_SPARK if m.startswith("seglake.spark")]
    out = run(f"""
        import importlib, json, sys
        failed = {{}}
        for name in {NON_SPARK!r}:
            try:
                importlib.import_module(name)
            except Exception as exc:
                failed[name] = repr(exc)
        print(json.dumps({{"failed": failed,
                          "pyspark": [m for m in sys.modules if m.startswith("pyspark")]}}))
    """)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout.splitlines()[-1])
    assert result == {"failed": {}, "pyspark": []}


def test_cli_dump_without_pyspark() -> None:
    log = FIXTURES / "sensor-data-0" / "00000000000000000000.log"
    out = run(f"""
        import sys
        from seglake.cli.main import main
        status = main(["dump", "--json", "--deep-iteration", {str(log)!r}])
        status |= main(["offset-for-time", {str(log.parent)!r}, "-1"])
        assert not [m for m in sys.modules if m.startswith("pyspark")]
        sys.exit(status)
    """)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert len(lines) == 7
    assert json.loads(lines[-1]) == {"offset": 10, "timestamp": -1}
