"""``seglake history``: the lake's catalog versions as a table (Delta's ``DESCRIBE
HISTORY``, with seglake's commit metadata): version, commit time, operation, run id,
catalog rows (segments) added and removed, and what the run read (``seglake.input``).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from seglake.cli.targets import check_lake
from seglake.errors import ConfigError
from seglake.lake.handle import LakeHandle

if TYPE_CHECKING:
    from seglake.cli.jobargs import Parser

__all__ = ["add_parser", "history_table", "run"]

HEADERS = ["version", "committed (UTC)", "operation", "run id", "segments +", "segments -", "input"]


def add_parser(sub: argparse._SubParsersAction[Parser]) -> None:
    h = sub.add_parser(
        "history", help="the catalog's versions: time, operation, run id, segments, input"
    )
    h.add_argument("root", metavar="LAKE")
    h.add_argument(
        "--limit", type=int, default=None, help="only the newest N versions (default all)"
    )


def _int(value: Any) -> int | None:
    try:
        return None if value is None else int(value)
    except (TypeError, ValueError):
        return None


def history_table(catalog: Any, entries: Sequence[Any]) -> str:
    """:class:`~seglake.lake.table.HistoryEntry` rows (newest first) of ``catalog`` as an
    aligned table."""
    from seglake.lake.runs import recorded_input
    from seglake.render import text_table

    rows = []
    for h in entries:
        recorded = recorded_input(catalog, h)
        rows.append(
            [
                h.version,
                h.timestamp.strftime("%Y-%m-%d %H:%M:%S"),
                h.seglake_operation or h.operation,
                h.run_id or "",
                _int(h.metadata.get("seglake.rows_added")),
                _int(h.metadata.get("seglake.rows_removed")),
                "" if recorded is None else str(recorded),
            ]
        )
    return text_table(HEADERS, rows, right={0, 4, 5})


def run(args: argparse.Namespace) -> int:

    if args.limit is not None and args.limit < 1:
        raise ConfigError(f"--limit {args.limit}: expected 1 or more")
    lake = LakeHandle.open(args.root)  # main's handle (itself), or a root given directly
    check_lake(lake)
    catalog = lake.catalog
    print(history_table(catalog, catalog.history(limit=args.limit)))
    return 0
