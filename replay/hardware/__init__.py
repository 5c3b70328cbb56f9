"""Hardware models: spec files (a source per number) and the vectorized cost model built on them."""

from __future__ import annotations

from replay.hardware.spec import HardwareSpec, list_specs, load_spec

__all__ = ["HardwareSpec", "list_specs", "load_spec", "model_for"]


def model_for(spec, mode: str = "auto", loss_rate: float = 0.0, seed: int = 0, source=None):  # noqa: ANN001
    """A `replay.costs.CostModel` for ``spec`` (a HardwareSpec, bundled name or path)."""
    # Imported here, not at the top: `hw list` and spec validation need only the spec reader,
    # not the cost model (numpy, pyarrow and the collective model).
    from replay.hardware.model import HardwareModel

    return HardwareModel.create(spec, mode=mode, loss_rate=loss_rate, seed=seed, source=source)
