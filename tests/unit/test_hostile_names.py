"""Hostile names and paths (issue 29, items 1 and 4): every name that becomes a path
follows one rule (``storage/naming.validate_name``) and every delete goes through one
guard (``lake_paths.check_delete``). Each test keeps sentinel directories beside and above the
lake and checks that they, and the lake's committed files, are intact afterwards.

On the old main: the run-id tests fail (``register --run-id ../../../x`` exited 0 and
deleted the outside directory; ``..`` deleted partition directories), the symlinked
manifest entry deleted the outside file, a manifest of the wrong shape was a traceback
(``AttributeError`` / ``TypeError``), two cleanups at once a ``FileNotFoundError``
traceback in the loser.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs
import pytest

from seglake import fs as lakefs
from seglake import lake_paths
from seglake.cli.jobargs import PARSERS, check_before_spark, precheck
from seglake.cli.main import main
from seglake.errors import InvalidNameError, InvalidTopicError, OutsideLakeError
from seglake.lake.catalog import Catalog
from seglake.lake.garbage import collect, retire
from seglake.lake.handle import LakeHandle
from seglake.lake.register import register
from seglake.lake.retention import RetentionOptions, apply_retention
from seglake.lake.rows import rows_table, segment_row
from seglake.lake.staging import cleanup, discard_staging, publish_pending
from seglake.lake_paths import RETIRED_DIR
from seglake.storage.naming import row_copies, run_dir, validate_name, validate_run_id
from seglake.storage.recovery import recover_segment
from seglake.storage.retention import RetentionRules
from tests.unit.test_recovery import INTERVAL, logs, make_lake, pristine  # noqa: F401

BAD_RUN_IDS = ["..", "../../../x", "../../x", "a/b", "", ".", "/tmp/x", "a\nb", "x" * 250]
OLD = "1"  # retired_at_ms of a manifest long due


@pytest.fixture
def lake(tmp_path: Path, pristine: Path) -> Path:  # noqa: F811
    """A committed lake of one partition at ``tmp/a/b/c/lake``; a sentinel directory
    ``x`` (holding a file ``keep``) at every level above it, one ``out`` beside it."""
    root = tmp_path / "a" / "b" / "c" / "lake"
    root.parent.mkdir(parents=True)
    make_lake(root, pristine)
    for d in (tmp_path, tmp_path / "a", tmp_path / "a" / "b", tmp_path / "a" / "b" / "c"):
        (d / "x").mkdir()
        (d / "x" / "keep").write_bytes(b"sentinel")
    (root.parent / "out").mkdir()
    (root.parent / "out" / "00000000000000000000.log").write_bytes(b"outside")
    return root


def _sentinels(root: Path) -> list[Path]:
    tmp = root.parents[3]
    return [
        *(d / "x" / "keep" for d in (tmp, tmp / "a", tmp / "a" / "b", tmp / "a" / "b" / "c")),
        root.parent / "out" / "00000000000000000000.log",
    ]


def _files(root: Path) -> dict[str, bytes]:
    """Every file of the lake but its catalog, by relative path."""
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.is_symlink() and p.relative_to(root).parts[0] != "_catalog"
    }


def _intact(root: Path, before: dict[str, bytes], version: int) -> None:
    """The sentinels survive, the lake's files and catalog version are unchanged and
    every committed segment still reads."""
    for s in _sentinels(root):
        assert s.exists(), f"{s} was deleted"
    assert _files(root) == before
    cat = Catalog(str(root))
    assert cat.version() == version
    for r in cat.segments().to_pylist():
        assert (root / r["path"]).stat().st_size == r["size_bytes"]


def _exit(argv: list[str]) -> int:
    """``seglake ARGV``'s exit status (argparse's refusals exit from inside)."""
    try:
        return main(argv)
    except SystemExit as exc:
        return int(exc.code or 0)


def _broker(tmp_path: Path, pristine: Path, topic: str = "t") -> Path:  # noqa: F811
    broker = tmp_path / "broker"
    shutil.copytree(pristine, broker / f"{topic}-0")
    return broker


# -- one rule for names that become paths ---------------------------------------------


@pytest.mark.parametrize("bad", BAD_RUN_IDS)
def test_register_cli_refuses_a_run_id_that_is_a_path(
    lake: Path,
    pristine: Path,  # noqa: F811
    tmp_path: Path,
    bad: str,
    capsys,
) -> None:
    """Old main: ``..`` deleted the partition directory and ``_staging``; ``../../../x``
    exited 0 after deleting ``tmp/a/x``."""
    broker = _broker(tmp_path, pristine, "u")
    before, version = _files(lake), Catalog(str(lake)).version()
    assert _exit(["register", "--root", str(lake), str(broker), "--run-id", bad]) == 2
    err = capsys.readouterr().err.strip()
    assert "run id" in err and err.count("\n") == 0, err
    _intact(lake, before, version)


@pytest.mark.parametrize("bad", BAD_RUN_IDS)
def test_lake_functions_refuse_a_bad_run_id(
    lake: Path,
    pristine: Path,  # noqa: F811
    tmp_path: Path,
    bad: str,
) -> None:
    broker = _broker(tmp_path, pristine, "u")
    before, version = _files(lake), Catalog(str(lake)).version()
    calls = [
        lambda: register(LakeHandle.open(str(lake)), str(broker), run_id=bad),
        lambda: apply_retention(
            LakeHandle.open(str(lake)),
            RetentionRules(log_start_offsets={("t", 0): 0}),
            RetentionOptions(run_id=bad),
        ),
        lambda: publish_pending(LakeHandle.open(str(lake)), bad),
        lambda: discard_staging(LakeHandle.open(str(lake)), bad),
        lambda: Catalog(str(lake)).run_committed(bad),
        lambda: run_dir(str(lake), "_staging", bad),
    ]
    if bad:  # a row without a run id has no staged or retired copy
        calls.append(lambda: row_copies(str(lake), "t-0/00000000000000000000.log", bad))
    from seglake.lake.compaction import CompactOptions, run_compaction

    calls.append(lambda: run_compaction(LakeHandle.open(str(lake)), CompactOptions(run_id=bad)))
    for call in calls:
        with pytest.raises(InvalidNameError, match="run id"):
            call()
    _intact(lake, before, version)


def test_ingest_refuses_a_bad_run_id_before_spark(lake: Path) -> None:
    """The notebook's and the job's ``ingest``: the run id is checked before the
    session or the input is touched (``None`` here)."""
    pytest.importorskip("pyspark")
    from seglake.spark.ingest import ingest

    before, version = _files(lake), Catalog(str(lake)).version()
    for bad in ("../../x", ".."):
        with pytest.raises(InvalidNameError, match="run id"):
            ingest(None, None, str(lake), run_id=bad)  # type: ignore[arg-type]
    _intact(lake, before, version)


@pytest.mark.parametrize("job", ["ingest", "compact", "recover", "retention"])
def test_job_arguments_refuse_a_bad_run_id(lake: Path, job: str, capsys) -> None:
    """Old main: accepted, and ingest / compact committed, then deleted ``../../x``."""
    argv = {
        "ingest": ["--input", str(lake), "--root", str(lake), "--topic", "t"],
        "compact": ["--root", str(lake)],
        "recover": ["--root", str(lake)],
        "retention": ["--root", str(lake), "--retention-ms", "1"],
    }[job] + ["--run-id", "../../x"]
    assert precheck([job, *argv]) == 2
    assert "run id '../../x'" in capsys.readouterr().err
    args = PARSERS[job]().parse_args(argv[:-2])
    args.run_id = "../../x"  # a Namespace made some other way: check_before_spark refuses
    with pytest.raises(InvalidNameError, match=r"run id '\.\./\.\./x' has characters"):
        check_before_spark(job, args)


def test_one_rule_names_what_and_the_value() -> None:
    assert validate_name("stream-1a.b_c", "stage") == "stream-1a.b_c"
    for bad, why in (
        ("..", "'..' is not allowed"),
        ("", "is empty"),
        ("a/b", "characters outside"),
        ("x" * 250, "250 characters, more than 249"),
        (3, "must be a string"),
    ):
        with pytest.raises(InvalidNameError, match=f"^stage .*{why}|^stage {why}") as err:
            validate_name(bad, "stage")
        assert "\n" not in str(err.value)
    with pytest.raises(InvalidTopicError, match=r"topic name '\.\./etc'"):  # the same rule
        from seglake.storage.naming import validate_topic

        validate_topic("../etc")
    assert validate_run_id("register-0a1b2c3d4e5f") == "register-0a1b2c3d4e5f"


def test_streaming_query_ids_follow_the_rule(tmp_path: Path) -> None:
    """A query id read from a checkpoint (or given) names the batches' run ids."""
    from seglake.lake.stream_commit import stream_run_id

    assert stream_run_id("0f3c-9a", 4) == "stream-0f3c-9a-4"
    for bad in ("..", "../../x", "", "a b"):
        with pytest.raises(InvalidNameError, match="streaming query id"):
            stream_run_id(bad, 1)
    pytest.importorskip("pyspark")
    from seglake.spark.stream_sink import query_id

    (tmp_path / "metadata").write_text(json.dumps({"id": "../../x"}))
    with pytest.raises(InvalidNameError, match=r"metadata: streaming query id '\.\./\.\./x'"):
        query_id(str(tmp_path))
    (tmp_path / "metadata").write_text(json.dumps({"id": "7d2f-11"}))
    assert query_id(str(tmp_path)) == "7d2f-11"


def test_illegal_topic_names_are_refused_everywhere(lake: Path, capsys) -> None:
    """Holds on the old main too (a regression guard)."""
    before, version = _files(lake), Catalog(str(lake)).version()
    for bad in ("..", "../etc", "a/b", ""):
        args = PARSERS["extract"]().parse_args(
            ["--root", str(lake), "--topic", bad, "--output", str(lake.parent / "o")]
        )
        with pytest.raises(InvalidTopicError):
            check_before_spark("extract", args)
        with pytest.raises(InvalidTopicError):
            register(LakeHandle.open(str(lake)), str(lake.parent / "x"), topics=[bad])
        with pytest.raises(InvalidTopicError):
            Catalog(str(lake)).segments(bad)
    assert main(["config", str(lake), "--topic", "../etc", "--set", "retention.ms=1"]) == 2
    capsys.readouterr()
    _intact(lake, before, version)


# -- one guard for deletes --------------------------------------------------------------


def test_check_delete_refuses_what_is_not_strictly_inside(lake: Path) -> None:
    fs, base = lakefs.resolve(str(lake))
    (lake / "evil-0").symlink_to(lake.parent / "out", target_is_directory=True)
    (lake / "t-0" / "link.log").symlink_to(lake.parent / "out" / "00000000000000000000.log")
    ok = [
        lakefs.join(base, "t-0", "00000000000000000000.log"),
        lakefs.join(base, "evil-0"),  # the link itself may go, not what it leads to
        lakefs.join(base, "t-0", "link.log"),
        lakefs.join(base, "_staging", "r1"),
    ]
    for path in ok:
        assert lake_paths.check_delete(fs, base, path) == path
    refused = {
        lakefs.join(base, "evil-0", "00000000000000000000.log"): "not inside the lake root",
        base: "the lake root itself",
        f"{base}/t-0/..": "the lake root itself",
        f"{base}/t-0/../..": "not inside the lake root",
        str(lake.parent / "out"): "not inside the lake root",
        lakefs.join(base, "_catalog", "part-0.parquet"): "in the lake's catalog",
        lakefs.join(base, "_catalog"): "in the lake's catalog",
    }
    for path, why in refused.items():
        with pytest.raises(OutsideLakeError, match=f"refused to delete .*{why}"):
            lakefs.delete_file(fs, path, root=base)
        with pytest.raises(OutsideLakeError):
            lakefs.delete_dir(fs, path, root=base)
    lake_paths.check_delete(fs, base, lakefs.join(base, "_catalog", "x.parquet"), catalog=True)
    lake_paths.check_delete(fs, base, base, root_itself=True)
    _sentinels(lake)[-1].read_bytes()


def test_check_delete_on_an_object_store() -> None:
    fs = pafs._MockFileSystem()
    base = "bucket/lake"
    assert lake_paths.check_delete(fs, base, "bucket/lake/t-0/0.log") == "bucket/lake/t-0/0.log"
    for key in (
        "bucket/lake",
        "bucket/lake/../other/0.log",
        "bucket/lake/t-0/../../x",
        "bucket/lake//x",
        "bucket/lakeside/0.log",
        "bucket/other/0.log",
        "bucket/lake/./x",
        "bucket/lake/_catalog/_delta_log/0.json",
    ):
        with pytest.raises(OutsideLakeError):
            lake_paths.check_delete(fs, base, key)


def _retired_manifest(root: Path, doc: object, name: str = "00000000000000000009-aa.json"):
    (root / RETIRED_DIR).mkdir(exist_ok=True)
    path = root / RETIRED_DIR / name
    path.write_text(json.dumps(doc))
    return path


@pytest.mark.parametrize("command", ["cleanup", "retention"])
def test_a_manifest_entry_through_a_symlinked_directory_deletes_nothing_outside(
    lake: Path, command: str, capsys
) -> None:
    """Old main: ``cleanup`` deleted ``out/00000000000000000000.log`` through
    ``<lake>/evil-0 -> ../out``."""
    (lake / "evil-0").symlink_to(lake.parent / "out", target_is_directory=True)
    os.utime(_sentinels(lake)[-1], (0, 0))  # older than its retirement: not reused
    manifest = _retired_manifest(
        lake, {"version": 1, "retired_at_ms": 1000, "paths": ["evil-0/00000000000000000000.log"]}
    )
    before, version = _files(lake), Catalog(str(lake)).version()
    argv = (
        ["cleanup", str(lake), "--older-than", "0"]
        if command == "cleanup"
        else ["retention", str(lake), "--retention-ms", str(2**62)]  # deletes no segment
    )
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "refused to delete" in err and "not inside the lake root" in err, err
    assert manifest.exists()
    _intact(lake, before, version)


def test_symlinked_segment_files_delete_the_link_only(lake: Path, tmp_path: Path) -> None:
    """A lake segment that is a symlink to a file outside: retention and cleanup delete
    the link, never the file it points at (holds on the old main too)."""
    segs = logs(lake / "t-0")
    outside = tmp_path / "a" / "b" / "c" / "seg.log"
    shutil.move(segs[0], outside)
    segs[0].symlink_to(outside)
    rules = RetentionRules(log_start_offsets={("t", 0): int(segs[1].stem)})
    apply_retention(LakeHandle.open(str(lake)), rules, RetentionOptions(delete_delay_ms=0))
    assert not segs[0].is_symlink() and outside.exists()
    assert logs(lake / "t-0") == segs[1:]


def test_recover_follows_no_symlinked_segment_out(lake: Path, tmp_path: Path) -> None:
    """``recover`` of a lake whose segment is a symlink to a file outside with a torn
    tail: the lake's file is rewritten, the outside one untouched, and a ``.deleted``
    leftover that is a symlink is removed as a link (holds on the old main too)."""
    segs = logs(lake / "t-0")
    outside = tmp_path / "a" / "b" / "c" / "x" / "leftover"
    outside.write_bytes(b"not the lake's")
    (lake / "t-0" / f"{segs[0].stem}.index.deleted").symlink_to(outside)
    assert main(["recover", str(lake)]) == 0
    assert outside.read_bytes() == b"not the lake's"
    assert not (lake / "t-0" / f"{segs[0].stem}.index.deleted").exists()


def test_register_survives_a_symlink_loop(lake: Path, pristine: Path, tmp_path: Path) -> None:  # noqa: F811
    """A broker directory holding symlink loops (a directory pointing at itself, a
    partition directory pointing at its parent): registered or skipped, no hang, no
    traceback, nothing outside touched (holds on the old main too)."""
    broker = _broker(tmp_path, pristine, "u")
    (broker / "loop-0").symlink_to(broker, target_is_directory=True)
    (broker / "u-0" / "self").symlink_to(broker / "u-0", target_is_directory=True)
    (broker / "w-0").symlink_to(broker / "w-0")  # a dangling loop
    rep = register(LakeHandle.open(str(lake)), str(broker), topics=["u"])
    assert rep.rows > 0
    for s in _sentinels(lake):
        assert s.exists()


def test_catalog_rows_that_leave_the_lake_are_refused(lake: Path) -> None:
    """Absolute or ``..`` (also URL-encoded) row paths are refused (holds on the old main
    too); a row's run id naming ``_staging/<run>`` follows the name rule (new)."""
    from seglake.lake.rows import rows_table

    cat = Catalog(str(lake))
    row = cat.segments().to_pylist()[0]
    row.pop("committed_at")
    for path in ("/etc/passwd", "../x/00000000000000000000.log", "t-0/%2e%2e/x.log"):
        with pytest.raises(InvalidTopicError, match="unsafe lake path"):
            lake_paths.safe_join(str(lake), path)
        bad = rows_table([{**row, "path": path, "base_offset": 10**9, "next_offset": 10**9 + 1}])
        with pytest.raises(Exception, match=r"unsafe lake path|is not"):
            cat.commit(bad, "r-bad")
    with pytest.raises(
        InvalidNameError, match=r"t-0/\d{20}\.log: the catalog row's run id '\.\./x'"
    ):
        row_copies(str(lake), row["path"], "../x")


def test_the_notebook_refuses_a_catalog_row_whose_run_id_leaves_the_lake(lake: Path) -> None:
    """A catalog row written past seglake's checks with run id ``../../x``: the notebook's
    read names the row and its run id in one line instead of looking for the row's staged
    or retired copy at ``<root>/_staging/../../x/...`` (old main: a plain "no such file")."""
    from deltalake import write_deltalake

    import seglake

    rows = Catalog(str(lake)).segments()
    rows = rows.set_column(
        rows.schema.get_field_index("run_id"), "run_id", pa.array(["../../x"] * rows.num_rows)
    )
    write_deltalake(str(lake / "_catalog"), rows, mode="overwrite")
    first = rows.column("path").to_pylist()[0]
    (lake / first).unlink()  # its final file gone: a reader looks for its other copies
    with pytest.raises(InvalidNameError, match=r"the catalog row's run id '\.\./\.\./x'") as err:
        seglake.open(str(lake)).partition("t", 0).read(0, 3, as_="arrow")
    assert first in str(err.value) and "\n" not in str(err.value)
    for s in _sentinels(lake):
        assert s.exists()


# -- _retired/ manifests of the wrong shape ----------------------------------------------


@pytest.mark.parametrize(
    ("doc", "why"),
    [
        ([], "is a JSON list, not an object"),
        ("x", "is a JSON str, not an object"),
        ({"retired_at_ms": "1", "paths": []}, "retired_at_ms is '1', not an integer"),
        ({"retired_at_ms": 1, "paths": "t-0/x.log"}, "paths is str, not a list"),
        ({"retired_at_ms": 1, "paths": [3]}, "lake path must be a string"),
        ({"retired_at_ms": 1, "paths": ["../../x/keep"]}, "has a '..' component"),
        ({"retired_at_ms": 1, "paths": ["/etc/passwd"]}, "is absolute"),
        ({"retired_at_ms": 1, "version": [], "paths": []}, "version is [], not an integer"),
    ],
)
@pytest.mark.parametrize("command", ["cleanup", "retention"])
def test_a_manifest_of_the_wrong_shape_is_one_line_and_changes_nothing(
    lake: Path, doc: object, why: str, command: str, capsys
) -> None:
    """Old main: ``AttributeError`` / ``TypeError`` tracebacks (or, for ``..``, a
    refusal after other files were already deleted)."""
    segs = logs(lake / "t-0")
    retire(
        LakeHandle.open(str(lake)), [f"t-0/{segs[0].name}"], version=1, now_ms=1
    )  # due: would go
    (lake / "_staging" / "old-run").mkdir(parents=True)
    (lake / "_staging" / "old-run" / "f").write_bytes(b"uncommitted")
    os.utime(lake / "_staging" / "old-run" / "f", (0, 0))
    bad = _retired_manifest(lake, doc, "00000000000000000099-bb.json")
    before, version = _files(lake), Catalog(str(lake)).version()
    argv = (
        ["cleanup", str(lake), "--older-than", "0"]
        if command == "cleanup"
        else ["retention", str(lake), "--log-start-offset", f"t:0:{segs[1].stem}"]
    )
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and str(bad) in err and why in err, err
    _intact(lake, before, version)


# -- two cleanups at once ----------------------------------------------------------------


def _garbage(lake: Path, pristine: Path, n: int = 40) -> None:  # noqa: F811
    """Due retired files, uncommitted runs' staging and a committed run left staged."""
    topic = f"s{len(list(lake.glob('s*-0')))}"
    staged = lake / "_staging" / f"committed-{topic}" / f"{topic}-0"
    shutil.copytree(pristine, staged)
    fs, _ = lakefs.resolve(str(lake))
    rows = [
        segment_row(topic, 0, recover_segment(fs, str(p), interval=INTERVAL, dry_run=True),
                    f"{topic}-0/{p.name}")
        for p in logs(staged)
    ]  # fmt: skip
    Catalog(str(lake)).commit(rows_table(rows), f"committed-{topic}")  # not published yet
    for i in range(n):
        d = lake / "g-0"
        d.mkdir(exist_ok=True)
        (d / f"{i:020d}.log").write_bytes(b"x")
        os.utime(d / f"{i:020d}.log", (0, 0))  # older than its retirement
        retire(LakeHandle.open(str(lake)), [f"g-0/{i:020d}.log"], version=1, now_ms=1)
        run = lake / "_staging" / f"dead-{i}" / "t-0"
        run.mkdir(parents=True)
        (run / "00000000000000000000.log").write_bytes(b"y")
        os.utime(run / "00000000000000000000.log", (0, 0))


def test_two_cleanups_at_once_are_idempotent(lake: Path, pristine: Path) -> None:  # noqa: F811
    """Two processes clean the same lake at once: both exit 0 and the lake ends as one
    cleanup leaves it. Old main: the loser's ``FileNotFoundError`` traceback."""
    _garbage(lake, pristine)
    before, version = _files(lake), Catalog(str(lake)).version()
    published = {k.split("/", 2)[2]: v for k, v in before.items() if k.startswith("_staging/c")}
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    cmd = [sys.executable, "-m", "seglake.cli.main", "cleanup", str(lake), "--older-than", "0"]
    procs = [
        subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=120) for p in procs]
    for p, (_, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err.decode()
    kept = {k: v for k, v in before.items() if not k.startswith(("_staging/", "g-0/", RETIRED_DIR))}
    _intact(lake, {**kept, **published}, version)
    assert not list((lake / "g-0").iterdir())
    assert not (lake / "_staging").exists() or not list((lake / "_staging").iterdir())


def test_cleanups_racing_in_threads_are_idempotent(lake: Path, pristine: Path) -> None:  # noqa: F811
    """The same race, many times over in threads started together."""

    def run(start: threading.Barrier, errors: list[BaseException]) -> None:
        start.wait()
        try:
            cleanup(LakeHandle.open(str(lake)), older_than_s=0)
        except BaseException as exc:
            errors.append(exc)

    for _ in range(3):
        _garbage(lake, pristine, 20)
        start = threading.Barrier(3)
        errors: list[BaseException] = []
        threads = [threading.Thread(target=run, args=(start, errors)) for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert errors == []
        assert not list((lake / "g-0").iterdir()) and not list((lake / "_staging").iterdir())
        for r in Catalog(str(lake)).segments().to_pylist():
            assert (lake / r["path"]).stat().st_size == r["size_bytes"]
        assert collect(LakeHandle.open(str(lake)), older_than_ms=0).deleted == []
