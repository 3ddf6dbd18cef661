"""The operator commands Kafka users reach for: ``seglake offsets`` (kafka-get-offsets.sh),
``seglake history``, ``consume --formatter`` with kcat format strings, ``.properties``
files by Java's rules (Java itself is the oracle), ``--version`` and "did you mean"."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from seglake.cli.main import main
from seglake.properties import parse_properties, read_properties
from tests.compat.test_fixture_lookups import first_at_or_after
from tests.conftest import FIXTURE_PARTITIONS


def run(capsys, *argv: str) -> tuple[int, str, str]:
    try:
        code = main(list(argv))
    except SystemExit as exc:  # argparse's exits (errors, --version)
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def lake(fixtures_dir, tmp_path_factory) -> str:
    """The broker fixtures registered into a lake (copies; the fixtures stay untouched)."""
    root = str(tmp_path_factory.mktemp("ops") / "lake")
    assert main(["register", "--root", root, "--include-internal", str(fixtures_dir)]) == 0
    return root


# ------------------------------------------------------------------------ seglake offsets
@pytest.mark.parametrize("time", ["-1", "-2", "-3", "latest", "earliest", "max-timestamp"])
def test_offsets_special_times_equal_scan(capsys, lake, time) -> None:
    code, out, _ = run(capsys, "offsets", lake, "--time", time)
    assert code == 0
    ts = {"latest": -1, "earliest": -2, "max-timestamp": -3}.get(time) or int(time)
    want = ""
    for p in sorted(FIXTURE_PARTITIONS):  # GetOffsetShell: sorted by "<topic>-<partition>"
        found = first_at_or_after(p, ts)
        if found is not None:
            topic, _, n = p.rpartition("-")
            want += f"{topic}:{n}:{found[1]}\n"
    assert out == want


def test_offsets_exclude_internal_topics(capsys, lake) -> None:
    code, out, _ = run(capsys, "offsets", lake, "--exclude-internal-topics")
    assert code == 0
    topics = [line.split(":")[0] for line in out.splitlines()]
    assert topics == ["__cluster_metadata", "first", "sensor-data"]  # Kafka lists no
    # __cluster_metadata topic, but it is not one of Topic.isInternal's either


def test_offsets_for_a_time_equal_scan(capsys, lake) -> None:
    """A time in ms and the same time in ISO-8601: the first offset with timestamp >= it
    (kafka-python's decoding is the oracle); partitions with none are left out."""
    from tests.compat.test_fixture_lookups import brute

    _offs, ts, _rows, _start, _leo = brute("first-0")
    t = int(ts[len(ts) // 2])
    iso = str(np.datetime64(t, "ms")) + "Z"
    for given in (str(t), iso):
        code, out, _ = run(capsys, "offsets", lake, "--topic", "first|sensor-data", "--time", given)
        assert code == 0
        want = ""
        for p in ("first-0", "sensor-data-0"):
            found = first_at_or_after(p, t)
            if found is not None:
                want += f"{p.rpartition('-')[0]}:0:{found[1]}\n"
        assert out == want


def test_offsets_filters_as_get_offset_shell(capsys, fixtures_dir, tmp_path) -> None:
    """--topic is a whole-name regex (',' means '|'); --partitions ids; --topic-partitions
    rules (N-M upper exclusive); the order is Kafka's string order (t-10 before t-2)."""
    broker = tmp_path / "broker"
    for n in (0, 2, 10):
        shutil.copytree(fixtures_dir / "first-0", broker / f"t-{n}")
    shutil.copytree(fixtures_dir / "first-0", broker / "other-1")
    root = str(tmp_path / "lake")
    assert main(["register", "--root", root, str(broker)]) == 0
    capsys.readouterr()
    leo = first_at_or_after("first-0", -1)[1]

    def offsets(*args: str) -> list[str]:
        code, out, err = run(capsys, "offsets", root, *args)
        assert code == 0, err
        return out.splitlines()

    assert offsets() == [f"other:1:{leo}", f"t:0:{leo}", f"t:10:{leo}", f"t:2:{leo}"]
    assert offsets("--topic", "t") == [f"t:0:{leo}", f"t:10:{leo}", f"t:2:{leo}"]
    code, _, err = run(capsys, "offsets", root, "--topic", "o")  # whole names only
    assert code == 2 and "could not match any topic-partitions" in err
    assert offsets("--topic", "t,other", "--partitions", "1,10") == [
        f"other:1:{leo}",
        f"t:10:{leo}",
    ]
    assert offsets("--topic-partitions", "t:0-10") == [f"t:0:{leo}", f"t:2:{leo}"]
    assert offsets("--topic-partitions", "t:2-,other") == [
        f"other:1:{leo}",
        f"t:10:{leo}",
        f"t:2:{leo}",
    ]
    assert offsets("--topic-partitions", ":-1") == [f"t:0:{leo}"]


def test_offsets_bad_input_one_line(capsys, lake, tmp_path) -> None:
    cases = [
        (["--topic", "nope"], "could not match any topic-partitions"),
        (["--topic", "first", "--topic-partitions", "first:0"], "cannot be used with"),
        (["--partitions", "a,b"], "comma separated list of numeric partition ids"),
        (["--time", "yesterday"], "not epoch ms or an ISO-8601 time"),
        (["--topic", "(("], "invalid regex"),
    ]
    for args, why in cases:
        code, out, err = run(capsys, "offsets", lake, *args)
        assert (code, out) == (2, ""), args
        assert err.count("\n") == 1 and why in err, err
    code, _, err = run(capsys, "offsets", str(tmp_path))
    assert code == 2 and "not a lake" in err


# ------------------------------------------------------------------------ seglake history
def test_history_is_a_readable_table(capsys, lake) -> None:
    from seglake.lake.catalog import Catalog

    code, out, _ = run(capsys, "history", lake)
    assert code == 0
    lines = out.splitlines()
    header, rule, *rows = lines
    assert header.split() == [
        "version",
        "committed",
        "(UTC)",
        "operation",
        "run",
        "id",
        "segments",
        "+",
        "segments",
        "-",
        "input",
    ]
    assert set(rule.replace(" ", "")) == {"-"}
    entries = Catalog(lake).history()
    assert len(rows) == len(entries)
    for line, h in zip(rows, entries, strict=True):
        assert line.split()[0] == f"{h.version:,}"
        assert h.timestamp.strftime("%Y-%m-%d %H:%M:%S") in line
        if h.run_id:
            assert h.run_id in line
    register = next(r for r in rows if "commit" in r)
    segments = len(Catalog(lake).segments())
    assert f" {segments:,} " in register  # the rows the register commit added
    assert "{" not in out and "[(" not in out  # no Python reprs
    code, out, _ = run(capsys, "history", lake, "--limit", "1")
    assert len(out.splitlines()) == 3


# ------------------------------------------------------------------ consume --formatter (kcat)
def _fixture_consume(capsys, fixtures_dir, fmt: str, n: int = 3) -> bytes:
    cmd = [
        sys.executable,
        "-m",
        "seglake.cli.main",
        "consume",
        str(fixtures_dir / "first-0"),
        "--topic",
        "first",
        "--max-messages",
        str(n),
        "--formatter",
        fmt,
    ]
    done = subprocess.run(cmd, capture_output=True, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_kcat_format_string(fixtures_dir, capsys) -> None:
    """Each kcat token against the records as kafka-python decodes them."""
    from tests.compat.test_fixture_lookups import brute

    _offs, _ts, rows, _s, _e = brute("first-0")
    got = _fixture_consume(capsys, fixtures_dir, r"%t|%p|%o|%T|%k|%K|%s|%S|%h|%%\t\x41\66\n")
    want = b""
    for off, ts, key, value, headers in rows[:3]:
        klen = -1 if key is None else len(key)
        vlen = -1 if value is None else len(value)
        h = b",".join(k.encode() + b"=" + (b"NULL" if v is None else v) for k, v in headers)
        want += b"first|0|%d|%d|%s|%d|%s|%d|%s|%%\tAB\n" % (
            off,
            ts,
            key or b"",
            klen,
            value or b"",
            vlen,
            h,
        )
    assert got == want
    assert _fixture_consume(capsys, fixtures_dir, "%R", 1) == len(rows[0][3]).to_bytes(4, "big")


def test_kcat_headers_and_nulls() -> None:
    from seglake.cli.consume import Formatter

    t = pa.Table.from_pylist(
        [
            {
                "offset": 7,
                "timestamp": 1700000000000,
                "timestamp_type": 0,
                "key": None,
                "value": None,
                "headers": [{"key": "a", "value": b"1"}, {"key": "b", "value": None}],
            },
            {
                "offset": 8,
                "timestamp": 1,
                "timestamp_type": 0,
                "key": b"k",
                "value": b"",
                "headers": [],
            },
        ]
    )
    f = Formatter.from_properties([], "%o:[%k]%K[%s]%S{%h}\\n")
    assert f.format("t", 3, t) == b"7:[]-1[]-1{a=1,b=NULL}\n8:[k]1[]0{}\n"


@pytest.mark.parametrize(
    "fmt, why", [("%q", "unsupported formatter %q"), ("%s%", "a % at the end"), ("xyz", "kcat")]
)
def test_kcat_format_errors(fmt, why) -> None:
    from seglake.cli.consume import Formatter
    from seglake.errors import ConfigError

    with pytest.raises(ConfigError, match=why.replace("%", "%")):
        Formatter.from_properties([], fmt)


# ----------------------------------------------------------- .properties by Java's rules
PROPERTIES = (
    "# comment\n"
    "  ! another comment\n"
    "\n"
    "plain=1\n"
    "colon:2\n"
    "space 3\n"
    "  spaced   =   4   \n"
    "tab\t\t5\n"
    "empty=\n"
    "lonely\n"
    "multi = a,\\\n"
    "        b,\\\n"
    "        c\n"
    "esc\\ aped\\=key = v\\u00e9\\tx\\n\\\\y\n"
    "uni\\u0041 = \\u263A\n"
    "two==x\n"
    "sep=:x\n"
    "# a comment ending in a backslash does not continue \\\n"
    "after.comment=ok\n"
    "even = ends in two \\\\\\\\\n"
    "next=line\n"
    "\\#not.comment=hash\n"
    "dup=first\n"
    "dup=second\n"
    "win.line=crlf\r\n"
    "mac.line=cr\r"
    "last=\\\n"
)


def _java_properties(path: Path, tmp_path: Path) -> dict[str, str]:
    """java.util.Properties.load (a Reader, UTF-8) of ``path``, keys and values in hex."""
    src = tmp_path / "Load.java"
    src.write_text(
        "import java.io.*; import java.nio.charset.StandardCharsets; import java.util.*;\n"
        "public class Load { public static void main(String[] a) throws Exception {\n"
        "  Properties p = new Properties();\n"
        "  try (Reader r = new InputStreamReader(new FileInputStream(a[0]), "
        "StandardCharsets.UTF_8)) { p.load(r); }\n"
        "  for (String k : new TreeSet<>(p.stringPropertyNames())) {\n"
        "    System.out.println(HexFormat.of().formatHex(k.getBytes(StandardCharsets.UTF_8))"
        ' + " " + HexFormat.of().formatHex(p.getProperty(k).getBytes(StandardCharsets.UTF_8)));'
        "\n  } } }\n"
    )
    out = subprocess.run(
        ["java", str(src), str(path)], capture_output=True, text=True, check=True, timeout=120
    ).stdout
    pairs = (line.split(" ") for line in out.splitlines())
    return {bytes.fromhex(k).decode(): bytes.fromhex(v[0] if v else "").decode() for k, *v in pairs}


def test_properties_equal_java(tmp_path) -> None:
    if shutil.which("java") is None:
        pytest.skip("no java here: Java's Properties.load is the oracle")
    path = tmp_path / "all.properties"
    path.write_bytes(PROPERTIES.encode())
    java = _java_properties(path, tmp_path)
    assert read_properties(path) == java
    assert java["multi"] == "a,b,c" and java["esc aped=key"] == "vé\tx\n\\y"  # oracle sanity


def test_properties_known_values() -> None:
    got = parse_properties(PROPERTIES)
    assert got["plain"] == "1" and got["colon"] == "2" and got["space"] == "3"
    assert got["spaced"] == "4   " and got["tab"] == "5" and got["lonely"] == ""
    assert got["uniA"] == "\u263a" and got["two"] == "=x" and got["dup"] == "second"


def test_properties_bad_unicode_escape_names_the_line(tmp_path) -> None:
    from seglake.errors import ConfigError

    path = tmp_path / "bad.properties"
    path.write_text("ok=1\nlog.segment.bytes=\\u12G4\n")
    with pytest.raises(ConfigError, match=r"bad.properties:2: malformed \\uxxxx"):
        read_properties(path)


# ----------------------------------------------------------- --version, did you mean
def test_version(capsys) -> None:
    from importlib.metadata import version

    code, out, _ = run(capsys, "--version")
    assert (code, out) == (0, f"seglake {version('seglake')}\n")


@pytest.mark.parametrize(
    "argv, hint",
    [
        (["dupm", "x"], "did you mean 'dump'?"),
        (["ofsets", "x"], "did you mean 'offsets'?"),
        (["histroy", "x"], "did you mean 'history'?"),
        (["offsets", "lake", "--tpoic", "x"], "did you mean --topic?"),
        (["consume", "lake", "--tpoic", "x"], "did you mean --topic?"),
        (
            ["consume", "lake", "--topic", "t", "--isolation-level", "read_comitted"],
            "did you mean 'read_committed'?",
        ),
        (["--verison"], "did you mean --version?"),
    ],
)
def test_did_you_mean(capsys, argv, hint) -> None:
    code, out, err = run(capsys, *argv)
    assert (code, out) == (2, "")
    assert err.count("\n") == 1 and hint in err, err


def test_no_hint_for_far_off_names(capsys) -> None:
    code, _, err = run(capsys, "zzzzzz")
    assert code == 2 and "did you mean" not in err and "invalid choice" in err


def test_jobs_get_the_hint_too(capsys) -> None:
    from seglake.cli.jobargs import extract_parser

    with pytest.raises(SystemExit):
        extract_parser().parse_args(["--root", "r", "--topic", "t", "--outptu", "o"])
    assert "did you mean --output?" in capsys.readouterr().err
