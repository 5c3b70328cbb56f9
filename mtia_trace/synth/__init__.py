"""Synthetic DLRM-style multi-rank Kineto traces (`mtia-trace synth`).

`synthesize` builds the per-rank traces of a model (a preset or a model file) under a sharding,
with durations from a source hardware spec by roofline and seeded jitter, and writes one
Kineto-compatible ``.json.gz`` per rank. The same arguments and seed give byte-identical files.
"""

from __future__ import annotations

from mtia_trace.synth.generate import SynthOptions, synthesize
from mtia_trace.synth.model import Model, Table
from mtia_trace.synth.presets import PRESETS

__all__ = ["PRESETS", "Model", "SynthOptions", "Table", "synthesize"]
