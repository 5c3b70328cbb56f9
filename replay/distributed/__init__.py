"""Replay on a Dask cluster: shards of ranks on workers, collectives coupled by iteration.

`replay.distributed.driver` (`connect`, `replay_distributed`) needs the ``distributed`` extra
when it runs (Dask is imported inside `connect`); `replay.distributed.shard` is plain
numpy/pyarrow.
"""
