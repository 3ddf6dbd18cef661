"""How a lake operation's per-partition work is run: ``map_tasks(fn, items)``.

The driver side of an operation (compaction, recovery) is one function under ``lake/``
that the CLI and the Spark job both call; only the mapper differs: :func:`in_process`
(the CLI, tests) or Spark's (``seglake.spark.session.task_mapper``: one task per item).
``fn`` and the items must pickle for Spark's (module-level functions, plain rows).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["MapTasks", "in_process"]

MapTasks = Callable[[Callable[[Any], Any], list[Any]], list[Any]]


def in_process(fn: Callable[[Any], Any], items: list[Any]) -> list[Any]:
    """``[fn(x) for x in items]`` in this process, in order."""
    return [fn(x) for x in items]
