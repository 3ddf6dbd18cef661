"""The cleaner's batch and record rules (seglake.storage.cleaner.plan_batches) against
Kafka's cleanInto/filterTo transliterated record by record, on random batches (hypothesis):
control and data batches, producer ids and epochs, delete horizons around now, keys absent,
null keys and tombstones, offsets past the map's latest offset, the round's upper bound."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from seglake.record.batch import CONTROL_BIT, DELETE_HORIZON_BIT, TRANSACTIONAL_BIT
from seglake.storage.cleaner import COPY, DROP, EMPTY_HEADER, REWRITE, plan_batches

NOW, RETENTION = 1000, 50
KEYS = [None, b"a", b"b", b"c"]


@st.composite
def rounds(draw):
    nb = draw(st.integers(1, 6))
    batches, off = [], 0
    for _ in range(nb):
        control = draw(st.booleans())
        n = draw(st.integers(0, 1)) if control else draw(st.integers(1, 4))
        recs = [
            (off + i, draw(st.sampled_from(KEYS)), draw(st.booleans())) for i in range(max(n, 1))
        ][:n]
        span = max(n, 1) + draw(st.integers(0, 2))
        batches.append(
            dict(
                base=off,
                last=off + span - 1,
                control=control,
                pid=draw(st.sampled_from([-1, 1, 2])),
                epoch=draw(st.integers(0, 2)),
                horizon=draw(st.sampled_from([None, NOW - 1, NOW, NOW + 1])),
                can=draw(st.booleans()),
                recs=recs,
            )
        )
        off += span
    omap = {k: draw(st.integers(0, off)) for k in KEYS[1:] if draw(st.booleans())}
    latest = draw(st.integers(0, off))
    upper = draw(st.integers(0, off + 1))
    last_records = {
        pid: (draw(st.sampled_from([None, *[b["last"] for b in batches]])), draw(st.integers(0, 2)))
        for pid in (1, 2)
        if draw(st.booleans())
    }
    return batches, omap, latest, upper, last_records


def kafka(batches, omap, latest, upper, last_records):
    """cleanInto's RecordFilter and filterTo, per batch and record, as Kafka writes them."""
    actions, keeps, horizons = [], [], []
    for b in batches:
        h = b["horizon"]
        discard = b["can"] and h is not None and h <= NOW if b["control"] else b["can"]
        rec = last_records.get(b["pid"])
        is_last = False
        if rec is not None:
            is_last = (
                b["last"] == rec[0] if rec[0] is not None else b["control"] and b["epoch"] == rec[1]
            )
        if (b["pid"] >= 0 and is_last) or b["last"] + 1 == upper:
            retention = "RETAIN_EMPTY"
        elif discard:
            retention = "DELETE"
        else:
            retention = "DELETE_EMPTY"
        if retention == "DELETE":
            actions.append(DROP)
            keeps += [False] * len(b["recs"])
            horizons.append(-1 if h is None else h)
            continue
        kept, tomb = [], False
        for offset, key, has_value in b["recs"]:
            if discard:
                k = False
            elif b["control"] or offset > latest:
                k = True
            elif key is None:
                k = False
            else:
                k = offset >= omap.get(key, -1) and (has_value or h is None or h > NOW)
            keeps.append(k)
            if k:
                kept.append(offset)
                tomb |= not has_value and not b["control"]
        need = (tomb or (b["can"] and b["control"])) and h is None
        if kept:
            actions.append(COPY if len(kept) == len(b["recs"]) and not need else REWRITE)
        elif retention == "RETAIN_EMPTY":
            actions.append(EMPTY_HEADER)
        else:
            actions.append(DROP)
        horizons.append(NOW + RETENTION if need else (-1 if h is None else h))
    return actions, keeps, horizons


@settings(max_examples=400, deadline=None)
@given(rounds())
def test_plan_batches_is_kafkas_filter(r) -> None:
    batches, omap, latest, upper, last_records = r
    attrs = np.array(
        [
            (CONTROL_BIT | TRANSACTIONAL_BIT if b["control"] else 0)
            | (DELETE_HORIZON_BIT if b["horizon"] is not None else 0)
            for b in batches
        ],
        dtype=np.int64,
    )
    recs = [x for b in batches for x in b["recs"]]
    keys = list(omap)
    plan = plan_batches(
        base_offset=np.array([b["base"] for b in batches], dtype=np.int64),
        last_offset=np.array([b["last"] for b in batches], dtype=np.int64),
        attributes=attrs,
        base_timestamp=np.array(
            [b["horizon"] if b["horizon"] is not None else 7 for b in batches], dtype=np.int64
        ),
        producer_id=np.array([b["pid"] for b in batches], dtype=np.int64),
        producer_epoch=np.array([b["epoch"] for b in batches], dtype=np.int64),
        records_count=np.array([len(b["recs"]) for b in batches], dtype=np.int64),
        can_discard=np.array([b["can"] for b in batches]),
        record_offset=np.array([x[0] for x in recs], dtype=np.int64),
        record_key=pa.array([x[1] for x in recs], pa.binary()),
        record_has_value=np.array([x[2] for x in recs], dtype=bool),
        map_keys=pa.array(keys, pa.binary()),
        map_offsets=np.array([omap[k] for k in keys], dtype=np.int64),
        latest_offset=latest,
        last_records=last_records,
        upper_bound=upper,
        now_ms=NOW,
        delete_retention_ms=RETENTION,
    )
    actions, keeps, horizons = kafka(batches, omap, latest, upper, last_records)
    assert plan.action.tolist() == actions
    assert plan.keep.tolist() == keeps
    written = [a in (COPY, REWRITE) for a in actions]
    assert [h for h, w in zip(plan.horizon.tolist(), written, strict=True) if w] == [
        h for h, w in zip(horizons, written, strict=True) if w
    ]
