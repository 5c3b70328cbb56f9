"""What a replay produces: the tables a run directory stores."""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa


@dataclass
class ReplayResult:
    events: pa.Table        # schema.REPLAYED_EVENTS_SCHEMA
    edges: pa.Table         # schema.EDGES_SCHEMA
    steps: pa.Table         # schema.STEPS_SCHEMA (attribution per rank and step)
    collectives: pa.Table   # schema.COLLECTIVES_SCHEMA
    summary: pa.Table       # schema.SUMMARY_SCHEMA (busy vs exposed time per rank and component)
    hardware: str = "as-measured"
    notes: dict[str, object] = field(default_factory=dict)
