"""One row per real trace (``../shared/traces/real``: HTA's Kineto corpus, the torch CPU traces,
both runs of each perturbed pair): how busy its devices are, how deep its launch queues ran, how
its step moves when device work is 10x faster, and how well an as-measured replay reproduces it.

Columns: ``busy`` devices busy (any stream running) over the step wall time, as measured (the
``device_time`` analyzer); ``queue max`` the most launches a stream held (the launching call
included; the replay's ``launch_queue`` notes, ``-`` when the replay does not report it);
``x0.1 dev`` the mean step of ``replay --hw SPEC --whatif 'track=dev:*:x0.1'`` over that of
``replay --hw SPEC`` (a trace without steps that serves requests: the mean request latency,
`replay.graph.requests`) (SPEC: the bundled spec closest to the hardware that recorded the trace;
as measured for CPU traces, which have no device); ``verdict`` / ``verdict on spec`` the
report's headline verdict (`analyzers.report.headline.verdict`) on the as-measured replay and on
the replay on SPEC; ``validate`` / ``strict`` the worst step
error of ``mtia-trace validate`` (as measured / strict). Every figure comes from the CLI, so the
script measures whatever code ``PYTHONPATH`` selects (run it on two checkouts to compare).

Usage: python benchmarks/real_traces_table.py [--real DIR] [--only SUBSTRING]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
REAL = REPO.parent / "shared" / "traces" / "real"

#: trace (relative to the real-trace folder) -> the bundled spec closest to what recorded it
#: (None: as measured); a folder is a multi-rank trace
TRACES: dict[str, str | None] = {
    "hta/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz": "a100",
    "hta/critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz": "a100",
    "hta/critical_path/cuda_event_sync_multi_stream/event_sync_trace.json.gz": "a100",
    "hta/cupti_profiler/benchmark_result_924719_1679055439_trace.json.gz": "a100",
    "hta/df_index_resolver/df_index_resolver.json.gz": "a100",
    "hta/mtia_inference_trace/mtia_inference_rank_0.json.gz": "mtia300",
    "hta/mtia_trace_single_rank/mtia_rank_0.json.gz": "mtia300",
    "hta/nccl_parser_config/nccl_data.json.gz": "a100",
    "hta/negative_queue_length_values_check/rank0.json.gz": "a100",
    "hta/trace_diff/control/control.json.gz": "a100",
    "hta/trace_file_list/inference_rank_1.json.gz": "a100",
    "hta/trace_filter": "a100",
    "hta/triton_example/triton_example.json.gz": "a100",
    "torch_cpu/dev_tiny_rank0.pt.trace.json.gz": None,
    "torch_cpu/dev_rank2_small_rank*.pt.trace.json.gz": None,
    **{f"pairs/dp_{pair}/{run}": None for pair in ("compute", "dense", "embedding", "straggler")
       for run in "ab"},
}


def _cli(*args: str) -> tuple[int, str]:
    p = subprocess.run([sys.executable, "-c", "import sys; from mtia_trace.cli import main; "
                        "sys.exit(main(sys.argv[1:]))", *args], capture_output=True, text=True,
                       env=os.environ.copy())
    return p.returncode, p.stdout if p.returncode in (0, 1) else p.stderr.strip().splitlines()[-1]


def _mean_step(out: str) -> float:
    steps = json.loads(out)["runs"][0]["steps"]
    return sum(s["total_us"] for s in steps) / len(steps)


def _trace_path(real: Path, rel: str, tmp: Path) -> Path:
    if "*" not in rel:
        return real / rel
    folder = tmp / rel.split("/")[-1].replace("*", "N").split(".")[0]
    folder.mkdir(exist_ok=True)
    for f in sorted((real / rel).parent.glob(Path(rel).name)):
        (folder / f.name).unlink(missing_ok=True)
        (folder / f.name).symlink_to(f)
    return folder


def row(real: Path, rel: str, spec: str | None, tmp: Path) -> dict[str, str]:
    path = _trace_path(real, rel, tmp)
    run = tmp / "run"
    out: dict[str, str] = {"trace": rel, "spec": spec or "as measured"}
    code, text = _cli("replay", str(path), "-o", str(run), "--force", "--format", "json")
    if code != 0:
        return out | {"busy": "-", "queue max": "-", "x0.1 dev": f"error: {text[:60]}",
                      "verdict": "-", "verdict on spec": "-", "validate": "-", "strict": "-"}
    run = Path(json.loads(text)["runs"][0]["path"])
    code, text = _cli("analyze", str(run), "device_time", "--format", "json")
    busy = "-"
    if code == 0:
        data = json.loads(text)
        data = data.get("device_time", []) if isinstance(data, dict) else data
        rows = [r for r in data if r.get("stream") == "all"]
        w = sum(r["window_us"] for r in rows)
        busy = f"{100 * sum(r['busy_us'] for r in rows) / w:.1f}%" if w > 0 else "-"
    meta = json.loads((run / "run.json").read_text())
    q = _find(meta, "launch_queue")
    out["busy"] = busy
    out["queue max"] = str(q["outstanding_max"]) if isinstance(q, dict) else "-"
    hw = ["--hw", spec] if spec else []
    out["verdict"] = _verdict(run)
    c1, t1 = _cli("replay", str(path), *hw, "-o", str(tmp / "a"), "--force", "--format", "json")
    out["verdict on spec"] = (_verdict(Path(json.loads(t1)["runs"][0]["path"]))
                              if c1 == 0 and spec else "-")
    c2, t2 = _cli("replay", str(path), *hw, "-o", str(tmp / "b"), "--force", "--format", "json",
                  "--whatif", "track=dev:*:x0.1")
    if c1 == 0 and c2 == 0:
        out["x0.1 dev"] = f"{_mean_step(t2) / _mean_step(t1):.3f}x"
    elif c1 == 0 and "selects no" in t2:
        out["x0.1 dev"] = "n/a (no device events)"
    else:
        out["x0.1 dev"] = f"error: {(t1 if c1 else t2)[:60]}"
    code, text = _cli("validate", str(path), "--format", "json")
    if code in (0, 1) and text.startswith("{"):
        v = json.loads(text)
        out["validate"] = f"{100 * v['worst_abs_error']:.1f}%"
        out["strict"] = f"{100 * v['strict_worst_abs_error']:.1f}%"
    else:
        out["validate"] = out["strict"] = f"error: {text[:60]}"
    return out


def _verdict(run: Path) -> str:
    code, text = _cli("report", str(run), "--format", "json")
    if code != 0 or not text.lstrip().startswith("{"):
        return "-"
    v = json.loads(text).get("verdict") or {}
    return str(v.get("label", "-"))


def _find(d: object, key: str) -> object:
    if isinstance(d, dict):
        if key in d:
            return d[key]
        for v in d.values():
            f = _find(v, key)
            if f is not None:
                return f
    elif isinstance(d, list):
        for v in d:
            f = _find(v, key)
            if f is not None:
                return f
    return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--real", type=Path, default=REAL)
    ap.add_argument("--only", default="", help="only traces whose path contains this")
    a = ap.parse_args()
    if not a.real.is_dir():
        print(f"{a.real}: no real traces here; pass --real DIR", file=sys.stderr)
        return 2
    cols = ["trace", "spec", "busy", "queue max", "x0.1 dev", "verdict", "verdict on spec",
            "validate", "strict"]
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    with tempfile.TemporaryDirectory() as t:
        for rel, spec in TRACES.items():
            if a.only not in rel:
                continue
            print(f"running {rel}", file=sys.stderr)
            r = row(a.real, rel, spec, Path(t))
            print("| " + " | ".join(r[c] for c in cols) + " |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
