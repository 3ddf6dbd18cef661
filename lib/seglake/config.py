"""Settings, named as Kafka names them (``log.segment.bytes``, ``batch.size`` ...).

Values come from, in order of precedence: explicit overrides, a ``.properties`` file
(``conf/seglake.properties``), then Kafka's defaults below. Unknown names and bad values
raise :class:`~seglake.errors.ConfigError` naming the key and the value.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from seglake.errors import ConfigError
from seglake.storage.index_builder import DEFAULT_INTERVAL

CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
INT32_MAX = 2**31 - 1


@dataclasses.dataclass(frozen=True)
class Setting:
    name: str
    attr: str
    kind: type
    default: Any
    doc: str
    minimum: int | None = None


SETTINGS: tuple[Setting, ...] = (
    Setting(
        "log.segment.bytes",
        "segment_bytes",
        int,
        1 << 30,
        "roll when segment size + batch size would exceed this",
        14,
    ),
    Setting(
        "log.index.interval.bytes",
        "index_interval_bytes",
        int,
        DEFAULT_INTERVAL,
        "bytes of batches between two index entries",
        0,
    ),
    Setting(
        "log.index.size.max.bytes",
        "index_size_max_bytes",
        int,
        10 * 1024 * 1024,
        "preallocated index size; a full index forces a roll",
        12,
    ),
    Setting(
        "log.roll.ms",
        "roll_ms",
        int,
        168 * 3600 * 1000,
        "roll when now - first batch timestamp exceeds this",
        1,
    ),
    Setting(
        "log.roll.jitter.ms",
        "roll_jitter_ms",
        int,
        0,
        "up to this much is subtracted from log.roll.ms",
        0,
    ),
    Setting(
        "log.retention.ms",
        "retention_ms",
        int,
        168 * 3600 * 1000,
        "delete segments whose largest timestamp is older than now - this (-1: never)",
        -1,
    ),
    Setting(
        "log.retention.bytes",
        "retention_bytes",
        int,
        -1,
        "delete oldest segments while the partition stays above this (-1: unlimited)",
        -1,
    ),
    Setting(
        "batch.size",
        "batch_size",
        int,
        16384,
        "target record batch size in bytes (uncompressed records)",
        1,
    ),
    Setting(
        "batch.max.records",
        "batch_max_records",
        int,
        0,
        "at most this many records per batch (0: only batch.size limits)",
        0,
    ),
    Setting("compression.type", "compression_type", str, "none", "none, gzip, snappy, lz4 or zstd"),
    Setting("compression.gzip.level", "gzip_level", int, 6, "gzip level 1-9", 1),
    Setting("compression.zstd.level", "zstd_level", int, 3, "zstd level", 1),
    Setting(
        "compression.lz4.level",
        "lz4_level",
        int,
        9,
        "lz4 level 1-17; 9 uses the fast compressor, others LZ4 HC (Kafka's rule)",
        1,
    ),
    Setting(
        "message.timestamp.type",
        "timestamp_type",
        str,
        "CreateTime",
        "CreateTime or LogAppendTime (used when the input has no timestamp)",
    ),
    Setting(
        "num.partitions",
        "num_partitions",
        int,
        1,
        "partitions of a topic when the input has no partition column",
        1,
    ),
    Setting(
        "seglake.index.cache.bytes",
        "index_cache_bytes",
        int,
        256 * 1024 * 1024,
        "per-worker cache of open index files",
        0,
    ),
    Setting(
        "seglake.read.corrupt",
        "read_corrupt",
        str,
        "raise",
        "a damaged batch (CRC, magic, length): raise (the job fails, exit 2) or skip it "
        "(every other record is read; the job prints each batch skipped)",
    ),
    Setting(
        "seglake.ingest.task.max.records",
        "task_max_records",
        int,
        4_000_000,
        "a partition with more records is split across tasks by offset range",
        1,
    ),
    Setting(
        "seglake.ingest.order",
        "ingest_order",
        str,
        "input",
        "order of records when offsets are assigned: input or timestamp",
    ),
    Setting(
        "seglake.ingest.shuffle",
        "ingest_shuffle",
        str,
        "auto",
        "auto, always or never: never writes each input task's records of a partition "
        "as its own segments (no shuffle); auto does so when the pieces are large",
    ),
    Setting(
        "seglake.ingest.local.min.records",
        "local_min_records",
        int,
        10_000,
        "auto: skip the shuffle when (input task, partition) pieces average this many records",
        1,
    ),
    Setting(
        "seglake.ingest.staging.grace.ms",
        "staging_grace_ms",
        int,
        3600 * 1000,
        "an ingest removes staged files of uncommitted runs untouched this long",
        0,
    ),
    Setting(
        "file.delete.delay.ms",
        "file_delete_delay_ms",
        int,
        3600 * 1000,
        "files of segments a commit removed are deleted this long after it (readers pinned "
        "to an older catalog version keep working until then)",
        0,
    ),
    Setting(
        "seglake.ingest.buffer.bytes",
        "ingest_buffer_bytes",
        int,
        64 * 1024 * 1024,
        "without a shuffle: records buffered per task before encoding, over all its partitions",
        1,
    ),
)
_BY_NAME = {s.name: s for s in SETTINGS}
_ALIASES = {
    "log.roll.hours": ("log.roll.ms", 3600 * 1000),
    "log.retention.hours": ("log.retention.ms", 3600 * 1000),
    "log.retention.minutes": ("log.retention.ms", 60 * 1000),
}


@dataclasses.dataclass(frozen=True)
class LogConfig:
    """Resolved settings; attribute names are the Kafka names in snake case."""

    segment_bytes: int = 1 << 30
    index_interval_bytes: int = DEFAULT_INTERVAL
    index_size_max_bytes: int = 10 * 1024 * 1024
    roll_ms: int = 168 * 3600 * 1000
    roll_jitter_ms: int = 0
    retention_ms: int = 168 * 3600 * 1000
    retention_bytes: int = -1
    batch_size: int = 16384
    batch_max_records: int = 0
    compression_type: str = "none"
    gzip_level: int = 6
    zstd_level: int = 3
    lz4_level: int = 9
    timestamp_type: str = "CreateTime"
    num_partitions: int = 1
    index_cache_bytes: int = 256 * 1024 * 1024
    read_corrupt: str = "raise"
    task_max_records: int = 4_000_000
    ingest_order: str = "input"
    ingest_shuffle: str = "auto"
    local_min_records: int = 10_000
    ingest_buffer_bytes: int = 16 * 1024 * 1024
    staging_grace_ms: int = 3600 * 1000
    file_delete_delay_ms: int = 3600 * 1000

    def __post_init__(self) -> None:
        for s in SETTINGS:
            value = getattr(self, s.attr)
            if s.minimum is not None and value < s.minimum:
                raise ConfigError(f"{s.name}={value} is below its minimum {s.minimum}")
        if self.compression_type not in CODECS:
            raise ConfigError(
                f"compression.type={self.compression_type!r}: expected one of {', '.join(CODECS)}"
            )
        if self.timestamp_type not in ("CreateTime", "LogAppendTime"):
            raise ConfigError(
                f"message.timestamp.type={self.timestamp_type!r}: expected "
                "CreateTime or LogAppendTime"
            )
        if self.read_corrupt not in ("raise", "skip"):
            raise ConfigError(f"seglake.read.corrupt={self.read_corrupt!r}: expected raise or skip")
        if self.ingest_order not in ("input", "timestamp"):
            raise ConfigError(
                f"seglake.ingest.order={self.ingest_order!r}: expected input or timestamp"
            )
        if self.ingest_shuffle not in ("auto", "always", "never"):
            raise ConfigError(
                f"seglake.ingest.shuffle={self.ingest_shuffle!r}: expected auto, always or never"
            )
        if self.segment_bytes > INT32_MAX:
            raise ConfigError(
                f"log.segment.bytes={self.segment_bytes} exceeds {INT32_MAX}: "
                "index positions are int32"
            )

    @property
    def codec(self) -> int:
        """Codec id of ``compression.type`` (0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd)."""
        return CODECS[self.compression_type]

    @property
    def compression_level(self) -> int | None:
        return {1: self.gzip_level, 3: self.lz4_level, 4: self.zstd_level}.get(self.codec)

    @property
    def max_index_entries(self) -> int:
        """Entries an offset index holds before it is full (time index: // 12)."""
        return self.index_size_max_bytes // 8

    @property
    def max_time_index_entries(self) -> int:
        return self.index_size_max_bytes // 12

    def to_properties(self) -> dict[str, str]:
        """Kafka-named ``{name: value}`` strings (what a ``.properties`` file holds)."""
        return {s.name: str(getattr(self, s.attr)) for s in SETTINGS}

    def with_overrides(self, overrides: Mapping[str, Any] | None) -> LogConfig:
        """A copy with Kafka-named overrides applied (``{"log.segment.bytes": "1048576"}``)."""
        if not overrides:
            return self
        changes: dict[str, Any] = {}
        for key, raw in overrides.items():
            name, scale = key, 1
            if key in _ALIASES:
                name, scale = _ALIASES[key]
            setting = _BY_NAME.get(name)
            if setting is None:
                raise ConfigError(f"unknown setting {key!r}; known: {', '.join(sorted(_BY_NAME))}")
            changes[setting.attr] = (
                _parse(setting, raw) * scale if scale != 1 else _parse(setting, raw)
            )
        return dataclasses.replace(self, **changes)

    @classmethod
    def load(
        cls, path: str | Path | None = None, overrides: Mapping[str, Any] | None = None
    ) -> LogConfig:
        """Kafka defaults, then the ``.properties`` file at ``path``, then ``overrides``."""
        config = cls()
        if path is not None:
            config = config.with_overrides(read_properties(path))
        return config.with_overrides(overrides)


def _parse(setting: Setting, raw: Any) -> Any:
    if setting.kind is int:
        try:
            return int(str(raw).strip().replace("_", ""))
        except ValueError:
            raise ConfigError(f"{setting.name}={raw!r} is not an integer") from None
    return str(raw).strip()


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
    an odd number of backslashes joined with the next (its leading blanks dropped)."""
    out: list[tuple[int, str]] = []
    natural = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    i = 0
    while i < len(natural):
        lineno, line = i + 1, natural[i].lstrip(_BLANK)
        i += 1
        if not line or line[0] in "#!":
            continue
        while (len(line) - len(line.rstrip("\\"))) % 2 == 1:
            line = line[:-1]
            if i == len(natural):
                break
            line += natural[i].lstrip(_BLANK)
            i += 1
        out.append((lineno, line))
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


def parse_overrides(pairs: list[str] | None) -> dict[str, str]:
    """``["k=v", ...]`` from ``--conf`` flags into a dict; a pair without ``=`` is an error."""
    out: dict[str, str] = {}
    for pair in pairs or []:
        if "=" not in pair:
            raise ConfigError(f"--conf {pair!r}: expected key=value")
        key, value = pair.split("=", 1)
        out[key.strip()] = value.strip()
    return out
