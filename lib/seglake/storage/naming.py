"""File and directory names of a Kafka partition log.

    <topic>-<partition>/                       e.g. orders-3/
      00000000000000368769.log                 base offset, zero-padded to 20 digits
      00000000000000368769.index / .timeindex / .txnindex
      00000000000000368769.keyindex            seglake's key index (storage/key_index.py);
                                               a broker ignores the suffix
      *.deleted / *.cleaned / *.swap           mid-operation files: readers skip them

Topic names follow Kafka: ``[a-zA-Z0-9._-]``, 1..249 characters, not ``.`` or ``..``.
Validating them is also what keeps a name like ``../x`` from leaving the lake. Every
other name that becomes a path (run ids, streaming query ids, a stream's or batch
sink's stage) follows the same rule (:func:`validate_name`), checked where it enters
and again where :func:`run_dir` builds ``<root>/_staging/<run>`` or ``_retired/<run>``. The
directory ``<topic>-<partition>`` must also fit ``NAME_MAX`` (255): checked before
ingest writes a file.
"""

from __future__ import annotations

import re

from seglake.errors import InvalidNameError, InvalidTopicError
from seglake.format import INT32_MAX, LONG_MAX
from seglake.lake_paths import RETIRED_DIR, STAGING_DIR

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
TXN_INDEX_SUFFIX = ".txnindex"
KEY_INDEX_SUFFIX = ".keyindex"  # seglake's own (storage/key_index.py): part of its segment
SNAPSHOT_SUFFIX = ".snapshot"  # a broker's producer state (storage/producer_snapshot.py)
CHECKPOINT_SUFFIX = ".checkpoint"  # a KRaft snapshot: batches, as a .log
BOOTSTRAP_CHECKPOINT = "bootstrap.checkpoint"
_CHECKPOINT_RE = re.compile(r"(\d{20})-(\d{10})\.checkpoint")
# a segment's files: retired, published, deleted and copied together
SEGMENT_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX, KEY_INDEX_SUFFIX)
PENDING_SUFFIXES = (".deleted", ".cleaned", ".swap")
MAX_TOPIC_LENGTH = 249
MAX_NAME_LENGTH = MAX_TOPIC_LENGTH  # any name that becomes a path
NAME_MAX = 255  # longest file or directory name (ext4, xfs, APFS, NTFS)

# Kafka's internal topics (org.apache.kafka.common.internals.Topic.INTERNAL_TOPICS, 4.1):
# a broker marks them isInternal; Admin.listTopics leaves them out, and Spark's Kafka
# source reads none of them (ConsumerStrategy.retrieveAllPartitions: filterNot isInternal)
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})
METADATA_TOPIC = "__cluster_metadata"  # KRaft's metadata log: no broker lists it

_TOPIC_RE = re.compile(r"[a-zA-Z0-9._-]{1,249}")
_SEGMENT_RE = re.compile(r"(\d{20})(\.log|\.index|\.timeindex|\.txnindex|\.keyindex)")
_PARTITION_DIR_RE = re.compile(r"(.+)-(\d+)")


def validate_name(
    value: object, what: str, *, error: type[InvalidNameError] = InvalidNameError
) -> str:
    """Return ``value`` if it may become one path component: Kafka's topic characters
    ``[a-zA-Z0-9._-]``, 1..249 of them, not ``.`` or ``..``; else raise ``error`` (one
    line naming ``what`` and the value). The one rule for every name that becomes a path.
    """
    if not isinstance(value, str):
        raise error(f"{what} must be a string, got {type(value).__name__}")
    if value in (".", ".."):
        raise error(f"{what} {value!r} is not allowed")
    if not _TOPIC_RE.fullmatch(value):
        if not value:
            raise error(f"{what} is empty")
        if len(value) > MAX_NAME_LENGTH:
            raise error(f"{what} is {len(value)} characters, more than {MAX_NAME_LENGTH}")
        bad = sorted({c for c in value if not re.fullmatch(r"[a-zA-Z0-9._-]", c)})
        raise error(f"{what} {value!r} has characters outside [a-zA-Z0-9._-]: {bad}")
    return value


def validate_topic(topic: object) -> str:
    """Return ``topic`` if Kafka would accept it, else raise :class:`InvalidTopicError`."""
    return validate_name(topic, "topic name", error=InvalidTopicError)


def validate_run_id(run_id: object) -> str:
    """Return ``run_id`` if it may name ``_staging/<run>`` (:func:`validate_name`)."""
    return validate_name(run_id, "run id")


def run_dir(root: str, kind: str, run_id: str) -> str:
    """``<root>/_staging/<run>`` or ``<root>/_retired/<run>`` (``kind``), the run id
    validated: the one place a run's directory is built."""
    if kind not in (STAGING_DIR, RETIRED_DIR):
        raise ValueError(f"unknown run directory {kind!r}")
    return f"{root.rstrip('/')}/{kind}/{validate_run_id(run_id)}"


def internal_topic(topic: str) -> bool:
    """Whether a Kafka client never sees ``topic`` as a topic to read: one of Kafka's
    :data:`INTERNAL_TOPICS` or KRaft's metadata log (a lake may hold copies of both)."""
    return topic in INTERNAL_TOPICS or topic == METADATA_TOPIC


def validate_partition(partition: object) -> int:
    """Return ``partition`` as an int if it is a non-negative int32."""
    if isinstance(partition, bool) or not isinstance(partition, int):
        try:
            import numpy as np

            if isinstance(partition, np.integer):
                partition = int(partition)
            else:
                raise TypeError
        except TypeError:
            raise InvalidTopicError(f"partition must be an integer, got {partition!r}") from None
    if not 0 <= partition <= INT32_MAX:
        raise InvalidTopicError(f"partition {partition} is outside 0..2147483647")
    return partition


def partition_dir_name(topic: str, partition: int) -> str:
    """``orders-3`` for topic ``orders``, partition 3 (both validated, and the name short
    enough for a file system: at most ``NAME_MAX`` characters)."""
    name = f"{validate_topic(topic)}-{validate_partition(partition)}"
    if len(name) > NAME_MAX:
        raise InvalidTopicError(
            f"partition directory {topic[:16]}...-{partition} would be {len(name)} characters "
            f"(topic {len(topic)} + '-{partition}'), more than the {NAME_MAX} a file system "
            f"allows: a {len(topic)}-character topic can have partitions up to "
            f"{10 ** (NAME_MAX - len(topic) - 1) - 1}"
        )
    return name


def parse_partition_dir(name: str) -> tuple[str, int]:
    """``"orders-3"`` -> ``("orders", 3)``; raises :class:`InvalidTopicError` otherwise."""
    m = _PARTITION_DIR_RE.fullmatch(name)
    if not m:
        raise InvalidTopicError(f"{name!r} is not a partition directory name (<topic>-<n>)")
    return validate_topic(m.group(1)), int(m.group(2))


def segment_file_name(base_offset: int, suffix: str = LOG_SUFFIX) -> str:
    """``00000000000000368769.log`` for base offset 368769."""
    if not 0 <= base_offset <= LONG_MAX:
        raise ValueError(f"base offset {base_offset} is outside 0..2^63-1")
    if suffix not in SEGMENT_SUFFIXES:
        raise ValueError(f"unknown segment file suffix {suffix!r}")
    return f"{base_offset:020d}{suffix}"


def parse_segment_file_name(name: str) -> tuple[int, str] | None:
    """``("00000000000000368769.log")`` -> ``(368769, ".log")``; ``None`` for other files."""
    m = _SEGMENT_RE.fullmatch(name)
    if not m:
        return None
    return int(m.group(1)), m.group(2)


def parse_checkpoint_file_name(name: str) -> tuple[int, int] | None:
    """``("00000000000000000100-0000000003.checkpoint")`` -> ``(100, 3)``: a KRaft
    snapshot's end offset and epoch (Kafka's ``Snapshots.parse``); ``None`` otherwise."""
    m = _CHECKPOINT_RE.fullmatch(name)
    return None if m is None else (int(m.group(1)), int(m.group(2)))


def row_copies(root: str, path: str, run_id: str | None) -> tuple[str | None, str | None]:
    """Where the files of catalog row (``path``, ``run_id``) may be besides
    ``<root>/<path>``: ``(staged, retired)``, ``<root>/_staging/<run>/<path>`` (committed,
    not moved out yet) and ``<root>/_retired/<run>/<path>`` (a later run published other
    files under the same name: a reader of this row's version must read these)."""
    if not run_id:
        return None, None
    validate_name(run_id, f"{path}: the catalog row's run id")
    staged, retired = run_dir(root, STAGING_DIR, run_id), run_dir(root, RETIRED_DIR, run_id)
    return f"{staged}/{path}", f"{retired}/{path}"
