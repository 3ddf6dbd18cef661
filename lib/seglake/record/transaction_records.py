"""``__transaction_state`` records, decoded as ``kafka-dump-log.sh
--transaction-log-decoder`` prints them (Kafka's transaction coordinator's
``TransactionLogKey`` / ``TransactionLogValue``, framed as every coordinator's records:
``messages.decode_coordinator_record``)."""

from __future__ import annotations

from seglake.record.messages import (
    Array,
    CoordinatorTypes,
    Field,
    Message,
    decode_coordinator_record,
)

TRANSACTION_LOG_KEY = Message((Field("transactionalId", "string"),))
TRANSACTION_LOG_VALUE = Message(
    (
        Field("producerId", "int64"),
        Field("previousProducerId", "int64", since=1, tag=0),
        Field("nextProducerId", "int64", since=1, tag=1),
        Field("producerEpoch", "int16"),
        Field("nextProducerEpoch", "int16", since=1, tag=3),
        Field("transactionTimeoutMs", "int32"),
        Field("transactionStatus", "int8"),
        Field(
            "transactionPartitions",
            Array((Field("topic", "string"), Field("partitionIds", Array("int32")))),
            nullable=0,
        ),
        Field("transactionLastUpdateTimestampMs", "int64"),
        Field("transactionStartTimestampMs", "int64"),
        Field("clientTransactionVersion", "int16", since=1, tag=2),
    ),
    flexible=1,
)
_TYPES: CoordinatorTypes = {0: (TRANSACTION_LOG_KEY, TRANSACTION_LOG_VALUE, 1)}


def decode_transaction_record(
    key: bytes | None, value: bytes | None, offset: int
) -> tuple[str, str | None]:
    """``(key text, payload text or None)`` of one ``__transaction_state`` record."""
    return decode_coordinator_record(_TYPES, key, value, offset, decoder="transaction log")
