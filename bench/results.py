"""Where every bench writes its figures: its own section of bench/RESULTS.md, or of the file
``$SEGLAKE_BENCH_RESULTS`` names (``make bench QUICK=1``'s bench/RESULTS-quick.md, the
temporary file of tests/unit/test_benches.py).

A section is a ``## <title>`` line and everything up to the next ``## `` line; a bench
replaces its own (found by its title line) and leaves the others as they are.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

DEFAULT = Path(__file__).resolve().parent / "RESULTS.md"


def results_path() -> Path:
    """``$SEGLAKE_BENCH_RESULTS``, else bench/RESULTS.md."""
    return Path(os.environ.get("SEGLAKE_BENCH_RESULTS") or DEFAULT)


def replace_section(text: str) -> Path:
    """Replace the section ``text`` starts with (its ``## `` title line) by ``text``, or
    append it; one blank line after it. Returns the file written."""
    title = text.split("\n", 1)[0]
    if not title.startswith("## "):
        raise ValueError(f"a results section starts with a '## ' title line, not {title!r}")
    path = results_path()
    old = path.read_text() if path.exists() else "# Benchmark results\n"
    body = text.strip("\n") + "\n"
    pattern = re.compile(rf"^{re.escape(title)}\n.*?(?=^## |\Z)", re.S | re.M)
    if pattern.search(old):
        new = pattern.sub(lambda _: body + "\n", old, count=1)
    else:
        new = old.rstrip("\n") + "\n\n" + body
    path.write_text(new.rstrip("\n") + "\n")
    return path


def kernel_note() -> str:
    """Whether this process runs the compiled kernel (``seglake_native``): a bench's
    figures without it (absent, or built for another ABI) are the numpy code's."""
    from seglake.record import native

    return "compiled kernel: " + ("yes" if native.kernel() is not None else "**no, numpy code**")
