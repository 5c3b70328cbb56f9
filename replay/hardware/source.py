"""The hardware a trace was measured on: detected from Kineto ``deviceProperties`` names.

The source spec feeds the ``scaled`` costing mode (measured duration x target/source roofline
ratio). It travels with the events table as schema metadata (`SOURCE_KEY`), so every consumer
of the table (replay, sweep) sees the same source without extra arguments.
"""

from __future__ import annotations

import re
from collections import Counter

import pyarrow as pa

from replay.hardware.spec import load_spec

#: Schema-metadata key of the events table naming the source spec.
SOURCE_KEY = b"mtia_trace.source_hw"
#: ... and why that source (flag or detection), for the run's notes.
WHY_KEY = b"mtia_trace.source_hw_reason"
#: The advice ending a "no source" reason (the scaled-mode error gives its own).
ADVICE = "; pass --source-hw NAME for scaled costing"

#: Device-name patterns -> bundled spec. Synth traces write the spec description's head
#: ("NVIDIA H100 SXM cluster", "Meta MTIA 300"), real Kineto traces the CUDA/MTIA device name.
#: "ARTEMIS" is the reported internal name of MTIA v2 (MTIA 200), as seen in MTIA Kineto traces.
#: A GPU's variants map to its one bundled spec (A100 40 GB boards such as "A100-PG509-200" and
#: PCIe cards to the SXM4 80 GB ``a100``, H100 PCIe to ``h100``, "Tesla V100-SXM2-32GB" and
#: 16 GB or PCIe V100s to ``v100``, "NVIDIA B200" to ``b200``, "NVIDIA GB200" to ``gb200``);
#: pass --source-hw with a spec of your own where the variant's HBM or clocks matter.
PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"\bV100\b", re.I), "v100"),
    (re.compile(r"\bA100\b", re.I), "a100"),
    (re.compile(r"\bH100\b", re.I), "h100"),
    (re.compile(r"\bH200\b", re.I), "h200"),
    (re.compile(r"\bB200\b", re.I), "b200"),
    (re.compile(r"\bGB200\b", re.I), "gb200"),
    (re.compile(r"MTIA[ _-]?(300|v?3)\b", re.I), "mtia300"),
    (re.compile(r"MTIA[ _-]?(200|v?2i?)\b|\bARTEMIS\b", re.I), "mtia200"),
)


def spec_for_device(name: str) -> str | None:
    """Bundled spec name for one device name, or None when no spec matches."""
    for pat, spec in PATTERNS:
        if pat.search(name or ""):
            return spec
    return None


def device_names(trace: object) -> list[str]:
    """Device names declared by every file of an ingested trace (``Trace.files``)."""
    out = []
    for f in getattr(trace, "files", None) or []:
        for p in getattr(f, "device_properties", None) or []:
            if isinstance(p, dict) and p.get("name"):
                out.append(str(p["name"]))
    return out


def detect_source(trace: object) -> str | None:
    """The bundled spec the trace was measured on, or None (unknown or mixed devices)."""
    found = Counter(s for s in map(spec_for_device, device_names(trace)) if s)
    return found.most_common(1)[0][0] if len(found) == 1 else None


def tag_source(events: pa.Table, source: str | None, why: str = "") -> pa.Table:
    """``events`` with the source spec recorded in its schema metadata (removed when None)."""
    meta = dict(events.schema.metadata or {})
    meta.pop(SOURCE_KEY, None)
    meta.pop(WHY_KEY, None)
    if source:
        meta[SOURCE_KEY] = str(source).encode()
    if why:
        meta[WHY_KEY] = why.encode()
    return events.replace_schema_metadata(meta)


def tagged_source(events: pa.Table) -> tuple[str | None, str]:
    """(source spec recorded on an events table or None, why)."""
    meta = events.schema.metadata or {}
    v, why = meta.get(SOURCE_KEY), meta.get(WHY_KEY)
    return (v.decode() if v else None), (why.decode() if why else "")


def resolve_source(trace: object, given: str | None = None) -> tuple[str | None, str]:
    """(source spec name or None, why): ``--source-hw`` wins, else detection."""
    if given:
        return given, f"--source-hw {given}"
    names = sorted(set(device_names(trace)))
    src = detect_source(trace)
    if src:
        return src, f"detected from deviceProperties ({', '.join(names)})"
    if names:
        return None, (f"deviceProperties match no bundled spec ({', '.join(names[:3])})"
                      + ADVICE)
    return None, "trace declares no deviceProperties" + ADVICE


def with_source(trace: object, given: str | None = None) -> tuple[pa.Table, str | None, str]:
    """(the trace's events tagged with their source, source, why)."""
    src, why = resolve_source(trace, given)
    if src:
        load_spec(src)  # a bad --source-hw fails here with the spec's one-line error
    return tag_source(trace.events, src, why), src, why  # type: ignore[attr-defined]
