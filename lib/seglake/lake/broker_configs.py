"""A KRaft broker's topics and their configs, read from its data directory's metadata log
(``__cluster_metadata-0``: what ``kafka-configs --describe --entity-type topics`` shows
as a topic's dynamic overrides), for ``register``.

    __cluster_metadata-0/<end>-<epoch>.checkpoint   a snapshot: the state up to offset end
    __cluster_metadata-0/<base>.log                  records after it (and before)

Records applied in offset order, from the newest snapshot on (a snapshot's records
first, then the log's from its end offset):

    TopicRecord(name, topicId)                       the topic exists (no overrides yet)
    ConfigRecord(resourceType 2 = TOPIC, resourceName, name, value)
                                                      set an override; value null deletes it
    RemoveTopicRecord(topicId)                       the topic and its overrides are gone

Broker-level configs (resourceType 4: a cluster's dynamic ``log.*`` defaults) are not a
topic's overrides (``kafka-configs --describe`` of a topic does not list them) and are
not read. Records of an aborted metadata transaction are rare (KIP-868, controllers
only) and applied like the others. Without a metadata log (a ZooKeeper broker, a copy
without it): ``None``.
"""

from __future__ import annotations

from typing import Any

import pyarrow.fs as pafs

from seglake import fs as lakefs
from seglake.errors import CorruptRecordError
from seglake.record.metadata_records import metadata_record
from seglake.record.reader import read_log
from seglake.storage.naming import (
    LOG_SUFFIX,
    METADATA_TOPIC,
    parse_checkpoint_file_name,
    parse_segment_file_name,
)

__all__ = ["TOPIC_RESOURCE", "broker_topic_configs"]

TOPIC_RESOURCE = 2  # ConfigResource.Type.TOPIC


def broker_topic_configs(sfs: pafs.FileSystem, src: str) -> dict[str, dict[str, str]] | None:
    """``{topic: {config name: value}}`` of every topic the metadata log of the broker data
    directory ``src`` holds at its end; ``None`` without a metadata log."""
    meta = lakefs.join(src, f"{METADATA_TOPIC}-0")
    if sfs.get_file_info(meta).type != pafs.FileType.Directory:
        return None
    snapshots, logs = [], []
    for f in sfs.get_file_info(pafs.FileSelector(meta)):
        snap = parse_checkpoint_file_name(f.base_name)
        seg = parse_segment_file_name(f.base_name)
        if snap is not None:
            snapshots.append((snap[0], f.path))
        elif seg is not None and seg[1] == LOG_SUFFIX:
            logs.append((seg[0], f.path))
    state = _State()
    start = 0
    if snapshots:
        start, path = max(snapshots)
        state.apply(path, lakefs.read_all(sfs, path), 0)
    for _, path in sorted(logs):
        state.apply(path, lakefs.read_all(sfs, path), start)
    return state.configs


class _State:
    """Topics by id and their overrides, as records are applied."""

    def __init__(self) -> None:
        self.names: dict[str, str] = {}  # topicId -> name
        self.configs: dict[str, dict[str, str]] = {}

    def apply(self, path: str, data: bytes, start: int) -> None:
        """The records at offsets >= ``start`` of a ``.log`` or snapshot's bytes (a torn
        tail ends it, as a broker's recovery cuts it)."""
        records, _ = read_log(data, path=path)
        for offset, value in zip(
            records.column("offset").to_pylist(), records.column("value").to_pylist(), strict=True
        ):
            if offset < start:
                continue
            try:
                name, _, data_ = metadata_record(value)
            except CorruptRecordError:  # a type seglake does not decode: not a topic's
                continue
            self._record(name, data_)

    def _record(self, name: str, data: dict[str, Any]) -> None:
        if name == "TopicRecord":
            self.names[data["topicId"]] = data["name"]
            self.configs.setdefault(data["name"], {})
        elif name == "ConfigRecord" and data["resourceType"] == TOPIC_RESOURCE:
            own = self.configs.setdefault(data["resourceName"], {})
            if data["value"] is None:
                own.pop(data["name"], None)
            else:
                own[data["name"]] = data["value"]
        elif name == "RemoveTopicRecord":
            gone = self.names.pop(data["topicId"], None)
            if gone is not None:
                self.configs.pop(gone, None)
