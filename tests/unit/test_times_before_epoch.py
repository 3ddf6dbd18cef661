"""Issue 25.2: a user's time is never one of Kafka's sentinels. A time just before 1970 is
-1/-2/-3 ms (latest, earliest, max timestamp) if converted blindly; every entry point
refuses it with one line instead (sentinels only by name, or -1/-2/-3 given as such), and
microseconds -> ms is one rule, floor (Spark's ``unix_millis``, Java's ``toEpochMilli``).

Oracles: the epoch arithmetic written out (``datetime`` differences in microseconds,
floored by hand), and the lake's own records.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

import seglake
from seglake.cli.main import main as cli_main
from seglake.errors import ConfigError
from seglake.spark.arrow_input import Normalizer
from seglake.spark.lookup_queries import _string_millis
from seglake.spark.stream_sink import internal_columns
from seglake.times import micros_to_millis, to_millis
from tests.unit.test_corrupt_reads import T0, N, lake, pristine  # noqa: F401

UTC = dt.UTC
# 1 ms, 2 ms and 3 ms before the epoch: -1, -2, -3 when converted
BEFORE = {
    -1: "1969-12-31T23:59:59.999Z",
    -2: "1969-12-31T23:59:59.998+00:00",
    -3: "1969-12-31T23:59:59.997",
}


@pytest.mark.parametrize("ms", [-1, -2, -3])
def test_times_before_1970_are_refused_in_every_form(ms: int) -> None:
    iso = BEFORE[ms]
    when = dt.datetime(1970, 1, 1, tzinfo=UTC) + dt.timedelta(milliseconds=ms)
    forms = [
        iso,
        when,
        when.replace(tzinfo=None),
        pd.Timestamp(when),
        np.datetime64(iso.rstrip("Z").split("+")[0], "ms"),
        dt.datetime(1969, 12, 31, 23, 59, 59, 999_999 + 1000 * (ms + 1), tzinfo=UTC),
    ]
    for form in forms:
        for special in (False, True):
            with pytest.raises(ConfigError, match="before 1970") as err:
                to_millis(form, allow_special=special)
            assert "\n" not in str(err.value)
    with pytest.raises(ConfigError):
        to_millis(dt.date(1969, 12, 31))


def test_sentinels_only_by_name() -> None:
    assert [to_millis(x, allow_special=True) for x in ("latest", "earliest", "max")] == [
        -1,
        -2,
        -3,
    ]
    assert [to_millis(x, allow_special=True) for x in (-1, "-2", " -3 ")] == [-1, -2, -3]
    for name in ("latest", "-1"):
        with pytest.raises(ConfigError):
            to_millis(name)


def test_micros_to_millis_is_floor() -> None:
    us = np.array([-1500, -1000, -1, 0, 1, 999, 1000, 1999, 253_402_300_799_999_999])
    want = [-2, -1, -1, 0, 0, 0, 1, 1, 253_402_300_799_999]
    assert micros_to_millis(us).tolist() == want
    assert [micros_to_millis(int(u)) for u in us] == want
    epoch = dt.datetime(1970, 1, 1, tzinfo=UTC)
    for u in (1, 999, 1999, 1_767_225_600_123_999):
        when = epoch + dt.timedelta(microseconds=u)
        assert to_millis(when) == to_millis(when.isoformat()) == u // 1000


def test_spark_timestamp_columns_floor_in_integers() -> None:
    """The streaming sink's and the direct ingest's conversions of a TIMESTAMP column:
    the same floor, exact at any year (a float division loses the last ms past 2255)."""
    us = [1_767_225_600_000_999, 253_402_300_799_999_999, 16_725_225_600_123_456]
    batch = pa.record_batch(
        {
            "value": pa.array([b"v"] * len(us)),
            "timestamp": pa.array(us, pa.timestamp("us", tz="UTC")),
        }
    )
    want = [u // 1000 for u in us]
    got = internal_columns(batch, "t", 0).column("timestamp")  # CreateTime
    assert got.to_pylist() == want
    ts, _ = Normalizer("t", ("value", "timestamp"), None)._timestamps(batch, "f")
    assert ts.to_pylist() == want


def test_lookup_strings_before_1970_are_invalid_not_latest() -> None:
    got = _string_millis(pd.Series([BEFORE[-1], "-1", "latest", "1970-01-01T00:00:00.0019Z"]))
    assert got.tolist()[0] is pd.NA
    assert got.tolist()[1:] == [-1, -1, 1]


def test_cli_and_notebook_refuse_times_before_1970(lake: Path, capsys) -> None:  # noqa: F811
    d = str(lake / "t-0")
    for ms, iso in BEFORE.items():
        assert cli_main(["offset-for-time", d, iso]) == 2, iso
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "before 1970" in err, err
        argv = ["consume", str(lake), "--topic", "t", "--from-timestamp", iso]
        assert cli_main(argv) == 2, iso
        assert "before 1970" in capsys.readouterr().err
        p = seglake.open(str(lake)).partition("t", 0)
        when = dt.datetime(1970, 1, 1, tzinfo=UTC) + dt.timedelta(milliseconds=ms)
        with pytest.raises(ConfigError, match="before 1970"):
            p.offsets_for_times(when)
        with pytest.raises(ConfigError, match="before 1970"):
            p.range(iso, T0)
    # the named forms still mean what Kafka means
    assert cli_main(["offset-for-time", d, "-1"]) == 0
    assert f'"offset": {N}' in capsys.readouterr().out
    assert cli_main(["offset-for-time", d, "latest"]) == 0
    assert f'"offset": {N}' in capsys.readouterr().out


def test_encoder_floors_timestamp_columns() -> None:
    """``int64_column`` (every writer's timestamps): Arrow's cast truncates toward zero,
    so 0.5 ms before 1970 was written as 0; floor makes it -1, which the writer refuses."""
    from seglake.errors import InputSchemaError
    from seglake.record.encode_input import check_timestamps, int64_column

    for unit, before in (("us", -500), ("ns", -500_000), ("ms", -1), ("s", -1)):
        t = pa.table({"timestamp": pa.array([before, 0], pa.timestamp(unit, tz="UTC"))})
        ms = int64_column(t, "timestamp")
        assert ms.tolist() == [-1 if unit != "s" else -1000, 0], unit
        with pytest.raises(InputSchemaError):
            check_timestamps(ms)
    t = pa.table({"timestamp": pa.array([1_767_225_600_123_999], pa.timestamp("us", tz="UTC"))})
    assert int64_column(t, "timestamp").tolist() == [1_767_225_600_123]
