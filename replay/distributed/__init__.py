"""Replay on a Dask cluster: shards of ranks on workers, collectives coupled by iteration.

`replay_distributed` (driver) needs the ``distributed`` extra; `shard` is plain numpy/pyarrow.
"""

from __future__ import annotations

__all__ = ["replay_distributed", "connect"]


def __getattr__(name: str) -> object:
    if name in __all__:
        from replay.distributed import driver

        return getattr(driver, name)
    raise AttributeError(name)
