"""What the servers seglake runs on loopback for its tests, benches and users share
(:mod:`seglake.kafka_broker`, :mod:`seglake.s3_server`): a free port, the tail of a
child's log, and running one in the foreground until Ctrl-C or SIGTERM (``make kafka``,
``make s3``)."""

from __future__ import annotations

import signal
import socket
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from types import FrameType
from typing import Protocol

__all__ = ["Foreground", "free_port", "log_tail", "run_in_foreground"]


def free_port() -> int:
    """A port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def log_tail(path: Path, lines: int = 30) -> str:
    """The last ``lines`` lines of the log at ``path``, under a header naming it."""
    if not path.exists():
        return f"(no {path})"
    text = path.read_text(errors="replace").splitlines()[-lines:]
    return f"--- {path} (last {len(text)} lines) ---\n" + "\n".join(text)


class Foreground(Protocol):
    """A server :func:`run_in_foreground` can run."""

    @property
    def server_log(self) -> Path: ...

    def start(self) -> object: ...

    def running(self) -> bool: ...

    def stop(self) -> bool: ...

    def log_tail(self, lines: int = 30) -> str: ...


_STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


def run_in_foreground(
    name: str,
    server: Foreground,
    errors: type[Exception],
    banner: Callable[[], Iterable[str]],
    stopped: tuple[str, str] = ("clean shutdown", "NOT a clean shutdown"),
) -> int:
    """Start ``server`` (unless running already), print ``banner()``'s lines and wait
    until Ctrl-C, SIGTERM or SIGHUP, then stop it: exit 0 after a clean stop
    (``stopped[0]``), 1 otherwise; 2 when it does not start (``errors``, one line) or exits
    on its own (its log's tail). The signals are handled from before the start (a server
    runs in a session of its own and would outlive this process); a second one during the
    stop (``kill``, ``timeout``'s signal to its group) is ignored so the stop ends."""
    previous = {sig: signal.signal(sig, _interrupt) for sig in _STOP_SIGNALS}
    try:
        try:
            server.start()
        except errors as e:
            print(f"seglake {name}: error: {str(e).splitlines()[0]}", file=sys.stderr)
            print(f"seglake {name}: server log: {server.server_log}", file=sys.stderr)
            return 2
        for line in banner():  # a signal from here on stops the server
            print(line)
        sys.stdout.flush()
        while server.running():
            time.sleep(0.5)
        print(f"seglake {name}: error: the server exited on its own", file=sys.stderr)
        print(server.log_tail(), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        for sig in _STOP_SIGNALS:
            signal.signal(sig, signal.SIG_IGN)
        clean = server.stop()
        print(f"stopped ({stopped[0] if clean else stopped[1]})")
        return 0 if clean else 1
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
