"""Cost-model and sweep throughput.

Prints: seconds to cost 1M events on each bundled target (and the ratio to a reference pass that
only reads the same columns into numpy), and seconds for a 64-point sweep of a 100k-event trace
(ratio to one as-measured replay of the same trace).

    python benchmarks/bench_costs.py [--events 1000000] [--quick]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pyarrow as pa

from mtia_trace.schema import from_columns, validate_events
from replay.hardware import list_specs, model_for

KINDS = np.array(["gemm", "embedding", "elementwise", "collective", "memcpy", "reduction"])


def synthetic_events(n: int, ranks: int = 8, seed: int = 0, steps: int = 10,
                     coll_every: int = 100) -> pa.Table:
    """Per rank one device stream of kernels; every ``coll_every``-th event an all-reduce over
    all ranks, matched across ranks by sequence number."""
    rng = np.random.default_rng(seed)
    per = n // ranks
    i = np.tile(np.arange(per), ranks)
    compute = KINDS[KINDS != "collective"]
    k = np.where(i % coll_every == coll_every - 1, "collective", compute[i % len(compute)])
    rank = np.repeat(np.arange(ranks, dtype=np.int32), per)
    coll = k == "collective"
    dur = rng.uniform(5, 50, len(k))
    ts = np.tile(np.cumsum(np.full(per, 60.0)), ranks)
    seq = np.where(coll, i // coll_every, -1)
    t = from_columns({
        "rank": rank, "event_id": np.arange(len(k)), "name": np.where(coll, "ncclAllReduce", "k"),
        "cat": np.where(coll, "kernel", "kernel"), "kind": k, "ph": np.full(len(k), "X"),
        "track": np.char.add("dev:", rank.astype(str)), "is_device": np.ones(len(k), bool),
        "device": rank, "stream": np.full(len(k), 7), "ts_us": ts, "dur_us": dur,
        "step": (i * steps // per).astype(np.int32),
        "flops": np.where(k == "gemm", 2e9, 0.0), "bytes_read": rng.uniform(1e5, 1e7, len(k)),
        "bytes_written": rng.uniform(1e5, 1e6, len(k)),
        "dtype": np.where(k == "gemm", "c10::BFloat16", "float"),
        "coll_op": np.where(coll, "allreduce", None), "coll_bytes_in": np.where(coll, 4e6, 0.0),
        "coll_bytes_out": np.where(coll, 4e6, 0.0), "group_size": np.where(coll, ranks, 0),
        "pg": np.where(coll, "0", None), "coll_seq": seq,
    })
    validate_events(t)
    return t


def best(fn, repeat: int = 3) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=1_000_000, help="events costed per target")
    ap.add_argument("--quick", action="store_true", help="10k events, no sweep (a smoke run)")
    a = ap.parse_args()
    n = 10_000 if a.quick else a.events
    ev = synthetic_events(n)
    cols = ("kind", "dur_us", "flops", "bytes_read", "bytes_written", "coll_bytes_in", "group_size")
    ref = best(lambda: [ev.column(c).to_numpy(zero_copy_only=False) for c in cols])
    print(f"reference: read {len(cols)} columns of {n:,} events to numpy: {ref:.3f} s")
    for hw in list_specs():
        m = model_for(hw, loss_rate=1e-5, seed=0)
        t = best(lambda: m.cost(ev))
        print(f"cost {n:,} events on {hw:<8}: {t:.3f} s  ({t / ref:.1f}x reference)")
    if a.quick:
        return

    from replay.run import replay_events
    from replay.sweep import parse_vary, sweep

    small = synthetic_events(100_000)
    t0 = time.perf_counter()
    replay_events(small)
    one = time.perf_counter() - t0
    axes = parse_vary(["comm.message_engines=4,8,16,32", "hbm.bandwidth_GBps=3000,4500,6100,8000",
                       "network.intra_node_GBps=250,500,1000,2000"])
    t0 = time.perf_counter()
    table = sweep(small, "mtia300", axes)
    t = time.perf_counter() - t0
    print(f"one as-measured replay of 100k events: {one:.2f} s")
    print(f"64-point sweep of 100k events on mtia300: {t:.1f} s  ({t / one:.0f}x one replay; "
          f"step time {table.column('step_us').to_numpy().min():.0f}-"
          f"{table.column('step_us').to_numpy().max():.0f} us)")


if __name__ == "__main__":
    main()
