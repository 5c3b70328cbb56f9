"""Replay: the dependency graph, the vectorized scheduler, hardware cost models, attribution."""
