"""A small DDP-shaped CPU trace (gloo, 2 ranks) written as Kineto JSON, shaped like what
`sample_traces/make_pairs.py --dp ddp` records with torch.

Per rank and step: inside ``backward``, two autograd hooks enqueue the bucket all-reduces
(``c10d::allreduce_``, async) that run on two ``pt_gloo_runloop`` threads while backward goes
on (two ``aten::mm``); DDP's finalize then waits on each bucket and copies it out
(``aten::as_strided`` views, ``torch.distributed.ddp.reducer::copy_bucket_to_grad``); an
optimizer op ends the step. All times in us from the step's start.
"""

from __future__ import annotations

import json
from pathlib import Path

STEP_US = 1500.0
HOOK = "autograd::engine::evaluate_function: torch::autograd::AccumulateGrad"
COPY = "torch.distributed.ddp.reducer::copy_bucket_to_grad"


def _x(name: str, ts: float, dur: float, tid: int, cat: str = "cpu_op",
       args: dict | None = None) -> dict:
    return {"ph": "X", "cat": cat, "name": name, "pid": 100, "tid": tid, "ts": ts, "dur": dur,
            "args": args or {}}


def _enqueue(ts: float) -> dict:
    return _x("c10d::allreduce_", ts, 10.0, 1, args={
        "Input Dims": [[[1000]], [], [], [], [], []], "Input type": ["TensorList", "", "", "", "Scalar", "Scalar"],
        "Concrete Inputs": ["", "", "", "", "True", "-1"]})


def _transfer(ts: float, end: float, tid: int) -> dict:
    return _x("gloo:all_reduce", ts, end - ts, tid, cat="user_annotation",
              args={"Input Dims": [[1000]], "Input type": ["float"]})


def step_events(t0: float, step: int, bucket1_end: float = 445.0, tail: float = 0.0,
                bucket2: tuple[float, float, int] = (435.0, 900.0, 3), extra: bool = False,
                bucket3_end: float | None = None) -> list[dict]:
    """One step from ``t0``; bucket 1's transfer ends at ``bucket1_end`` (445: during the second
    hook, so a thread looking for the first gap after it finds the hook's end); the last op
    (after backward) runs ``tail`` us longer; ``bucket2``: bucket 2's transfer (start, end,
    worker thread); ``extra``: one more all-reduce after backward (enqueued at +1060);
    ``bucket3_end``: a third bucket, enqueued by the second hook right after bucket 2 and run
    on bucket 1's thread from +450 to this end, which DDP's finalize waits on and copies out
    after the other two (backward, and everything after it, ends that much later)."""
    t = t0
    late = 0.0 if bucket3_end is None else max(bucket3_end + 20.0 - 1050.0, 0.0)
    out = [
        _x(f"ProfilerStep#{step}", t, STEP_US - 100.0 + tail + late, 1, cat="user_annotation"),
        _x("backward", t + 10, 1040.0 + late, 1, cat="user_annotation"),
        _x(HOOK, t + 20, 40.0, 1), _enqueue(t + 30),
        _x("aten::mm", t + 100, 300.0, 1),
        _x(HOOK, t + 410, 50.0, 1), _enqueue(t + 420),
        _x("aten::mm", t + 470, 530.0, 1),
        _x("aten::as_strided", t + 1010, 1.0, 1), _x(COPY, t + 1012, 8.0, 1),
        _x("aten::copy_", t + 1013, 6.0, 1),
        _x("aten::as_strided", t + 1030, 1.0, 1), _x(COPY, t + 1032, 8.0, 1),
        _x("aten::copy_", t + 1033, 6.0, 1),
        _x("aten::add_", t + 1100 + late, 290.0 + tail, 1),
        _transfer(t + 45, t + bucket1_end, 2),
        _transfer(t + bucket2[0], t + bucket2[1], bucket2[2]),
    ] + ([_enqueue(t + 1060), _transfer(t + 1075, t + 1090, 2)] if extra else [])
    if bucket3_end is not None:
        w = max(bucket3_end, 1040.0) + 5.0
        out += [_enqueue(t + 432), _transfer(t + 450, t + bucket3_end, 2),
                _x("aten::as_strided", t + w, 1.0, 1), _x(COPY, t + w + 2, 8.0, 1),
                _x("aten::copy_", t + w + 3, 6.0, 1)]
    return out


def write_trace(folder: Path, *, bucket1_end: float = 445.0, steps: int = 2,
                ranks: int = 2, tails: tuple[float, ...] = (),
                bucket2: tuple[float, float, int] | list[tuple[float, float, int]]
                = (435.0, 900.0, 3), extra_in: tuple[int, ...] = (),
                lead: dict[int, float] | None = None, bucket3_end: float | None = None
                ) -> Path:
    """One Kineto JSON per rank under ``folder``; ``tails``: per step, how much longer its last
    op runs; ``bucket2``: bucket 2's transfer (start, end, worker thread), or one per step;
    ``extra_in``: the steps (from 1) with one more all-reduce after backward; ``lead``: per
    rank, the start of an op before the first step (ending at 990 us: when recording began);
    ``bucket3_end``: every step has a third bucket (`step_events`)."""
    folder.mkdir(parents=True, exist_ok=True)
    for r in range(ranks):
        events: list[dict] = [
            {"ph": "M", "name": "thread_name", "pid": 100, "tid": tid,
             "args": {"name": f"thread {tid} ({'pt_gloo_runloop' if tid > 1 else 'python'})"}}
            for tid in (1, 2, 3)]
        if lead and r in lead:
            events.append(_x("aten::empty", lead[r], 990.0 - lead[r], 1))
        for s in range(steps):
            events += step_events(1000.0 + s * 2 * STEP_US, s + 1, bucket1_end,
                                  tails[s] if s < len(tails) else 0.0,
                                  bucket2[s] if isinstance(bucket2, list) else bucket2,
                                  s + 1 in extra_in, bucket3_end)
        doc = {"traceEvents": events, "distributedInfo": {
            "backend": "gloo", "rank": r, "world_size": ranks,
            "pg_config": [{"pg_name": "0", "pg_desc": "default_pg", "pg_size": ranks,
                           "ranks": list(range(ranks))}]}}
        (folder / f"rank{r}.json").write_text(json.dumps(doc))
    return folder
