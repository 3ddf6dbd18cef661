"""Control records: the single record of a control batch (attributes bit 5).

Key and value, big-endian::

    key    version:int16 (0)  type:int16      0 abort, 1 commit (transaction markers);
                                              2-6 KRaft: leader change, snapshot header and
                                              footer, kraft.version, voters
    value  (abort/commit only) version:int16 (0)  coordinatorEpoch:int32

The values of the KRaft types are their own (flexible) messages; they are kept as raw
bytes, and :func:`parse_kraft_control` reads them (``KRAFT_SCHEMAS``).
"""

from __future__ import annotations

import dataclasses
import enum
import struct
from typing import Any

from seglake.errors import CorruptRecordError
from seglake.record.messages import Array, Field, Message, read_message

_KEY = struct.Struct(">hh")
_TXN_VALUE = struct.Struct(">hi")


class ControlType(enum.IntEnum):
    """``type`` of a control record key (Kafka's ``ControlRecordType``)."""

    ABORT = 0
    COMMIT = 1
    LEADER_CHANGE = 2
    SNAPSHOT_HEADER = 3
    SNAPSHOT_FOOTER = 4
    KRAFT_VERSION = 5
    KRAFT_VOTERS = 6
    UNKNOWN = -1

    @classmethod
    def of(cls, type_id: int) -> ControlType:
        """The member for ``type_id``; ``UNKNOWN`` for types newer than this code."""
        try:
            return cls(type_id)
        except ValueError:
            return cls.UNKNOWN


@dataclasses.dataclass(frozen=True, slots=True)
class ControlRecord:
    """A parsed control record.

    ``type_id`` is the raw type (kept when ``type`` is ``UNKNOWN``). For transaction
    markers ``coordinator_epoch`` is set; other types leave it ``None`` and keep ``value``.
    """

    version: int
    type: ControlType
    type_id: int
    coordinator_epoch: int | None = None
    value: bytes | None = None

    @property
    def is_transaction_marker(self) -> bool:
        return self.type in (ControlType.ABORT, ControlType.COMMIT)

    @property
    def is_commit(self) -> bool:
        return self.type is ControlType.COMMIT

    @property
    def is_abort(self) -> bool:
        return self.type is ControlType.ABORT


def _unpack(
    layout: struct.Struct, data: bytes | None, what: str, fields: str, where: dict[str, Any]
) -> tuple[int, ...]:
    """The fields of ``data`` (at least ``layout.size`` bytes, a version >= 0 first), or
    :class:`CorruptRecordError` naming ``what`` and the sizes."""
    if data is None or len(data) < layout.size:
        raise CorruptRecordError(
            f"{what} of {None if data is None else len(data)} bytes "
            f"(expected at least {layout.size}: {fields})",
            **where,
        )
    out = layout.unpack_from(data)
    if out[0] < 0:
        raise CorruptRecordError(f"{what} version {out[0]} is negative", **where)
    return out


def parse_control_record(
    key: bytes | None, value: bytes | None, *, path: str | None = None, position: int | None = None
) -> ControlRecord:
    """Parse the key (and, for abort/commit, the value) of a control record.

    Raises :class:`CorruptRecordError` for a key shorter than 4 bytes, a negative key
    version, or an abort/commit value shorter than 6 bytes or with a negative version.
    Like Kafka, a newer version may carry extra trailing bytes, which are ignored.
    """
    where = {"path": path, "position": position}
    version, type_id = _unpack(_KEY, key, "control record key", "version int16, type int16", where)
    kind = ControlType.of(type_id)
    if kind not in (ControlType.ABORT, ControlType.COMMIT):
        return ControlRecord(version, kind, type_id, None, value)
    _, epoch = _unpack(
        _TXN_VALUE,
        value,
        f"{kind.name.lower()} marker value",
        "version int16, coordinatorEpoch int32",
        where,
    )
    return ControlRecord(version, kind, type_id, epoch, value)


def encode_control_record(kind: ControlType, coordinator_epoch: int = 0) -> tuple[bytes, bytes]:
    """``(key, value)`` of a version-0 abort or commit marker."""
    if kind not in (ControlType.ABORT, ControlType.COMMIT):
        raise ValueError(f"only abort/commit markers can be encoded, not {kind!r}")
    return _KEY.pack(0, int(kind)), _TXN_VALUE.pack(0, coordinator_epoch)


_VOTER_ID = (Field("voterId", "int32"),)
_ENDPOINT = (Field("name", "string"), Field("host", "string"), Field("port", "uint16"))
_FEATURE = (Field("minSupportedVersion", "int16"), Field("maxSupportedVersion", "int16"))
# the KRaft control records' values (flexible messages), as Kafka's JSON converters name
# their fields
KRAFT_SCHEMAS: dict[ControlType, Message] = {
    ControlType.LEADER_CHANGE: Message(
        (
            Field("version", "int16"),
            Field("leaderId", "int32"),
            Field("voters", Array(_VOTER_ID)),
            Field("grantingVoters", Array(_VOTER_ID)),
        ),
        flexible=0,
    ),
    ControlType.SNAPSHOT_HEADER: Message(
        (Field("version", "int16"), Field("lastContainedLogTimestamp", "int64")), flexible=0
    ),
    ControlType.SNAPSHOT_FOOTER: Message((Field("version", "int16"),), flexible=0),
    ControlType.KRAFT_VERSION: Message(
        (Field("version", "int16"), Field("kRaftVersion", "int16")), flexible=0
    ),
    ControlType.KRAFT_VOTERS: Message(
        (
            Field("version", "int16"),
            Field(
                "voters",
                Array(
                    (
                        Field("voterId", "int32"),
                        Field("voterDirectoryId", "uuid"),
                        Field("endpoints", Array(_ENDPOINT)),
                        Field("kRaftVersionFeature", _FEATURE),
                    )
                ),
            ),
        ),
        flexible=0,
    ),
}


def parse_kraft_control(
    kind: ControlType,
    value: bytes | None,
    *,
    path: str | None = None,
    position: int | None = None,
) -> dict[str, Any]:
    """A KRaft control record's value (leader change, snapshot header or footer,
    kraft.version, voters) as Kafka's JSON converter writes it; a value that does not
    parse is :class:`CorruptRecordError`."""
    buf = value or b""
    try:
        data, _ = read_message(KRAFT_SCHEMAS[kind], buf, 0)
    except CorruptRecordError as exc:
        raise CorruptRecordError(
            f"{kind.name.lower().replace('_', ' ')} value of {len(buf)} bytes does not "
            f"parse: {exc}",
            path=path,
            position=position,
        ) from None
    return data
