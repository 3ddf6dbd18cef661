"""The ``seglake`` command: dump, consume, offsets, history, offset-for-time, read, cleanup,
recover, register, retention, config, serve, index.

One module per command under ``cli/`` (``add_parser(sub)``, ``run(args) -> int``),
dispatched from :data:`COMMANDS` as ``spark/jobs.py`` dispatches the jobs; what several
commands share is ``cli/targets.py``, never this module.

Errors of seglake's own print one line naming the file, position and numbers, exit 2.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import TypeAlias

from seglake.cli import (
    cleanup,
    configs,
    consume,
    dump,
    history,
    index,
    lookup,
    offset_for_time,
    offsets,
    read,
    recover,
    register,
    retention,
    serve,
)
from seglake.cli.jobargs import Parser
from seglake.errors import SeglakeError, escaped
from seglake.fs import refused
from seglake.lake.handle import LakeHandle
from seglake.location import LakeLocation

AddParser: TypeAlias = "Callable[[argparse._SubParsersAction[Parser]], None]"
Run: TypeAlias = Callable[[argparse.Namespace], int]

# every command, in the order ``--help`` lists them: (its subparser, what runs it)
COMMANDS: dict[str, tuple[AddParser, Run]] = {
    "dump": (dump.add_parser, dump.run),
    "consume": (consume.add_parser, consume.run),
    "offsets": (offsets.add_parser, offsets.run),
    "history": (history.add_parser, history.run),
    "offset-for-time": (offset_for_time.add_parser, offset_for_time.run),
    "read": (read.add_parser, read.run),
    "lookup": (lookup.add_parser, lookup.run),
    "cleanup": (cleanup.add_parser, cleanup.run),
    "recover": (recover.add_parser, recover.run),
    "register": (register.add_parser, register.run),
    "retention": (retention.add_parser, retention.run),
    "config": (configs.add_parser, configs.run),
    "serve": (serve.add_parser, serve.run),
    "index": (index.add_parser, index.run),
}


def _parser() -> argparse.ArgumentParser:
    """The command line: one subcommand per tool, in the order ``--help`` lists them."""
    p = Parser(prog="seglake", description=__doc__.splitlines()[0])
    p.add_argument("--version", action="version", version=f"seglake {_version()}")
    sub = p.add_subparsers(dest="command", required=True)
    for add_parser, _ in COMMANDS.values():
        add_parser(sub)
    return p


def _version() -> str:
    """seglake's installed version (the package metadata's)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("seglake")
    except PackageNotFoundError:
        return "unknown (not installed)"


def run(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if getattr(args, "root", None) is not None:  # a lake's command: its root parsed once
        args.root = LakeHandle.open(args.root)
    try:
        return COMMANDS[args.command][1](args)  # argparse allows only these
    except OSError as exc:  # an object store that cannot be reached: one line naming it
        for where in (getattr(args, a, None) for a in ("root", "target", "partition_dir")):
            at = where.location if isinstance(where, LakeHandle) else where
            err = None if at is None else LakeLocation.of(at).unreachable(exc)
            if err is not None:
                raise err from exc
        raise


def main(argv: list[str] | None = None) -> int:
    try:
        return run(argv)
    except (SeglakeError, ValueError) as exc:
        print(f"seglake: error: {escaped(str(exc))}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0
    except Exception as exc:  # the file system refused a write: one line, else a bug
        err = refused(exc)
        if err is None:
            raise
        print(f"seglake: error: {escaped(str(err))}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
