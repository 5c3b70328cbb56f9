"""Flow events fill the correlation ids a row's args lack: checked against the definition (the
last flow of a (phase, pid, tid, ts) counts; a device row's flow ends where it starts, a runtime
call's flow starts where it starts) on random traces, read whole and in pieces."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mtia_trace.ingest import decode, kineto
from mtia_trace.ingest.classify import DEVICE_CATS, FLOW_CATS, RUNTIME_CATS

PIDS: list[Any] = [0, 1, 2, "host"]
TIDS: list[Any] = [1, 7, "7", "stream 3"]
IDS: list[Any] = [*range(20), 2**40 + 3, "12", "0x1f", "012", "abc", -5]


def _trace(rnd: random.Random) -> list[dict[str, Any]]:
    ev: list[dict[str, Any]] = []
    times = [float(t) for t in range(8)] + [0.5, 2.25, -0.0]  # -0.0 starts where 0.0 does
    for _ in range(rnd.randint(1, 60)):
        cat = rnd.choice(["kernel", "gpu_memcpy", "cuda_runtime", "Runtime", "cpu_op"])
        args: dict[str, Any] = {"device": 0, "stream": 7} if cat in DEVICE_CATS else {}
        if rnd.random() < 0.3:  # a negative one counts as none: a flow may fill it
            args["correlation"] = rnd.choice([rnd.randint(100, 110), -3])
        ev.append({"ph": "X", "cat": cat, "name": f"r{len(ev)}", "pid": rnd.choice(PIDS),
                   "tid": rnd.choice(TIDS), "ts": rnd.choice(times), "dur": 1.0,
                   **({"args": args} if args else {})})
        for _ in range(rnd.choice([0, 0, 1, 2])):
            flow = {"ph": rnd.choice("sf"), "cat": rnd.choice([*sorted(FLOW_CATS), "other"]),
                    "name": "fl", "pid": rnd.choice(PIDS), "tid": rnd.choice(TIDS),
                    "ts": rnd.choice(times)}
            if rnd.random() < 0.9:
                flow["id"] = rnd.choice(IDS)
            ev.insert(rnd.randint(0, len(ev)), flow)
    return ev


def _expected(ev: list[dict[str, Any]]) -> list[int]:
    """The correlation per row (X events, in file order) by the definition, with a dict."""
    flows: dict[tuple[Any, ...], Any] = {}
    for e in ev:
        if e["ph"] in "sf" and e["cat"] in FLOW_CATS and e.get("id") is not None:
            flows[(e["ph"], e["pid"], e["tid"], e["ts"])] = e["id"]
    out = []
    for e in (e for e in ev if e["ph"] == "X"):
        corr = e.get("args", {}).get("correlation", -1)
        if corr < 0 and e["cat"] in DEVICE_CATS | RUNTIME_CATS:
            fid = flows.get(("f" if e["cat"] in DEVICE_CATS else "s", e["pid"], e["tid"], e["ts"]))
            if fid is not None and (fid := kineto._as_int(fid)) is not None:
                corr = fid
        out.append(corr)
    return out


@pytest.mark.parametrize("read", ["one piece", "pieces", "plain decode", "dense thread codes"])
def test_flows_fill_correlations_as_defined(read: str, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    if read == "pieces":  # pieces of ~300 bytes: a row and its flow are often in different ones
        monkeypatch.setattr(decode, "PIECE_BYTES", 300)
    if read == "dense thread codes":  # as if (pid, tid) were too many to key in a float
        monkeypatch.setattr(kineto, "_EXACT_IN_FLOAT", 0)
    rnd = random.Random(7)
    filled = 0
    for case in range(200):
        ev = _trace(rnd)
        if read == "plain decode":  # a phase outside the format: one struct for every event
            ev.append({"ph": "Z", "name": "z", "pid": 0, "tid": 0, "ts": 0.0})
        path = tmp_path / f"t{case}.json"
        path.write_text(json.dumps({"traceEvents": ev}))
        got = kineto.read_file(path).cols["correlation"]
        want = _expected(ev)
        assert got.tolist() == want, case
        filled += sum(1 for e, c in zip([e for e in ev if e["ph"] == "X"], want)
                      if c != e.get("args", {}).get("correlation", -1))
    assert filled > 100  # the cases exercise the lookup, not only rows without flows


def test_a_flow_s_large_id_is_kept_exactly(tmp_path: Path) -> None:
    ev = [{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 5.0, "dur": 1.0},
          {"ph": "f", "cat": "ac2g", "name": "fl", "pid": 0, "tid": 7, "ts": 5.0,
           "id": 2**62 + 1}]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": ev}))
    assert kineto.read_file(path).cols["correlation"].tolist() == [2**62 + 1]
    assert kineto.read_file(path).cols["correlation"].dtype == np.int64
