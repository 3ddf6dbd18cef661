"""``subscribePattern`` as Spark's Kafka source applies it: a Java regular expression
(``java.util.regex.Pattern``) FOUND anywhere in a topic name, internal topics left out.

    Spark 4.2 SubscribePatternStrategy.assignedTopicPartitions:
        admin.listTopics()                    no internal topic (listInternal=false)
          .filter(topicRegex.findFirstIn(name).isDefined)   Matcher.find(): anywhere
    so ``topic`` matches ``my-topic`` and ``topic1``; ``^topic$`` only ``topic``.

Python's ``re`` is not Java's: :class:`TopicPattern` translates the pattern once, for
names of Kafka's topic alphabet ``[a-zA-Z0-9._-]`` (no line terminator, ASCII only,
which makes ``$``, ``.``, ``\\w``, ``\\d``, ``\\s``, ``\\b`` agree):

    \\Q..\\E           quoted text                  -> escaped literal
    [..]  [a[b]]  [a&&[^b]]  \\p{Lower}  \\P{L}  \\h \\v \\R
                      classes (unions, intersections, POSIX / Unicode properties)
                      evaluated over the topic alphabet -> an explicit class
    (?<name>..)  \\k<name>                          -> (?P<name>..)  (?P=name)
    (?i) in mid-pattern (to the end of its group)  -> scoped (?i:..) per alternative
    \\z  \\Z  \\G  \\e  \\cX  \\0oo  \\x{h..}        -> Python's spelling
    x{ not a bound, (?P<..>..), an unknown escape  -> an error, as Java's compile

A pattern Java would refuse is a :class:`~seglake.errors.ConfigError` (Spark refuses it
with Java's PatternSyntaxException), and so is the rare Java construct not translated
here (named in the message), never a silently different match.
"""

from __future__ import annotations

import re
import string
import unicodedata

from seglake.errors import ConfigError
from seglake.storage.naming import internal_topic

__all__ = ["TopicPattern"]

ALPHABET = frozenset(string.ascii_letters + string.digits + "._-")  # Kafka's topic names
_H = " \t\xa0\u1680\u180e\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
_HSPACE = frozenset(_H + "\u202f\u205f\u3000")
_VSPACE = frozenset("\n\x0b\f\r\x85\u2028\u2029")
_PUNCT = frozenset(string.punctuation)
# java.util.regex's POSIX classes (US-ASCII), restricted to what a topic name can hold
_POSIX: dict[str, frozenset[str]] = {
    "Lower": frozenset(string.ascii_lowercase),
    "Upper": frozenset(string.ascii_uppercase),
    "ASCII": frozenset(map(chr, range(128))),
    "Alpha": frozenset(string.ascii_letters),
    "Digit": frozenset(string.digits),
    "Alnum": frozenset(string.ascii_letters + string.digits),
    "Punct": _PUNCT,
    "Graph": frozenset(string.ascii_letters + string.digits) | _PUNCT,
    "Print": frozenset(string.ascii_letters + string.digits + " ") | _PUNCT,
    "Blank": frozenset(" \t"),
    "Cntrl": frozenset(map(chr, [*range(32), 127])),
    "XDigit": frozenset(string.hexdigits),
    "Space": frozenset(" \t\n\x0b\f\r"),
}
_JAVA_CHARACTER = {  # \p{javaX}: java.lang.Character.isX, on the topic alphabet
    "LowerCase": str.islower,
    "UpperCase": str.isupper,
    "Alphabetic": str.isalpha,
    "Letter": str.isalpha,
    "Digit": str.isdigit,
    "LetterOrDigit": str.isalnum,
    "Whitespace": str.isspace,
    "SpaceChar": str.isspace,
}
_ESCAPE_CLASSES = {
    "d": frozenset(string.digits),
    "w": frozenset(string.ascii_letters + string.digits + "_"),
    "s": frozenset(" \t\n\x0b\f\r"),
    "h": _HSPACE,
    "v": _VSPACE,
}
_CHAR_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f", "a": "\a", "e": "\x1b"}
_FLAGS = "idmsuxU"  # Java's inline flags; d, u, U change nothing for a topic name
_BOUND = re.compile(r"\{(\d+)(,(\d*))?\}")
_NAMED = re.compile(r"\(\?<([a-zA-Z][a-zA-Z0-9]*)>")
_NAME_REF = re.compile(r"<([a-zA-Z][a-zA-Z0-9]*)>")
_INLINE = re.compile(rf"\(\?([{_FLAGS}]*)(?:-([{_FLAGS}]*))?([:)])")
_PROPERTY = re.compile(r"\{([A-Za-z0-9_=]+)\}|([A-Za-z])")
_OCTAL = re.compile(r"[0-3][0-7]{2}|[0-7]{1,2}")
_HEX = re.compile(r"\{([0-9a-fA-F]+)\}|[0-9a-fA-F]{2}")
_UNICODE = re.compile(r"[0-9a-fA-F]{4}")
# Unicode binary properties \p{IsX} -> a general category (on the topic alphabet)
_BINARY = {
    "alphabetic": "L",
    "letter": "L",
    "lowercase": "Ll",
    "uppercase": "Lu",
    "digit": "Nd",
    "punctuation": "P",
    "white_space": "Z",
    "whitespace": "Z",
}


def _error(pattern: str, what: str, at: int) -> ConfigError:
    return ConfigError(
        f"subscribePattern: {pattern!r} is not a Java regular expression: {what} near "
        f"index {at} (Spark's Kafka source compiles it with java.util.regex.Pattern)"
    )


class _Translator:
    """One pass over a Java pattern, writing the Python pattern."""

    def __init__(self, pattern: str) -> None:
        self.src, self.i = pattern, 0
        self.out: list[str] = []
        # per open group: the flags in force, and the (?flags) scopes opened inside it
        # (Java's mid-pattern flags hold to the group's end: each alternative reopens them)
        self.groups: list[tuple[str, list[str]]] = [("", [])]
        self.captures = 0  # capturing groups opened so far (a backreference's bound)

    def fail(self, what: str) -> ConfigError:
        return _error(self.src, what, self.i)

    def peek(self, n: int = 1) -> str:
        return self.src[self.i : self.i + n]

    @property
    def flags(self) -> str:
        return self.groups[-1][0]

    def run(self) -> str:
        while self.i < len(self.src):
            self.atom()
        if len(self.groups) > 1:
            raise self.fail("unclosed group")
        self.out.append(")" * len(self.groups[-1][1]))
        return "".join(self.out)

    # -- outside a class ----------------------------------------------------------------
    def atom(self) -> None:
        c = self.src[self.i]
        if "x" in self.flags and (c.isspace() or c == "#"):
            self.skip_space()
        elif c == "\\":
            self.out.append(self.escape())
        elif c == "[":
            self.i += 1
            self.out.append(_emit(self.class_body()))
        elif c == "(":
            self.open_group()
        elif c == ")":
            if len(self.groups) == 1:
                raise self.fail("unmatched closing ')'")
            self.i += 1
            self.out.append(")" * (len(self.groups.pop()[1]) + 1))
        elif c == "|":
            self.i += 1
            scopes = self.groups[-1][1]
            self.out.append(")" * len(scopes) + "|" + "".join(scopes))
        elif c == "{":
            m = _BOUND.match(self.src, self.i)
            if m is None or (m.group(3) and int(m.group(3)) < int(m.group(1))):
                raise self.fail("illegal repetition")
            self.i = m.end()
            self.out.append(m.group(0))
        else:
            self.i += 1
            self.out.append(c)

    def skip_space(self) -> None:
        """Whitespace and ``#`` comments of the comments mode (``(?x)``)."""
        src = self.src
        while self.i < len(src) and (src[self.i].isspace() or src[self.i] == "#"):
            if src[self.i] == "#":
                while self.i < len(src) and src[self.i] not in "\n\r":
                    self.i += 1
            else:
                self.i += 1

    def open_group(self) -> None:
        src, i = self.src, self.i
        plain = next(
            (g for g in ("(?<=", "(?<!", "(?:", "(?=", "(?!", "(?>") if src.startswith(g, i)),
            "(" if not src.startswith("(?", i) else None,
        )
        named = _NAMED.match(src, i)
        if plain is not None or named is not None:
            self.i = named.end() if named is not None else i + len(plain or "")
            self.groups.append((self.flags, []))
            self.captures += named is not None or plain == "("
            self.out.append(f"(?P<{named.group(1)}>" if named is not None else plain or "")
            return
        m = _INLINE.match(src, i)
        if m is None:
            raise self.fail("unknown inline modifier or group")
        self.i = m.end()
        on, off = m.group(1), m.group(2) or ""
        flags = "".join(f for f in dict.fromkeys(self.flags + on) if f not in off)
        py_on = "".join(f for f in on if f in "imsx")
        py_off = "".join(f for f in off if f in "imsx")
        scope = f"(?{py_on}{'-' + py_off if py_off else ''}:"
        if m.group(3) == ":":
            self.groups.append((flags, []))
        else:  # (?flags): to the end of the enclosing group
            self.groups[-1] = (flags, [*self.groups[-1][1], scope])
        self.out.append(scope)

    def escape(self) -> str:
        """The escape at ``i`` (a backslash) outside a class, as Python spells it."""
        src = self.src
        if self.i + 1 >= len(src):
            raise self.fail("unexpected end of the pattern after '\\'")
        c = src[self.i + 1]
        if c in "pPdDwWsShHvV":
            return _emit(self.class_escape())
        if c == "Q":
            return re.escape(self.quoted_text())
        self.i += 2
        simple = {
            "R": "(?:\\r\\n|[\\n\\x0b\\f\\r\\x85\\u2028\\u2029])",
            "X": "(?s:.)",  # one grapheme: one character of a topic name
            "z": "\\Z",
            "Z": "\\Z",  # a topic name has no line terminator
            "A": "\\A",
            "G": "\\A",  # one find() from the start: \G is where it starts
        }
        if c in simple:
            return simple[c]
        if c in "bB":
            if self.peek() == "{":
                raise self.fail("\\b{g} is not supported here")
            return "\\" + c
        if c == "k":
            m = _NAME_REF.match(src, self.i)
            if m is None:
                raise self.fail("\\k is not followed by <name>")
            self.i = m.end()
            return f"(?P={m.group(1)})"
        if c.isdigit() and c != "0":  # Java: more digits while such a group exists
            n = int(c)
            while self.peek().isdigit() and n * 10 + int(self.peek()) <= self.captures:
                n, self.i = n * 10 + int(self.peek()), self.i + 1
            return f"\\{n}(?:)" if n <= self.captures else "(?!)"
        self.i -= 2
        return re.escape(self.char_escape())

    def quoted_text(self) -> str:
        """The text of ``\\Q..\\E`` at ``i`` (to the end without ``\\E``)."""
        end = self.src.find("\\E", self.i + 2)
        text = self.src[self.i + 2 :] if end < 0 else self.src[self.i + 2 : end]
        self.i = len(self.src) if end < 0 else end + 2
        return text

    def char_escape(self) -> str:
        """The one character an escape at ``i`` stands for (Java's rules)."""
        src = self.src
        self.i += 2
        c = src[self.i - 1]
        if c in _CHAR_ESCAPES:
            return _CHAR_ESCAPES[c]
        numeric = {"0": (_OCTAL, 8), "x": (_HEX, 16), "u": (_UNICODE, 16)}
        if c in numeric:
            rule, base = numeric[c]
            m = rule.match(src, self.i)
            if m is None:
                raise self.fail(f"illegal escape sequence \\{c}")
            self.i = m.end()
            return chr(int(m.group(m.lastindex or 0), base))
        if c == "c":
            if self.i >= len(src):
                raise self.fail("illegal control escape sequence")
            self.i += 1
            return chr(ord(src[self.i - 1]) ^ 64)
        if c.isalnum():
            raise self.fail(f"illegal/unsupported escape sequence \\{c}")
        return c

    # -- classes: evaluated over the topic alphabet -------------------------------------
    def class_escape(self) -> frozenset[str]:
        """The set of a class escape at ``i`` (``\\d``, ``\\p{..}``, ...)."""
        c = self.src[self.i + 1]
        self.i += 2
        if c.lower() in _ESCAPE_CLASSES:
            chars, negate = _ESCAPE_CLASSES[c.lower()], c.isupper()
        else:
            m = _PROPERTY.match(self.src, self.i)
            if m is None:
                raise self.fail("illegal property escape")
            self.i = m.end()
            chars, negate = self.property(m.group(1) or m.group(2)), c == "P"
        return self.negated(chars) if negate else chars

    def negated(self, chars: frozenset[str] | set[str]) -> frozenset[str]:
        """The complement of ``chars``: case-folded first under ``(?i)``, as Java's."""
        if "i" in self.flags:
            chars = set(chars) | {ch.swapcase() for ch in chars}
        return ALPHABET - chars

    def property(self, name: str) -> frozenset[str]:
        """``\\p{name}``'s characters (of the topic alphabet, but for POSIX classes)."""
        key = name.split("=", 1)[-1]
        key = key[2:] if key.startswith("Is") and key[2:] else key
        if key in _POSIX:
            return _POSIX[key]
        if key.startswith("java") and key[4:] in _JAVA_CHARACTER:
            return frozenset(ch for ch in ALPHABET if _JAVA_CHARACTER[key[4:]](ch))
        key = _BINARY.get(key.lower(), key)
        if re.fullmatch(r"[A-Z][a-z&]?", key):  # a Unicode general category (or group)
            cat = key.rstrip("&")
            return frozenset(ch for ch in ALPHABET if unicodedata.category(ch).startswith(cat))
        if key.lower() in ("latin", "latn"):  # the script
            return frozenset(string.ascii_letters)
        if key.lower() in ("inbasiclatin", "basiclatin", "basic_latin"):  # the block
            return ALPHABET
        raise self.fail(f"unknown character property \\p{{{name}}}")

    def class_body(self, negatable: bool = True) -> frozenset[str]:
        """A class after its ``[``, up to and past its ``]`` (Java: a nested class is a
        union, ``&&`` intersects with the rest of the class)."""
        src = self.src
        negate = negatable and self.peek() == "^"
        self.i += negate
        chars: set[str] = set()
        first, empty = True, True
        while True:
            if self.i >= len(src):
                raise self.fail("unclosed character class")
            c = src[self.i]
            if c == "]" and not first:
                self.i += 1
                break
            first = False
            if "x" in self.flags and (c.isspace() or c == "#"):
                self.skip_space()
            elif src.startswith("&&", self.i):
                self.i += 2
                if self.peek() == "]":  # Java: an empty side of && is left out
                    self.i += 1
                    break
                right = self.class_body(negatable=False)  # its ']' is ours
                chars = set(right) if empty else chars & right
                break
            elif c == "[":
                self.i += 1
                chars |= self.class_body()
                empty = False
            else:
                chars |= self.class_item()
                empty = False
        return self.negated(chars) if negate else frozenset(chars)

    def class_item(self) -> frozenset[str]:
        """One character, range or class escape inside a class."""
        lo = self.class_char()
        if isinstance(lo, frozenset):
            return lo
        if self.peek() != "-" or self.src[self.i + 1 : self.i + 2] in ("]", "[", ""):
            return frozenset(lo)
        self.i += 1
        hi = self.class_char()
        if isinstance(hi, frozenset) or hi < lo:
            raise self.fail("illegal character range")
        return frozenset({lo, hi} | {ch for ch in ALPHABET if lo <= ch <= hi})

    def class_char(self) -> str | frozenset[str]:
        """One character (or a class escape's set, or quoted text) inside a class."""
        src = self.src
        if src[self.i] != "\\":
            self.i += 1
            return src[self.i - 1]
        if self.i + 1 >= len(src):
            raise self.fail("unclosed character class")
        e = src[self.i + 1]
        if e in "pPdDwWsShHvV":
            return self.class_escape()
        if e == "Q":
            return frozenset(self.quoted_text())
        return self.char_escape()


def _emit(chars: frozenset[str]) -> str:
    """A Python class of exactly ``chars`` (none: a class nothing matches)."""
    if not chars:
        return "(?!)"
    return "[" + "".join(re.escape(c) for c in sorted(chars)) + "]"


class TopicPattern:
    """A ``subscribePattern``: which topic names a Kafka source subscribed with it reads."""

    def __init__(self, pattern: str) -> None:
        if not pattern:
            raise ConfigError(
                "subscribePattern: Pattern to subscribe is empty as specified value for "
                f"option 'subscribePattern' is {pattern!r} (as in Spark's Kafka source)"
            )
        self.pattern = pattern
        translated = _Translator(pattern).run()
        try:
            self.regex = re.compile(translated)
        except re.error as exc:
            raise _error(pattern, str(exc), exc.pos or 0) from None

    def __repr__(self) -> str:
        return f"TopicPattern({self.pattern!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TopicPattern) and other.pattern == self.pattern

    def __hash__(self) -> int:
        return hash(self.pattern)

    def matches(self, topic: str) -> bool:
        """Whether the source reads ``topic``: the pattern found in it (Matcher.find),
        not an internal topic."""
        return not internal_topic(topic) and self.regex.search(topic) is not None
