"""``seglake dump`` of a producer-state ``.snapshot``: Kafka's ``dumpProducerIdSnapshot``."""

from __future__ import annotations

import json
from typing import IO

from seglake import fs as lakefs
from seglake.cli.dump.log import optional_long
from seglake.storage.producer_snapshot import read_producer_snapshot


def dump_snapshot(path: str, out: IO[str], *, as_json: bool) -> int:
    """Kafka's ``dumpProducerIdSnapshot`` of a ``.snapshot`` file."""
    fs, p = lakefs.resolve(path)
    for e in read_producer_snapshot(lakefs.read_all(fs, p), path=path):
        txn = None if e.current_txn_first_offset < 0 else e.current_txn_first_offset
        if as_json:
            out.write(json.dumps({**e._asdict(), "first_sequence": e.first_sequence}) + "\n")
            continue
        out.write(
            f"producerId: {e.producer_id} producerEpoch: {e.producer_epoch} "
            f"coordinatorEpoch: {e.coordinator_epoch} "
            f"currentTxnFirstOffset: {optional_long(txn)} lastTimestamp: {e.timestamp} "
            f"firstSequence: {e.first_sequence} lastSequence: {e.last_sequence} "
            f"lastOffset: {e.last_offset} offsetDelta: {e.offset_delta} "
            f"timestamp: {e.timestamp}\n"
        )
    return 0
