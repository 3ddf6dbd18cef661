"""Crash points for the fault-injection tests: a process dies at a named step.

``crash_point(name)`` does nothing unless ``SEGLAKE_CRASH_AT`` names it. Then, on the
``N``-th time this process reaches it (``SEGLAKE_CRASH_AT=name:N``, default 1), the
process exits at once with status 137, as if SIGKILLed: no ``finally``, no cleanup. With
``SEGLAKE_CRASH_PGID`` set, the whole process group is SIGKILLed instead (a driver,
its JVM and its Python workers die together: the machine went away). With
``SEGLAKE_CRASH_ONCE=path``, only the process that creates ``path`` first dies (a Spark
task killed once, whose retry then runs in a fresh worker).

Points: ``write`` (an ingest task appended records to its staged segments),
``catalog.<op>`` (a catalog change is about to be planned: for an ingest, every segment
is staged), ``catalog.<op>.write`` (planned and checked, the Delta log entry is about to
be written), ``catalog.<op>.done`` (committed), ``publish`` (a committed run's first
staged file was moved into its partition directory). ``<op>`` is ``commit``,
``remove`` or ``replace``.
"""

from __future__ import annotations

import os
import signal
import threading
from collections import Counter

__all__ = ["CRASH_AT", "CRASH_ONCE", "CRASH_PGID", "crash_point"]

CRASH_AT = "SEGLAKE_CRASH_AT"
CRASH_PGID = "SEGLAKE_CRASH_PGID"
CRASH_ONCE = "SEGLAKE_CRASH_ONCE"
_reached: Counter[str] = Counter()
_lock = threading.Lock()


def crash_point(name: str) -> None:
    """Die here if ``SEGLAKE_CRASH_AT`` says so (see the module docstring)."""
    spec = os.environ.get(CRASH_AT)
    if not spec:
        return
    point, _, nth = spec.partition(":")
    if point != name:
        return
    with _lock:
        _reached[name] += 1
        if _reached[name] != int(nth or 1):
            return
    once = os.environ.get(CRASH_ONCE)
    if once:
        try:
            os.close(os.open(once, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return
    pgid = os.environ.get(CRASH_PGID)
    if pgid:
        os.killpg(int(pgid), signal.SIGKILL)
    os._exit(137)
