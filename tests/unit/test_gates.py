"""The gates: `make lint` and the pre-commit hooks run the same checks, and mypy holds
the whole package (record/, storage/, lake/, api/, spark/, cli/ and the shared modules)
to --strict's flags."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def _lint_commands() -> list[str]:
    """The tools `make lint` runs (``ruff check``, ``ruff format --check``, ``mypy``)."""
    text = (ROOT / "Makefile").read_text()
    recipe = text.split("\nlint:", 1)[1].split("\n\n", 1)[0]
    return [
        re.sub(r"^\$\(VENV\)/bin/(\S+)(.*?)( lib.*)?$", r"\1\2", line.strip()).strip()
        for line in recipe.splitlines()[1:]
        if line.startswith("\t")
    ]


def test_pre_commit_runs_what_make_lint_runs() -> None:
    config = yaml.safe_load((ROOT / ".pre-commit-config.yaml").read_text())
    hooks = [h["entry"].removeprefix(".venv/bin/") for r in config["repos"] for h in r["hooks"]]
    assert (
        sorted(hooks)
        == sorted(_lint_commands())
        == [
            "mypy",
            "ruff check",
            "ruff format --check",
        ]
    )
    subprocess.run(
        [sys.executable, "-m", "pre_commit", "validate-config", ".pre-commit-config.yaml"],
        cwd=ROOT,
        check=True,
        capture_output=True,
    )


def test_the_whole_package_is_strict() -> None:
    mypy = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
    strict = [o for o in mypy["overrides"] if "seglake.*" in o["module"]]
    assert strict and set(strict[0]["module"]) == {"seglake.*"}
    for flag in (
        "disallow_untyped_defs",
        "disallow_incomplete_defs",
        "disallow_untyped_calls",
        "disallow_any_generics",
        "warn_return_any",
        "no_implicit_reexport",
    ):
        assert strict[0][flag] is True, flag
