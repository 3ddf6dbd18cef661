"""Where the wall time of one ingest goes: a timeline of driver phases, Spark jobs and
tasks, and the Python workers' CPU, next to a parquet write of the same input.

    .venv/bin/python bench/ingest_timeline.py [--records N] [--codecs none,lz4] [--repeat R]

One SparkSession (``local[2]``), warmed up like bench/ingest.py; then R rounds of: the
parquet peer, then one seglake ingest (the direct path). For each run:

- driver spans: wall time of each step of ``seglake.spark.ingest.ingest`` (the functions
  it calls are wrapped for the run: stat, catalog reads, splits, count or the one-pass
  check, plan, the write job's ``toArrow``, the one-pass rebase, verify, staged check,
  commit, publish);
- Spark: each job's submission and completion, each task's launch and duration (the JVM's
  status store);
- workers: each count/write task's wall span and CPU seconds (``process_time`` of the
  worker), the part spent reading input (the read generator) and compressing (the
  records-block compressor), written by the task to a side file;
- cores busy: CPU seconds of the JVM, its Python descendants and the driver per 100 ms.

Prints the timeline (seconds from the start of the run) and a summary per run.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path[:0] = [str(Path(__file__).resolve().parent)]

from ingest import (  # noqa: E402
    Periodic,
    _cpu_s,
    _descendants,
    find_jvm,
    run_parquet,
    run_seglake,
    write_input,
)

SPANS: list[tuple[str, float, float]] = []


def _span(name: str, fn):
    def wrapped(*a, **k):
        t0 = time.time()
        try:
            return fn(*a, **k)
        finally:
            SPANS.append((name, t0, time.time()))

    wrapped.__wrapped__ = fn
    return wrapped


def _task_wrapper(factory, kind: str, log: str):
    """``factory(...)`` -> mapInArrow function; the returned one also logs the task."""

    def make(*a, **k):
        inner = factory(*a, **k)

        def run(batches):
            import json as _json
            import os as _os
            import time as _time

            from seglake.record import encoded

            acc = {"read": 0.0, "compress": 0.0, "blocks": 0}

            def reading(it):
                it = iter(it)
                while True:
                    s = _time.thread_time()
                    try:
                        b = next(it)
                    except StopIteration:
                        acc["read"] += _time.thread_time() - s
                        return
                    acc["read"] += _time.thread_time() - s
                    yield b

            orig = encoded.compress

            def compress(*ca, **ck):
                s = _time.thread_time()
                try:
                    return orig(*ca, **ck)
                finally:
                    acc["compress"] += _time.thread_time() - s
                    acc["blocks"] += 1

            encoded.compress = compress
            t0, c0 = _time.time(), _time.process_time()
            try:
                out = list(inner(reading(batches)))
            finally:
                encoded.compress = orig
            rec = dict(
                kind=kind,
                pid=_os.getpid(),
                start=t0,
                end=_time.time(),
                cpu=_time.process_time() - c0,
                **acc,
            )
            with open(log, "a") as f:
                f.write(_json.dumps(rec) + "\n")
            yield from out

        return run

    return make


class CoreSampler(Periodic):
    """CPU seconds of the JVM + its descendants + this driver, sampled every 100 ms."""

    def __init__(self, jvm: int, interval: float = 0.1) -> None:
        super().__init__(interval)
        self.jvm = jvm
        self.samples: list[tuple[float, float]] = []
        self._last: dict[int, float] = {}
        self._total = 0.0

    def _sample(self) -> None:
        for p in [self.jvm, os.getpid(), *_descendants(self.jvm)]:
            c = _cpu_s(p)
            if c is None:
                continue
            self._total += c - self._last.get(p, c if not self.samples else 0.0)
            self._last[p] = c
        self.samples.append((time.time(), self._total))

    def __enter__(self) -> CoreSampler:
        self._sample()
        self._thread.start()
        return self

    def busy(self, t0: float, t1: float) -> float:
        """CPU seconds between ``t0`` and ``t1`` (linear between samples)."""
        ts = [t for t, _ in self.samples]
        cs = [c for _, c in self.samples]
        return float(np.interp(t1, ts, cs) - np.interp(t0, ts, cs))


def _opt(o):
    return o.get() if o.isDefined() else None


def spark_jobs(spark, since_ms: float) -> list[dict]:
    """Jobs (and their tasks) submitted after ``since_ms``, from the JVM's status store."""
    store = spark.sparkContext._jsc.sc().statusStore()
    jobs = store.jobsList(None)
    out = []
    for i in range(jobs.size()):
        j = jobs.apply(i)
        sub = _opt(j.submissionTime())
        if sub is None or sub.getTime() < since_ms:
            continue
        done = _opt(j.completionTime())
        tasks = []
        ids = j.stageIds()
        for s in range(ids.size()):
            td = store.taskList(ids.apply(s), 0, 10_000)
            for t in range(td.size()):
                x = td.apply(t)
                m = _opt(x.taskMetrics())
                tasks.append(
                    dict(
                        stage=ids.apply(s),
                        index=x.index(),
                        launch=x.launchTime().getTime() / 1000,
                        duration=(_opt(x.duration()) or 0) / 1000,
                        run=m.executorRunTime() / 1000 if m else None,
                        jvm_cpu=m.executorCpuTime() / 1e9 if m else None,
                        deser=m.executorDeserializeTime() / 1000 if m else None,
                    )
                )
        out.append(
            dict(
                id=j.jobId(),
                submit=sub.getTime() / 1000,
                done=done.getTime() / 1000 if done else None,
                tasks=sorted(tasks, key=lambda t: t["launch"]),
            )
        )
    return sorted(out, key=lambda j: j["submit"])


def instrument(log: str) -> None:
    """Wrap what ``ingest`` calls (driver spans) and the task factories (worker log)."""
    import pyspark.sql

    from seglake.lake.catalog import Catalog
    from seglake.spark import direct_ingest, ingest_rebase, ingest_tasks
    from seglake.spark import ingest as ing

    for name in (
        "stat_files",
        "cleanup",
        "normalize",
        "plan_ingest",
        "_verify",
        "check_staged",
        "publish_pending",
        "_write",
    ):
        setattr(ing, name, _span(name, getattr(ing, name)))
    for name in ("splits", "count", "write", "normalizer"):
        setattr(direct_ingest, name, _span(f"direct.{name}", getattr(direct_ingest, name)))
    for name in ("one_pass", "rebase"):
        setattr(ingest_rebase, name, _span(f"rebase.{name}", getattr(ingest_rebase, name)))
    for name in ("run_committed", "exists", "log_end_offsets", "commit", "version"):
        setattr(Catalog, name, _span(f"catalog.{name}", getattr(Catalog, name)))
    ing.runs.describe_input = _span("describe_input", ing.runs.describe_input)
    pyspark.sql.DataFrame.toArrow = _span("toArrow", pyspark.sql.DataFrame.toArrow)
    ingest_tasks.count_groups = _task_wrapper(ingest_tasks.count_groups, "count", log)
    ingest_tasks.local_writer = _task_wrapper(ingest_tasks.local_writer, "write", log)


def report(name: str, t0: float, t1: float, cores: CoreSampler, jobs, workers) -> list[str]:
    """The timeline of one run as text lines (seconds from ``t0``)."""
    lines = [f"### {name}: {t1 - t0:.2f} s wall, {cores.busy(t0, t1):.2f} CPU s"]
    ev: list[tuple[float, str]] = []
    for s, a, b in SPANS:
        if a >= t0:
            ev.append((a, f"driver  {s:<22} {a - t0:6.2f} -> {b - t0:6.2f}  ({b - a:.3f} s)"))
    for j in jobs:
        end = (j["done"] or t1) - t0
        ev.append((j["submit"], f"job {j['id']:<4} {'':18} {j['submit'] - t0:6.2f} -> {end:6.2f}"))
        for t in j["tasks"]:
            a = t["launch"]
            ev.append(
                (
                    a,
                    f"  task s{t['stage']}.{t['index']:<3} {'':12} {a - t0:6.2f} -> "
                    f"{a + t['duration'] - t0:6.2f}  (run {t['run']} s, deser {t['deser']} s, "
                    f"JVM thread CPU {t['jvm_cpu']:.2f} s)",
                )
            )
    for w in workers:
        if w["start"] >= t0:
            ev.append(
                (
                    w["start"],
                    f"  worker {w['kind']:<5} pid {w['pid']:<7} {w['start'] - t0:6.2f} -> "
                    f"{w['end'] - t0:6.2f}  ({w['end'] - w['start']:.2f} s; CPU {w['cpu']:.2f} s: "
                    f"read {w['read']:.2f}, compress {w['compress']:.2f} in {w['blocks']} blocks)",
                )
            )
    lines += [text for _, text in sorted(ev)]
    edges = [t0, *(x for j in jobs for x in (j["submit"], j["done"] or t1)), t1]
    lines.append(
        "phases (s, CPU s): "
        + ", ".join(f"{b - a:.2f} ({cores.busy(a, b):.2f})" for a, b in itertools.pairwise(edges))
        + "  [driver before job 1, job 1, gap, job 2, ..., after the last job]"
    )
    busy, step = [], 0.25
    a = t0
    while a < t1:
        busy.append(f"{cores.busy(a, min(a + step, t1)) / step:.1f}")
        a += step
    lines.append(f"cores busy per {step} s: " + " ".join(busy))
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records", type=int, default=2_000_000)
    ap.add_argument(
        "--codecs", default="lz4", help="comma-separated, e.g. none,lz4,lz4@1 (lz4 level 1)"
    )
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args(argv)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    tmp = tempfile.mkdtemp(prefix="seglake-bench-timeline-")
    log = os.path.join(tmp, "workers.jsonl")
    try:
        inp, small = os.path.join(tmp, "input.parquet"), os.path.join(tmp, "small.parquet")
        write_input(args.records, inp)
        write_input(20_000, small)
        from seglake.spark.session import get_session

        spark = get_session(master="local[2]", quiet=True)
        jvm = find_jvm()
        instrument(log)
        run_parquet(spark, [small], os.path.join(tmp, "warm-pq"))
        codecs = args.codecs.split(",")
        for codec in {c.partition("@")[0] for c in codecs}:
            run_seglake(spark, small, os.path.join(tmp, "warm-lake"), codec)
        for r in range(args.repeat):
            for name in ("parquet", *(f"seglake {c}" for c in codecs)):
                print(f"load {os.getloadavg()[0]:.1f}", flush=True)
                out = os.path.join(tmp, f"out-{r}-{name[:3]}")
                with CoreSampler(jvm) as cores:
                    t0 = time.time()
                    if name == "parquet":
                        run_parquet(spark, [inp], out)
                    else:
                        codec, _, level = name.split()[1].partition("@")
                        extra = {"compression.lz4.level": level} if level else None
                        run_seglake(spark, inp, out, codec, extra=extra)
                    t1 = time.time()
                time.sleep(0.5)  # the status store is fed asynchronously
                workers = [json.loads(x) for x in Path(log).read_text().splitlines()]
                jobs = spark_jobs(spark, t0 * 1000)
                print("\n".join(report(f"round {r} {name}", t0, t1, cores, jobs, workers)))
                print(flush=True)
                shutil.rmtree(out, ignore_errors=True)
        spark.stop()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
