"""`validate` and the headline verdict over every real trace (not a timing benchmark).

For every trace under ../shared/traces/real (or --real DIR): the worst step error of the
default replay (a consistency check: it keeps measured gaps), the device-schedule error (median
and 90th percentile of |replayed - measured| start of device events, as a share of the mean
step) of the default and of the strict replay, the worst strict step error, the unexplained
share of the replayed step, what the graph cannot reproduce (device events without a launching
call), and the verdict the report prints with the measures it was checked against (devices
busy, deepest launch queue).

    python benchmarks/validate_real.py [--real DIR] [--only SUBSTRING]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from mtia_trace.ingest import load
from replay.hardware import load_spec
from replay.hardware.source import with_source
from replay.validation import validate_events

DEFAULT_REAL = Path(__file__).resolve().parents[1].parent / "shared" / "traces" / "real"


def real_traces(real: Path) -> list[tuple[str, list[Path]]]:
    """(name, files) per trace: a folder of rank files is one trace; torch_cpu by config."""
    out: list[tuple[str, list[Path]]] = []
    folders: dict[Path, list[Path]] = {}
    for p in sorted(real.rglob("*.json.gz")):
        folders.setdefault(p.parent, []).append(p)
    for folder, files in sorted(folders.items()):
        rel = folder.relative_to(real)
        if rel.parts and rel.parts[0] == "torch_cpu":
            configs: dict[str, list[Path]] = {}
            for f in files:
                configs.setdefault(f.name.rsplit("_rank", 1)[0], []).append(f)
            out += [(f"torch_cpu/{c}", fs) for c, fs in sorted(configs.items())]
        else:
            out.append((str(rel), files))
    return out


def verdict_of(events, trace) -> tuple[str, dict]:  # noqa: ANN001
    """The report's verdict on the as-measured replay, with the measures it was checked on."""
    from analyzers.report.headline import verdict
    from analyzers.report.run_data import run_from_result
    from replay.run import replay_events

    res = replay_events(events)
    v = verdict(run_from_result(res, name="run"))
    return v.label, {"busy": v.devices_busy, "queue": v.max_queued, "full": v.queue_full}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--real", type=Path, default=DEFAULT_REAL)
    ap.add_argument("--only", default="")
    a = ap.parse_args()
    print("| trace | step error | device start median / p90 | strict step error | "
          "strict device start median / p90 | unexplained | unreproducible | verdict "
          "(devices busy, max launch queue) |")
    print("|---|---:|---:|---:|---:|---:|---|---|")
    for name, files in real_traces(a.real):
        if a.only not in name:
            continue
        tr = load(files[0] if len(files) == 1 else [str(f) for f in files])
        events, source, _ = with_source(tr, None)
        lat = float(load_spec(source).value("host.kernel_launch_us")) if source else None
        v = validate_events(events, lat, source)
        d, sd = v.device_start, v.strict_device_start
        u = v.unreproducible()
        unrep = ", ".join(x for x in (
            f"{int(u['device_events_without_launch']):,} device events without launch"
            if "device_events_without_launch" in u else "",
            f"{int(u['device_starts_unexplained']):,} starts > 1 ms after every input "
            f"({u['device_starts_unexplained_us'] / 1e3:,.1f} ms)"
            if "device_starts_unexplained" in u else "") if x) or "-"
        try:
            label, m = verdict_of(events, tr)
            busy = "-" if m["busy"] is None else f"{m['busy']:.0%}"
            q = "-" if m["queue"] is None else f"{m['queue']:,}{' full' if m['full'] else ''}"
            verdict = f"{label} ({busy}, {q})"
        except ImportError:
            verdict = "-"
        dev = f"{d.median:.2%} / {d.p90:.2%}" if d.events else "no device events"
        sdev = f"{sd.median:.2%} / {sd.p90:.2%}" if sd.events else "-"
        print(f"| {name} | {v.worst():.3%} | {dev} | {v.worst(strict=True):.2%} | {sdev} | "
              f"{v.unexplained_fraction:.1%} | {unrep} | {verdict} |", flush=True)


if __name__ == "__main__":
    main()
