"""A seglake error leaving one of Spark's Python workers as one line.

Spark runs a Python data source's methods (``schema``, ``reader``, ``partitions``, the
stream reader's offsets, the sink's ``write`` and ``commit``) in Python workers. What an
exception raised there leaves is the text the worker reports (``pyspark.util.
handle_worker_exception``), which Spark puts into its own error (``AnalysisException``,
``PythonException``, ``StreamingQueryException``): by default the whole Python
traceback, 7-17 lines before seglake's message. A :class:`SeglakeError` already names the
file, row and numbers, so :func:`one_line_errors` lets it leave as its one line,
``seglake.errors.ConfigError: <message>``, with pyspark's own switch for that
(``SPARK_HIDE_TRACEBACK``, read when the worker reports the error, just before it exits);
any other exception (a bug) keeps its traceback. :func:`seglake.spark.session.task_error`
turns the text back into the error on the driver.
"""

from __future__ import annotations

import functools
import inspect
import os
from collections.abc import Callable
from typing import Any, TypeVar

from seglake.errors import SeglakeError

__all__ = ["HIDE_TRACEBACK", "one_line_errors"]

HIDE_TRACEBACK = "SPARK_HIDE_TRACEBACK"  # pyspark.util.handle_worker_exception's switch
WORKER_MARKER = "PYTHON_WORKER_FACTORY_SECRET"  # set in the processes Spark's JVM starts
C = TypeVar("C", bound=type)


def _one_line(exc: SeglakeError) -> None:
    """In a Spark Python worker: report ``exc`` as its last line only (a message on
    several lines is joined: the first line Spark shows is the whole message)."""
    if "\n" in str(exc) and len(exc.args) == 1 and isinstance(exc.args[0], str):
        exc.args = (" ".join(line.strip() for line in exc.args[0].splitlines()),)
    if WORKER_MARKER in os.environ:  # never in the driver's own process (tests call these)
        os.environ[HIDE_TRACEBACK] = "1"


def _wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
    if inspect.isgeneratorfunction(fn):

        @functools.wraps(fn)
        def gen(*args: Any, **kwargs: Any) -> Any:
            try:
                return (yield from fn(*args, **kwargs))
            except SeglakeError as exc:
                _one_line(exc)
                raise

        return gen

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except SeglakeError as exc:
            _one_line(exc)
            raise

    return call


def one_line_errors(cls: C) -> C:
    """Class decorator: every public method ``cls`` defines (what Spark calls in its
    workers) reports a :class:`SeglakeError` as one line (see the module docstring)."""
    for name, attr in list(vars(cls).items()):
        if not name.startswith("_") and inspect.isfunction(attr):
            setattr(cls, name, _wrap(attr))
    return cls
