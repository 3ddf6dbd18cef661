"""``__cluster_metadata`` (KRaft) records, decoded as ``kafka-dump-log.sh
--cluster-metadata-decoder`` prints them (Kafka's ``MetadataRecordSerde``).

A record's value: ``frameVersion:uvarint (1) apiKey:uvarint version:uvarint`` + the
message (flexible from version 0); printed ``{"type":NAME,"version":V,"data":{...}}``,
with no key. The schemas here are those of the records a KRaft controller writes to
bootstrap and run a cluster (brokers, controllers, topics, partitions, configs, producer
ids, features, transactions); a record of another type is printed as an error naming it
(``Error at OFFSET, skipping. ...``, Kafka's line for a record it cannot read).
"""

from __future__ import annotations

import re
from typing import Any

from seglake.errors import CorruptRecordError
from seglake.record.messages import Array, Field, Message, read_message, to_json
from seglake.record.varint import decode_unsigned_varint

FRAME_VERSION = 1
_ENDPOINT = (
    Field("name", "string"),
    Field("host", "string"),
    Field("port", "uint16"),
    Field("securityProtocol", "int16"),
)
_FEATURE = (
    Field("name", "string"),
    Field("minSupportedVersion", "int16"),
    Field("maxSupportedVersion", "int16"),
)
_BROKER_EPOCH = (Field("brokerId", "int32"), Field("brokerEpoch", "int64"))
_ID_EPOCH = (Field("id", "int32"), Field("epoch", "int64"))
_INT32S = Array("int32")


def _m(*fields: Field) -> Message:
    return Message(tuple(fields), flexible=0)


# apiKey -> (record name, schema, highest version); names as MetadataRecordType's
SCHEMAS: dict[int, tuple[str, Message | None, int]] = {
    0: (
        "RegisterBrokerRecord",
        _m(
            Field("brokerId", "int32"),
            Field("isMigratingZkBroker", "bool", since=2),
            Field("incarnationId", "uuid"),
            Field("brokerEpoch", "int64"),
            Field("endPoints", Array(_ENDPOINT)),
            Field("features", Array(_FEATURE)),
            Field("rack", "string", nullable=0),
            Field("fenced", "bool"),
            Field("inControlledShutdown", "bool", since=1),
            Field("logDirs", Array("uuid"), since=3, tag=0),
        ),
        3,
    ),
    1: ("UnregisterBrokerRecord", _m(*_BROKER_EPOCH), 0),
    2: ("TopicRecord", _m(Field("name", "string"), Field("topicId", "uuid")), 0),
    3: (
        "PartitionRecord",
        _m(
            Field("partitionId", "int32"),
            Field("topicId", "uuid"),
            Field("replicas", _INT32S),
            Field("isr", _INT32S),
            Field("removingReplicas", _INT32S),
            Field("addingReplicas", _INT32S),
            Field("leader", "int32"),
            Field("leaderRecoveryState", "int8", tag=0),
            Field("leaderEpoch", "int32"),
            Field("partitionEpoch", "int32"),
            Field("directories", Array("uuid"), since=1),
            Field("eligibleLeaderReplicas", _INT32S, since=2, nullable=2, tag=1),
            Field("lastKnownElr", _INT32S, since=2, nullable=2, tag=2),
        ),
        2,
    ),
    4: (
        "ConfigRecord",
        _m(
            Field("resourceType", "int8"),
            Field("resourceName", "string"),
            Field("name", "string"),
            Field("value", "string", nullable=0),
        ),
        0,
    ),
    5: (
        "PartitionChangeRecord",
        _m(
            Field("partitionId", "int32"),
            Field("topicId", "uuid"),
            Field("isr", _INT32S, nullable=0, tag=0),
            Field("leader", "int32", tag=1),
            Field("replicas", _INT32S, nullable=0, tag=2),
            Field("removingReplicas", _INT32S, nullable=0, tag=3),
            Field("addingReplicas", _INT32S, nullable=0, tag=4),
            Field("leaderRecoveryState", "int8", tag=5),
            Field("directories", Array("uuid"), since=1, nullable=1, tag=8),
            Field("eligibleLeaderReplicas", _INT32S, since=2, nullable=2, tag=6),
            Field("lastKnownElr", _INT32S, since=2, nullable=2, tag=7),
        ),
        2,
    ),
    7: ("FenceBrokerRecord", _m(*_ID_EPOCH), 0),
    8: ("UnfenceBrokerRecord", _m(*_ID_EPOCH), 0),
    9: ("RemoveTopicRecord", _m(Field("topicId", "uuid")), 0),
    10: ("DelegationTokenRecord", None, 0),
    11: ("UserScramCredentialRecord", None, 0),
    12: ("FeatureLevelRecord", _m(Field("name", "string"), Field("featureLevel", "int16")), 0),
    14: ("ClientQuotaRecord", None, 0),
    15: (
        "ProducerIdsRecord",
        _m(*_BROKER_EPOCH, Field("nextProducerId", "int64")),
        0,
    ),
    17: (
        "BrokerRegistrationChangeRecord",
        _m(
            *_BROKER_EPOCH,
            Field("fenced", "int8", tag=0),
            Field("inControlledShutdown", "int8", since=1, tag=1),
            Field("logDirs", Array("uuid"), since=2, tag=2),
        ),
        2,
    ),
    18: ("AccessControlEntryRecord", None, 0),
    19: ("RemoveAccessControlEntryRecord", None, 0),
    20: ("NoOpRecord", _m(), 0),
    21: ("ZkMigrationStateRecord", _m(Field("zkMigrationState", "int8")), 0),
    22: ("RemoveUserScramCredentialRecord", None, 0),
    23: ("BeginTransactionRecord", _m(Field("name", "string", nullable=0, tag=0)), 0),
    24: ("EndTransactionRecord", _m(), 0),
    25: ("AbortTransactionRecord", None, 0),
    26: ("RemoveDelegationTokenRecord", None, 0),
    27: (
        "RegisterControllerRecord",
        _m(
            Field("controllerId", "int32"),
            Field("incarnationId", "uuid"),
            Field("zkMigrationReady", "bool"),
            Field("endPoints", Array(_ENDPOINT)),
            Field("features", Array(_FEATURE)),
        ),
        0,
    ),
    28: ("ClearElrRecord", None, 0),
}


def type_name(record: str) -> str:
    """``MetadataRecordType``'s constant for a record name (``TopicRecord`` ->
    ``TOPIC_RECORD``)."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", record).upper()


def metadata_record(value: bytes | None) -> tuple[str, int, dict[str, Any]]:
    """``(record name, version, fields)`` of one ``__cluster_metadata`` record's value
    (frame version, type and version as unsigned varints, then the message); a record
    that does not decode is a :class:`CorruptRecordError` saying why."""
    buf = value or b""
    frame, pos = decode_unsigned_varint(buf, 0)
    api_key, pos = decode_unsigned_varint(buf, pos)
    version, pos = decode_unsigned_varint(buf, pos)
    if frame != FRAME_VERSION:
        raise CorruptRecordError(f"frame version {frame} (expected {FRAME_VERSION})")
    if api_key not in SCHEMAS:
        raise CorruptRecordError(f"unknown metadata record type {api_key}")
    name, schema, top = SCHEMAS[api_key]
    if schema is None:
        raise CorruptRecordError(f"seglake does not decode {type_name(name)} records")
    if version > top:
        raise CorruptRecordError(f"{type_name(name)} version {version} (known: 0..{top})")
    data, _ = read_message(schema, buf[pos:], version)
    return name, version, data


def decode_metadata_record(
    key: bytes | None, value: bytes | None, offset: int
) -> tuple[str | None, str | None]:
    """``(None, payload text)`` of one ``__cluster_metadata`` record, as
    ``kafka-dump-log.sh --cluster-metadata-decoder`` prints it (metadata records have no
    key); a record that does not decode gets Kafka's ``Error at ...`` line."""
    try:
        name, version, data = metadata_record(value)
    except CorruptRecordError as exc:
        return None, f"Error at {offset}, skipping. {exc}"
    return None, to_json({"type": type_name(name), "version": version, "data": data})
