"""Fault campaign: a 600 us stall injected into every real trace and every bundled sample, and
what each replay shows of it (not a timing benchmark).

Per trace and fault (tests/stall_faults.py: ``kernel``, a device event a synchronize waits for starts
late; ``host``, the process stops between two host ops): the stall as measured, the growth of
the default replay's ``unexplained_us``, how much of it the strict replay carries, and how much
a target replay (``--hw``, default h100) carries and labels as unexplained. ``seen`` is yes when
every replay shows at least half of it (the default as unexplained time, the strict one as
error, the target one either way). Exits 1 when any fault goes unseen.

    python benchmarks/stall_campaign.py [--real DIR] [--hw h100] [--only SUBSTRING]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "benchmarks"))

from stall_faults import FAULTS, TRIES, inject, kernel_candidates, seen  # noqa: E402
from validate_real import DEFAULT_REAL, real_traces  # noqa: E402

from mtia_trace.ingest import load  # noqa: E402
from replay.graph import build_graph  # noqa: E402
from replay.hardware import load_spec, model_for  # noqa: E402
from replay.hardware.source import with_source  # noqa: E402


def sample_traces() -> list[tuple[str, list[Path]]]:
    s = REPO / "sample_traces"
    return [("samples/torch_cpu_dlrm", [s / "torch_cpu_dlrm"]),
            ("samples/synth/dcnv2_train_2rank", [s / "synth" / "dcnv2_train_2rank"]),
            ("samples/synth/dcnv2_infer_1rank", [s / "synth" / "dcnv2_infer_1rank"])]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--real", type=Path, default=DEFAULT_REAL)
    ap.add_argument("--hw", default="h100")
    ap.add_argument("--only", default="")
    a = ap.parse_args()
    traces = sample_traces() + (real_traces(a.real) if a.real.is_dir() else [])
    target = model_for(load_spec(a.hw), mode="auto")
    print(f"| trace | fault | at | measured | default: carries / unexplained | strict | {a.hw} "
          "| seen |")
    print("|---|---|---|---:|---:|---:|---:|---|")
    unseen = 0
    for name, files in traces:
        if a.only not in name:
            continue
        tr = load(files[0] if len(files) == 1 else [str(f) for f in files])
        events, source, _ = with_source(tr, None)
        lat = float(load_spec(source).value("host.kernel_launch_us")) if source else None
        g = build_graph(events)
        for kind in FAULTS:
            got = inject(kind, events, g)
            if got is None:
                n = len(kernel_candidates(events, g)) if kind == "kernel" else 0
                why = (f"none: {n} synchronize-blocked op(s), tried up to {TRIES}, none delays "
                       "its step's end" if n else "none in trace")
                print(f"| {name} | {kind} | {why} | | | | | n/a |", flush=True)
                continue
            faulted, fault = got
            s = seen(events, faulted, fault, lat, target)
            unseen += not s.all
            cells = " | ".join(f"{v.carried_us:,.0f} / {v.unexplained_us:,.0f}"
                               for v in s.replays.values())
            print(f"| {name} | {kind} | rank {fault.rank} step {fault.step}, "
                  f"{fault.what[:40]} | {s.measured_us:,.0f} | {cells} | "
                  f"{'yes' if s.all else 'NO: ' + ', '.join(s.missed())} |", flush=True)
    print(f"\n{unseen} fault(s) unseen")
    sys.exit(1 if unseen else 0)


if __name__ == "__main__":
    main()
