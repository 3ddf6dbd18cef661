"""Issue 33 item 3, kept true: a long keyword list handed from layer to layer is ONE
frozen options object, built at the entry point (the public keywords, the job's flags)
and passed down whole; and the CLI command and the job of the same operation take the
same argument names."""

from __future__ import annotations

import argparse
import ast
import dataclasses
import importlib
from pathlib import Path

import pytest

import seglake
from seglake.cli import jobargs

LIB = Path(seglake.__file__).parent  # the code under test

# family: (module of its options object, the class, the public entry points that take
# the family's keywords, one each, to build the object, and the functions below them
# that take the object itself)
FAMILIES = {
    "compact": (
        "seglake.lake.compaction",
        "CompactOptions",
        {"spark/compact_job.py:compact"},
        {
            "seglake.lake.compaction:run_compaction",
            "seglake.spark.compact_job:compact_with",
        },
    ),
    "extract": (
        "seglake.spark.extract_plan",
        "ExtractOptions",
        {"spark/extract.py:extract"},
        {
            "seglake.spark.extract_plan:plan_extract",
            "seglake.spark.extract:extract_with",
        },
    ),
    "recover": (
        "seglake.lake.recovery",
        "RecoverOptions",
        set(),  # built from the CLI's and the job's arguments: jobargs.recover_options
        {"seglake.lake.recovery:recover_lake"},
    ),
    "retention": (
        "seglake.lake.retention",
        "RetentionOptions",
        set(),  # built with the rules: jobargs.retention_from_args
        {"seglake.lake.retention:apply_retention"},
    ),
    "open": (
        "seglake.api.lake",
        "OpenOptions",
        {"api/lake.py:open"},
        {"seglake.api.lake:Lake.__init__"},
    ),
}


def _fields(family: str) -> set[str]:
    module, cls, _, _ = FAMILIES[family]
    options = getattr(importlib.import_module(module), cls)
    assert dataclasses.is_dataclass(options) and options.__dataclass_params__.frozen
    return {f.name for f in dataclasses.fields(options)}


def _signatures() -> list[tuple[str, set[str]]]:
    """``(file:function, its parameter names)`` of every function in lib/seglake."""
    out = []
    for path in sorted(LIB.rglob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                a = node.args
                names = {x.arg for x in [*a.posonlyargs, *a.args, *a.kwonlyargs]}
                out.append((f"{path.relative_to(LIB)}:{node.name}", names))
    return out


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_no_signature_repeats_an_options_family(family: str) -> None:
    """Only the family's public entry point spells its keyword list out; every layer
    below takes the options object (a signature with most of the fields is a copy)."""
    fields = _fields(family)
    least = max(5, len(fields) - 2)
    copies = {
        where
        for where, names in _signatures()
        if len(names & fields) >= least and where not in FAMILIES[family][2]
    }
    assert not copies, f"{family}: {sorted(copies)} repeat {sorted(fields)}: take the object"


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_the_layers_below_take_the_options_object(family: str) -> None:
    _, cls, _, takers = FAMILIES[family]
    for taker in sorted(takers):
        mod, name = taker.split(":")
        fn: object = importlib.import_module(mod)
        for part in name.split("."):
            fn = getattr(fn, part)
        hints = getattr(fn, "__annotations__", {})
        assert cls in {str(h) for h in hints.values()}, f"{taker} takes no {cls}"


def _cli(command: str) -> argparse.ArgumentParser:
    from seglake.cli.main import _parser

    for action in _parser()._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action.choices[command]  # type: ignore[no-any-return]
    raise AssertionError("no sub-commands")


def _names(p: argparse.ArgumentParser) -> set[str]:
    """Its option strings and, for positionals, ``<dest>``."""
    out: set[str] = set()
    for a in p._actions:
        if isinstance(a, argparse._HelpAction):
            continue
        out |= set(a.option_strings) if a.option_strings else {f"<{a.dest}>"}
    return out


# operation: (what only the CLI takes, what only the job takes), each with its reason
ONE_SIDED = {
    # a partition directory too; the job's --conf index.interval.bytes= does it; printing
    "recover": ({"--index-interval-bytes", "--json"}, {"--conf-file", "--conf"}),
    "retention": (set(), set()),
    # queries on the command line (offsets, times, keys of a topic / partition), a pinned
    # version, printing, skipping damaged batches; the job's output and its settings
    # (seglake.read.corrupt=skip)
    "lookup": (
        {"--offset", "--time", "--key", "--topic", "--partition"}
        | {"--version", "--json", "--skip-corrupt"},
        {"--output", "--output-format", "--conf-file", "--conf"},
    ),
}


@pytest.mark.parametrize("operation", sorted(ONE_SIDED))
def test_cli_and_job_take_the_same_argument_names(operation: str) -> None:
    cli, job = _names(_cli(operation)), _names(jobargs.PARSERS[operation]())
    cli_only, job_only = ONE_SIDED[operation]
    assert cli - job == cli_only and job - cli == job_only, (cli - job, job - cli)
    assert {"<_target>", "--root"} <= cli & job  # the lake: positional or --root, in both


def test_compact_takes_topics_as_recover_and_retention_do() -> None:
    """``--topics`` (the name of recover and retention), ``--topic`` its old alias."""
    p = jobargs.compact_parser()
    args = p.parse_args(["--root", "/l", "--topics", "a", "b", "--topic", "c"])
    assert args.topics == ["a", "b", "c"]
    for job in ("recover", "retention"):
        assert jobargs.PARSERS[job]().parse_args(["/l", "--topics", "a"]).topics == ["a"]
