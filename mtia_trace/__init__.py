"""mtia-trace: trace-driven profiler and bottleneck analyzer for recommender training."""

from __future__ import annotations

__version__ = "0.1.0"
