"""Java's ``.properties`` files (``java.util.Properties.load``): ``key=value``, ``key:value``
or ``key value``, ``#``/``!`` comment lines, a trailing ``\\`` continuing a line, ``\\uXXXX``
and the other backslash escapes. What ``--conf-file`` and ``conf/*.properties`` hold."""

from __future__ import annotations

from pathlib import Path

from seglake.errors import ConfigError

__all__ = ["parse_properties", "read_properties"]


def read_properties(path: str | Path) -> dict[str, str]:
    """The settings of a Java ``.properties`` file, read by ``java.util.Properties.load``'s
    rules (:func:`parse_properties`); the file is UTF-8 (Java's ``Reader`` form)."""
    p = Path(path)
    if not p.exists():
        raise ConfigError(f"{p}: no such properties file")
    try:
        text = p.read_text()
    except (UnicodeDecodeError, IsADirectoryError) as exc:
        raise ConfigError(f"{p}: not a text .properties file ({exc})") from None
    return parse_properties(text, str(p))


_BLANK = " \t\f"
_PROPERTY_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """``(line number, logical line)``: comments and blank lines left out; a line ending in
    an odd number of backslashes joined with the next (its leading blanks dropped).

    Linear in the size of ``text``: each natural line's trailing backslashes are counted
    once and the pieces joined once (a joined line ends in an odd run exactly when its
    last piece does: the piece before it kept an even run)."""
    out: list[tuple[int, str]] = []
    natural = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    i = 0
    while i < len(natural):
        lineno, line = i + 1, natural[i].lstrip(_BLANK)
        i += 1
        if not line or line[0] in "#!":
            continue
        pieces = [line]
        while (len(pieces[-1]) - len(pieces[-1].rstrip("\\"))) % 2 == 1:
            pieces[-1] = pieces[-1][:-1]
            if i == len(natural):
                break
            pieces.append(natural[i].lstrip(_BLANK))
            i += 1
        out.append((lineno, "".join(pieces)))
    return out


def _unescape_property(text: str, where: str) -> str:
    """``\\uXXXX``, ``\\t \\n \\r \\f``, and ``\\c`` -> ``c`` (Java's ``loadConvert``)."""
    out, i = [], 0
    while i < len(text):
        c = text[i]
        i += 1
        if c != "\\" or i == len(text):
            out.append(c)
            continue
        c = text[i]
        i += 1
        if c == "u":
            digits = text[i : i + 4]
            if len(digits) < 4 or any(d not in "0123456789abcdefABCDEF" for d in digits):
                raise ConfigError(f"{where}: malformed \\uxxxx encoding \\u{digits!s}")
            out.append(chr(int(digits, 16)))
            i += 4
        else:
            out.append(_PROPERTY_ESCAPES.get(c, c))
    return "".join(out)


def parse_properties(text: str, name: str = "<properties>") -> dict[str, str]:
    """``java.util.Properties.load``: ``key=value``, ``key:value`` or ``key value`` (the key
    ends at the first unescaped ``=``, ``:`` or blank; one ``=``/``:`` and the blanks around
    it are skipped), ``#``/``!`` comment lines, backslash line continuations, ``\\uXXXX``
    and other escapes in keys and values; a later key wins. ``name`` names the file in
    errors."""
    out: dict[str, str] = {}
    for lineno, line in _logical_lines(text):
        end, escaped = len(line), False
        for k, c in enumerate(line):
            if escaped:
                escaped = False
            elif c == "\\":
                escaped = True
            elif c in "=:" or c in _BLANK:
                end = k
                break
        rest = line[end:].lstrip(_BLANK)
        if rest[:1] in ("=", ":") and rest:
            rest = rest[1:].lstrip(_BLANK)
        where = f"{name}:{lineno}"
        out[_unescape_property(line[:end], where)] = _unescape_property(rest, where)
    return out
