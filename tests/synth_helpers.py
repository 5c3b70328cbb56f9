"""Read generated traces back (plain JSON, independent of the generator's internals)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path


def read_dir(d: Path) -> dict[int, dict]:
    out = {}
    for f in sorted(d.glob("*.json.gz")):
        doc = json.loads(gzip.decompress(f.read_bytes()))
        out[doc["distributedInfo"]["rank"]] = doc
    return out


def events(doc: dict, cat: str | None = None, name: str | None = None) -> list[dict]:
    return [e for e in doc["traceEvents"] if e.get("ph") == "X"
            and (cat is None or e.get("cat") == cat) and (name is None or e["name"] == name)]


def steps(doc: dict) -> list[tuple[float, float]]:
    return sorted((e["ts"], e["ts"] + e["dur"]) for e in events(doc, "user_annotation")
                  if e["name"].startswith("ProfilerStep#"))


def in_step(e: dict, step: tuple[float, float]) -> bool:
    return step[0] <= e["ts"] <= step[1]
