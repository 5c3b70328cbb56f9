"""Hardware models: spec files (a source per number) and the vectorized cost model built on them."""

from __future__ import annotations

from replay.hardware.spec import HardwareSpec, list_specs, load_spec

__all__ = ["NCCL_TESTS_OPS", "HardwareSpec", "collective_differences", "collective_rows",
           "list_specs", "load_spec", "model_for"]

#: collectives `hw collective` prices, as nccl-tests names them
NCCL_TESTS_OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast")


def model_for(spec, mode: str = "auto", loss_rate: float = 0.0, seed: int = 0, source=None):  # noqa: ANN001
    """A `replay.costs.CostModel` for ``spec`` (a HardwareSpec, bundled name or path)."""
    # Imported here, not at the top: `hw list` and spec validation need only the spec reader,
    # not the cost model (numpy, pyarrow and the collective model).
    from replay.hardware.model import HardwareModel

    return HardwareModel.create(spec, mode=mode, loss_rate=loss_rate, seed=seed, source=source)


def collective_rows(spec: HardwareSpec, op: str, ranks: int, sizes: list[int],
                    gpus_per_thread: int = 1) -> list:
    """`replay.hardware.collectives.nccl_tests_rows` (imported here for the same reason)."""
    # Imported here, not at the top: `hw list` / `hw show` need only the spec reader, not
    # numpy, pyarrow and the collective model.
    from replay.hardware.collectives import nccl_tests_rows

    return nccl_tests_rows(spec, op, ranks, sizes, gpus_per_thread)


def collective_differences(a: HardwareSpec, b: HardwareSpec) -> list:
    """`replay.hardware.collectives.collective_differences` (imported here likewise)."""
    # Imported here, not at the top: the same startup cost as above.
    from replay.hardware.collectives import collective_differences as diff

    return diff(a, b)
