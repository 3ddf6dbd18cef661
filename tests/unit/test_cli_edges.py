"""Every ``seglake`` command tried as a new user would (issue 15 item 5): odd numbers,
paths that are not what the command expects, damaged settings files. Each case here
failed before (a traceback, a second line, exit 0 with nothing done, or a lake created
at a mistyped path); each now ends in one line naming the value, exit 2
(RELIABILITY.md: "Bad command-line values")."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from seglake.cli.main import main

BROKER = "first-0"  # 11 records, offsets 0..10


@pytest.fixture
def world(tmp_path: Path, fixtures_dir: Path) -> Path:
    """``part/first-0`` (a broker partition), ``lake`` (it registered), ``notes.txt``,
    ``bin.properties`` (binary), ``odd/0.log`` (a directory without segments)."""
    shutil.copytree(fixtures_dir / BROKER, tmp_path / "part" / BROKER)
    assert main(["register", "--root", str(tmp_path / "lake"), str(tmp_path / "part")]) == 0
    (tmp_path / "notes.txt").write_text("hello")
    (tmp_path / "bin.properties").write_bytes(b"\x89\xf9\x00\x01")
    (tmp_path / "odd").mkdir()
    (tmp_path / "odd" / "0.log").write_bytes(b"x")
    return tmp_path


def _one_line(capsys, rc: int) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1, (rc, err)
    assert "Traceback" not in err[0] and ": error: " in err[0]
    return err[0]


def _run(argv: list[str]) -> int:
    try:
        return main(argv)
    except SystemExit as exc:  # argparse's errors
        return int(exc.code or 0)


P, L = f"part/{BROKER}", "lake"
CASES = {  # argv ({w}: the world) -> what the line names
    "dump max-bytes -1": (
        ["dump", "--max-bytes", "-1", f"{P}/00000000000000000000.log"],
        "--max-bytes: -1",
    ),
    "read max-records -3": (["read", P, "--offset", "0", "--max-records", "-3"], "-3"),
    "read offset -1": (["read", P, "--offset", "-1"], "argument --offset: -1 is outside"),
    "register nothing": (["register", "--root", "nolake", "odd"], "odd: no topic to register"),
    "cleanup older-than inf": (["cleanup", "--older-than", "inf", L], "inf"),
    "cleanup older-than nan": (["cleanup", "--older-than", "nan", L], "nan"),
    "cleanup older-than -1": (["cleanup", "--older-than", "-1", L], "-1"),
    "recover interval -1": (["recover", "--index-interval-bytes", "-1", P], "-1"),
    "retention now -1": (["retention", "--retention-ms", "1", "--now-ms", "-1", L], "-1"),
    "consume offset 2^63": (
        ["consume", L, "--topic", "first", "--partition", "0", "--offset", str(2**63)],
        str(2**63),
    ),
    "consume from 2^63": (
        ["consume", L, "--topic", "first", "--from-timestamp", str(2**63)],
        str(2**63),
    ),
    "consume from after to": (
        ["consume", L, "--topic", "first", "--from-timestamp", "2030-01-01", "--to-timestamp", "5"],
        "is after --to-timestamp",
    ),
    "offset-for-time 2^64": (["offset-for-time", P, str(2**64)], str(2**64)),
    "register root is a file": (["register", "--root", "notes.txt", "part"], "notes.txt"),
    "retention unknown partition": (
        ["retention", "--log-start-offset", "first:3:1", "--dry-run", L],
        "first:3:1: topic 'first' has partitions [0]",
    ),
    "retention unknown topic": (
        ["retention", "--log-start-offset", "nope:0:1", "--dry-run", L],
        "no topic 'nope'",
    ),
    "retention past the log end": (
        ["retention", "--log-start-offset", "first:0:12", "--dry-run", L],
        "log end offset 11",
    ),
    "retention binary conf-file": (
        ["retention", "--retention-ms", "1", "--conf-file", "bin.properties", L],
        "bin.properties: not a text .properties file",
    ),
    "retention missing lake": (["retention", "--retention-ms", "1", "nolake"], "nolake"),
    "config missing lake": (["config", "nolake"], "nolake: not a lake"),
    "config set on a missing lake": (
        ["config", "--topic", "t", "--set", "segment.bytes=2000", "nolake"],
        "nolake: not a lake",
    ),
    "recover a dir without segments": (["recover", "odd"], "other files: ['0.log']"),
    "recover a directory of partitions": (["recover", "part"], "not a partition or a lake"),
    "recover a file": (["recover", "notes.txt"], "notes.txt: is a file"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_one_line_and_exit_2(world: Path, capsys, monkeypatch, case: str) -> None:
    argv, named = CASES[case]
    monkeypatch.chdir(world)
    capsys.readouterr()
    line = _one_line(capsys, _run(argv))
    assert named in line
    assert not (world / "nolake").exists()  # nothing created at a mistyped path


def test_a_negative_index_interval_is_refused_by_the_builder() -> None:
    """``recover --index-interval-bytes -1`` ran until the machine killed it (old code):
    the rebuild takes no negative interval, whoever asks."""
    from seglake.errors import ConfigError
    from seglake.storage.index_builder import IndexBuilder

    with pytest.raises(ConfigError, match=r"index\.interval\.bytes -1"):
        IndexBuilder(0, index_interval_bytes=-1)
    assert IndexBuilder(0, index_interval_bytes=0) is not None
