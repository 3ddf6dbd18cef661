"""Kafka protocol messages read from bytes into what Kafka's generated ``JsonConverter``
classes write (field order, names, version gates, null, base64 bytes, uuid text).

A message is a tuple of :class:`Field`; its versions from ``flexible`` on use compact
lengths (unsigned varint + 1) and tagged fields (a struct ends with them; tags this code
does not know are skipped). Only what ``seglake dump``'s decoders need is here: the
records of ``__consumer_offsets`` (``record/group_records.py``), ``__transaction_state``
(``record/transaction_records.py``) and ``__cluster_metadata``
(``record/metadata_records.py``).

:func:`decode_coordinator_record` is the framing of the coordinators' topics (Kafka's
``CoordinatorRecordSerde``): key ``type:int16`` + the key message at version 0; value
(null: a tombstone, printed ``<DELETE>``) ``version:int16`` + the value message.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import re
import struct
from collections.abc import Callable, Mapping
from typing import Any, Union

from seglake.errors import CorruptRecordError
from seglake.record.varint import decode_unsigned_varint

_INTS = {
    "int8": struct.Struct(">b"),
    "int16": struct.Struct(">h"),
    "uint16": struct.Struct(">H"),
    "int32": struct.Struct(">i"),
    "int64": struct.Struct(">q"),
    "float64": struct.Struct(">d"),
}
NEVER = 1 << 15  # a version no message reaches: "none"

Kind = Union[str, "Array", tuple["Field", ...]]


@dataclasses.dataclass(frozen=True)
class Array:
    """``[]item``: an array of a scalar kind or of a struct (a tuple of fields)."""

    item: Kind


@dataclasses.dataclass(frozen=True)
class Field:
    """One field: its JSON name, kind, versions ``since..until`` (inclusive), the first
    version where it may be null, and its tag (tagged fields: read from the tag section
    of flexible versions, written only when present)."""

    name: str
    kind: Kind
    since: int = 0
    until: int | None = None
    nullable: int = NEVER
    tag: int | None = None

    def present(self, version: int) -> bool:
        return self.since <= version and (self.until is None or version <= self.until)


@dataclasses.dataclass(frozen=True)
class Message:
    """A message schema: its fields and the first flexible version."""

    fields: tuple[Field, ...]
    flexible: int = NEVER


class _Reader:
    def __init__(self, buf: bytes, version: int, flexible: bool) -> None:
        self.buf, self.pos, self.version, self.flexible = buf, 0, version, flexible

    def fixed(self, name: str) -> Any:
        s = _INTS[name]
        if self.pos + s.size > len(self.buf):
            raise CorruptRecordError(
                f"{name} at byte {self.pos} runs past the {len(self.buf)} bytes of the message"
            )
        (v,) = s.unpack_from(self.buf, self.pos)
        self.pos += s.size
        return v

    def uvarint(self) -> int:
        v, self.pos = decode_unsigned_varint(self.buf, self.pos)
        return v

    def length(self, short: bool) -> int:
        """A length or count; -1 for null."""
        if self.flexible:
            return self.uvarint() - 1
        return int(self.fixed("int16" if short else "int32"))

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.buf):
            raise CorruptRecordError(
                f"{n} bytes at byte {self.pos} run past the {len(self.buf)} bytes of the message"
            )
        out = self.buf[self.pos : self.pos + n]
        self.pos += n
        return out

    def value(self, kind: Kind, nullable: bool) -> Any:
        if isinstance(kind, tuple):
            return self.struct(kind)
        if isinstance(kind, Array):
            n = self.length(short=False)
            if n < 0:
                return self._null(nullable, "array")
            return [self.value(kind.item, False) for _ in range(n)]
        if kind == "bool":
            return bool(self.fixed("int8"))
        if kind == "uuid":
            return base64.urlsafe_b64encode(self.take(16)).decode("ascii").rstrip("=")
        if kind in ("string", "bytes"):
            n = self.length(short=kind == "string")
            if n < 0:
                return self._null(nullable, kind)
            raw = self.take(n)
            if kind == "bytes":
                return base64.b64encode(raw).decode("ascii")
            return raw.decode("utf-8", errors="replace")
        return self.fixed(kind)

    def _null(self, nullable: bool, what: str) -> None:
        if not nullable:
            raise CorruptRecordError(f"null {what} at byte {self.pos} where none may be null")
        return None

    def struct(self, fields: tuple[Field, ...]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        tagged = {f.tag: f for f in fields if f.tag is not None and f.present(self.version)}
        for f in fields:
            if f.tag is None and f.present(self.version):
                out[f.name] = self.value(f.kind, self.version >= f.nullable)
        if self.flexible:
            found: dict[str, Any] = {}
            for _ in range(self.uvarint()):
                tag, size = self.uvarint(), self.uvarint()
                end = self.pos + size
                if tag in tagged:
                    f = tagged[tag]
                    found[f.name] = self.value(f.kind, self.version >= f.nullable)
                self.pos = end
            if found:  # in the schema's order, as the converter writes them
                out = {
                    f.name: found[f.name] if f.tag is not None else out[f.name]
                    for f in fields
                    if f.name in out or f.name in found
                }
        return out


def read_message(
    schema: Message, buf: bytes, version: int, *, exact: bool = False
) -> tuple[dict[str, Any], int]:
    """The message at the start of ``buf`` read at ``version``: its fields as the JSON
    converter orders them, and the bytes it took. ``exact``: bytes left over are an error.
    Bytes that do not parse raise :class:`CorruptRecordError`."""
    r = _Reader(buf, version, version >= schema.flexible)
    try:
        out = r.struct(schema.fields)
    except (struct.error, UnicodeDecodeError) as exc:
        raise CorruptRecordError(f"message does not parse at byte {r.pos}: {exc}") from None
    if exact and r.pos != len(buf):
        raise CorruptRecordError(f"{len(buf) - r.pos} bytes left after the message")
    return out, r.pos


_CONTROL_ESCAPE = re.compile(r"(\\+)u00([0-9a-f]{2})")


def _upper_escape(m: re.Match[str]) -> str:
    slashes = m.group(1)
    if len(slashes) % 2 == 0:  # an escaped backslash followed by the text "u00.."
        return m.group(0)
    return f"{slashes}u00{m.group(2).upper()}"


def to_json(obj: Any) -> str:
    """Compact JSON as Jackson writes Kafka's JSON nodes: no spaces, UTF-8 kept, control
    characters as ``\\u00XX`` with upper-case hex."""
    text = json.dumps(obj, separators=(",", ":"), ensure_ascii=False)
    return _CONTROL_ESCAPE.sub(_upper_escape, text)


_SHORT = struct.Struct(">h")
# record type -> (key schema, value schema, highest value version)
CoordinatorTypes = Mapping[int, tuple[Message, Message, int]]


def versioned(data: bytes, what: str) -> tuple[int, bytes]:
    """``(version, rest)`` of bytes that start with an int16 version."""
    if len(data) < _SHORT.size:
        raise CorruptRecordError(f"{what} of {len(data)} bytes has no version")
    return _SHORT.unpack_from(data)[0], data[_SHORT.size :]


def decode_coordinator_record(
    types: CoordinatorTypes,
    key: bytes | None,
    value: bytes | None,
    offset: int,
    *,
    decoder: str,
    post: Callable[[int, dict[str, Any]], None] | None = None,
) -> tuple[str, str | None]:
    """``(key text, payload text or None)`` of one record of a coordinator's topic, as
    Kafka's dump prints them (``{"type":..,"data":..}`` / ``{"version":..,"data":..}``);
    a record of a type not in ``types`` or that does not decode gets Kafka's
    ``... skipping.`` key and no payload; ``post(type, data)`` may rewrite a value."""
    if key is None:
        raise CorruptRecordError(
            f"Failed to decode message at offset {offset} using {decoder} decoder "
            "(message had a missing key)"
        )
    try:
        record_type, body = versioned(key, "key")
        if record_type not in types:
            return f"Unknown record type {record_type} at offset {offset}, skipping.", None
        key_schema, value_schema, top = types[record_type]
        key_obj, _ = read_message(key_schema, body, 0)
        key_text = to_json({"type": str(record_type), "data": key_obj})
        if value is None:
            return key_text, "<DELETE>"
        version, vbody = versioned(value, "value")
        if not 0 <= version <= top:
            raise CorruptRecordError(f"value version {version} (known: 0..{top})")
        data, _ = read_message(value_schema, vbody, version)
    except CorruptRecordError as exc:
        return f"Error at offset {offset}, skipping. {exc}", None
    if post is not None:
        post(record_type, data)
    return key_text, to_json({"version": str(version), "data": data})
