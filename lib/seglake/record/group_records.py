"""``__consumer_offsets`` records, decoded as ``kafka-dump-log.sh --offsets-decoder`` prints
them (Kafka's ``GroupCoordinatorRecordSerde`` and ``DumpLogSegments.OffsetsMessageParser``).

Framed as every coordinator's records (``messages.decode_coordinator_record``). The classic
group records are decoded: offset commits (types 0 and 1) and group metadata (type 2, its
members' consumer-protocol subscription and assignment decoded too when the protocol type
is ``consumer``). The new group protocols' records (types 3 and up) are named as Kafka
names an unknown type.
"""

from __future__ import annotations

import base64
from typing import Any

from seglake.errors import CorruptRecordError
from seglake.record.messages import (
    Array,
    CoordinatorTypes,
    Field,
    Message,
    decode_coordinator_record,
    read_message,
    versioned,
)

OFFSET_COMMIT_KEY = Message(
    (Field("group", "string"), Field("topic", "string"), Field("partition", "int32"))
)
GROUP_METADATA_KEY = Message((Field("group", "string"),))
OFFSET_COMMIT_VALUE = Message(
    (
        Field("offset", "int64"),
        Field("leaderEpoch", "int32", since=3),
        Field("metadata", "string"),
        Field("commitTimestamp", "int64"),
        Field("expireTimestamp", "int64", since=1, until=1),
        Field("topicId", "uuid", since=4, tag=0),
    ),
    flexible=4,
)
LEGACY_OFFSET_COMMIT_VALUE = Message(
    (Field("offset", "int64"), Field("metadata", "string"), Field("commitTimestamp", "int64"))
)
_MEMBER = (
    Field("memberId", "string"),
    Field("groupInstanceId", "string", since=3, nullable=3),
    Field("clientId", "string"),
    Field("clientHost", "string"),
    Field("rebalanceTimeout", "int32", since=1),
    Field("sessionTimeout", "int32"),
    Field("subscription", "bytes"),
    Field("assignment", "bytes"),
)
GROUP_METADATA_VALUE = Message(
    (
        Field("protocolType", "string"),
        Field("generation", "int32"),
        Field("protocol", "string", nullable=0),
        Field("leader", "string", nullable=0),
        Field("currentStateTimestamp", "int64", since=2),
        Field("members", Array(_MEMBER)),
    ),
    flexible=4,
)
_TOPIC_PARTITIONS = (Field("topic", "string"), Field("partitions", Array("int32")))
CONSUMER_SUBSCRIPTION = Message(
    (
        Field("topics", Array("string")),
        Field("userData", "bytes", nullable=0),
        Field("ownedPartitions", Array(_TOPIC_PARTITIONS), since=1),
        Field("generationId", "int32", since=2),
        Field("rackId", "string", since=3, nullable=3),
    )
)
CONSUMER_ASSIGNMENT = Message(
    (Field("assignedPartitions", Array(_TOPIC_PARTITIONS)), Field("userData", "bytes", nullable=0))
)
_TYPES: CoordinatorTypes = {
    0: (OFFSET_COMMIT_KEY, LEGACY_OFFSET_COMMIT_VALUE, 0),
    1: (OFFSET_COMMIT_KEY, OFFSET_COMMIT_VALUE, 4),
    2: (GROUP_METADATA_KEY, GROUP_METADATA_VALUE, 4),
}


def _consumer_protocol(record_type: int, data: dict[str, Any]) -> None:
    """Replace the members' subscription and assignment bytes of a consumer group's
    metadata by their decoded JSON, as Kafka's dump does (bytes that do not decode are
    kept)."""
    if record_type != 2 or data.get("protocolType") != "consumer":
        return
    for member in data.get("members", []):
        for name, schema in (
            ("subscription", CONSUMER_SUBSCRIPTION),
            ("assignment", CONSUMER_ASSIGNMENT),
        ):
            raw = member.get(name)
            if raw is None:
                continue
            try:
                version, body = versioned(base64.b64decode(raw), name)
                member[name], _ = read_message(schema, body, version)
            except CorruptRecordError:
                pass


def decode_offsets_record(
    key: bytes | None, value: bytes | None, offset: int
) -> tuple[str, str | None]:
    """``(key text, payload text or None)`` of one ``__consumer_offsets`` record, as
    ``kafka-dump-log.sh --offsets-decoder`` prints them."""
    return decode_coordinator_record(
        _TYPES, key, value, offset, decoder="offset topic", post=_consumer_protocol
    )
