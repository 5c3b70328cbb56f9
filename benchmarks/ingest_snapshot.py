"""What the ingest makes of every shared real trace, to check that a speed change changes none of it.

    python benchmarks/ingest_snapshot.py save before.json      # on the old code
    python benchmarks/ingest_snapshot.py save after.json       # on the new code
    python benchmarks/ingest_snapshot.py diff before.json after.json

Per trace file (and per folder holding several rank files, loaded together): the SHA-256 of
the events table's Arrow IPC stream (schema, metadata and every byte of every column), its row
count, the warnings, the per-file facts (`ingest.file_facts` and every `FileInfo` field) and
the kind counts. ``diff`` lists the entries that differ and exits 1 if any does.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

import pyarrow as pa

from mtia_trace.ingest import Trace, file_facts, load

REAL = Path(__file__).resolve().parents[2] / "shared" / "traces" / "real"
SUFFIXES = (".json", ".json.gz")


def _is_trace(p: Path) -> bool:
    return p.name.endswith(SUFFIXES) and p.name != "manifest.json"


def _entry(tr: Trace) -> dict:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, tr.events.schema) as w:
        w.write_table(tr.events)
    return {"ipc_sha256": hashlib.sha256(sink.getvalue().to_pybytes()).hexdigest(),
            "rows": tr.events.num_rows, "warnings": tr.warnings, "files": file_facts(tr),
            "file_info": [repr(sorted((k, repr(v)) for k, v in vars(f).items()))
                          for f in tr.files],
            "counts": tr.counts}


def snapshot(root: Path) -> dict[str, dict]:
    out: dict[str, dict] = {}
    for p in sorted(root.rglob("*")):
        key = str(p.relative_to(root))
        if p.is_file() and _is_trace(p):
            out[key] = _entry(load(p))
        elif p.is_dir() and sum(map(_is_trace, p.iterdir())) > 1:
            try:
                out[key + "/"] = _entry(load(p))
            except Exception as e:  # e.g. two files of one rank: the error is the result
                out[key + "/"] = {"error": str(e)}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("save")
    s.add_argument("out", type=Path)
    s.add_argument("--root", type=Path, default=REAL)
    d = sub.add_parser("diff")
    d.add_argument("a", type=Path)
    d.add_argument("b", type=Path)
    args = ap.parse_args(argv)
    if args.cmd == "save":
        snap = snapshot(args.root)
        args.out.write_text(json.dumps(snap, indent=1, sort_keys=True))
        print(f"{len(snap)} entries -> {args.out}")
        return 0
    a, b = json.loads(args.a.read_text()), json.loads(args.b.read_text())
    bad = sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))
    for k in bad:
        print(f"differs: {k}")
    print(f"{len(a.keys() | b.keys()) - len(bad)} entries identical, {len(bad)} differ")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
