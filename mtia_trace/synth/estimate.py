"""What a synth request will cost, known before any of it is generated: events, bytes, memory.

Each record of the step program is one event on every rank (its times are arrays over ranks),
so the records per step do not depend on the rank count: a one-step probe on at most
``2 x ranks_per_node`` ranks counts them exactly, and gzipping the probe's rank-0 events gives
the compressed bytes per event. The peak memory is modelled from the arrays that dominate it
(`PEAK_BYTES_PER_EVENT` and the constants beside it, measured).

`check` refuses a request whose estimated peak memory or output exceeds its limit, in one line,
before anything is allocated: ``MTIA_TRACE_SYNTH_MAX_MEMORY`` (default 8 GiB) and
``MTIA_TRACE_SYNTH_MAX_BYTES`` (default 16 GiB of trace files) raise them (bytes, or a number
with K/M/G/T).
"""

from __future__ import annotations

import gzip
from dataclasses import dataclass, replace

import orjson

from mtia_trace.errors import UsageError
from mtia_trace.ingest.decode import env_size
from mtia_trace.synth.costing import SourceHardware
from mtia_trace.synth.model import Model
from mtia_trace.synth.sharding import local_batch, plan
from mtia_trace.synth.timeline import Timeline
from mtia_trace.synth.workload import build_program
from mtia_trace.synth.writer import RankWriter

MAX_MEMORY_ENV = "MTIA_TRACE_SYNTH_MAX_MEMORY"
MAX_BYTES_ENV = "MTIA_TRACE_SYNTH_MAX_BYTES"
DEFAULT_MAX_MEMORY = 8 * 2**30
DEFAULT_MAX_BYTES = 16 * 2**30
#: Peak memory per event (record x rank), per record and per generation, measured (max RSS
#: growth) by benchmarks/bench_synth_estimate.py and rounded up: the int64 start and duration
#: arrays of both schedules (plain and overlap-stretched) and the writer's copies, the overlap
#: pass's float64 stacks, per-rank args of collectives (~250 B per event); the record objects
#: and one rank's rendered text (~2.3 KB per record); imports the generation pulls in (~20 MB).
PEAK_BYTES_PER_EVENT = 256
PEAK_BYTES_PER_RECORD = 2560
PEAK_BYTES_BASE = 32 * 2**20
#: Per (rank, rank) pair: row-wise sharding's rank x rank input-distribution matrices (derived
#: from the code: int64, about 4 of them; an upper bound for the other shardings).
PLAN_BYTES_PER_RANK_PAIR = 32


@dataclass(frozen=True)
class Estimate:
    ranks: int
    steps: int
    records_per_step: int   # events per rank per step
    events: int             # all ranks, metadata included
    bytes: int              # gzipped trace files, all ranks
    peak_bytes: int         # memory the generation needs beyond the interpreter

    def describe(self) -> str:
        return (f"about {self.events:,} events, {_size(self.bytes)} of traces, "
                f"{_size(self.peak_bytes)} peak memory")


def _size(n: float) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{int(n)} B"


def estimate(model: Model, hw: SourceHardware, steps: int, train: bool, zipf: float,
             compress_level: int) -> Estimate:
    """The cost of generating ``steps`` steps of ``model`` (probed on a few ranks and the first
    two steps: the first also runs the program's prologue)."""
    R = model.ranks
    per = local_batch(model.batch, R)
    probe_ranks = min(R, 2 * hw.ranks_per_node)
    probe = replace(model, ranks=probe_ranks, batch=per * probe_ranks)
    p = plan(probe, probe_ranks, probe.sharding, probe.batch, hw.ranks_per_node, zipf, train)
    tl = Timeline(hw, probe_ranks, model.dtype != "float", 0, None, model.host_overhead)
    prog = build_program(probe, p, train)
    tl.step(prog, 1)
    first = len(tl.recs)   # the first step runs the program's prologue too
    if steps > 1:
        tl.step(prog, 2)
    recs = len(tl.recs) - first if steps > 1 else first
    text = RankWriter(tl.recs, probe_ranks, hw.ranks_per_node).events(0)
    per_event = len(gzip.compress(text, compresslevel=compress_level)) / len(tl.recs)
    meta = 7 + 2 * len(tl.free)  # process and thread names per rank (generate._metadata)
    # the header lists every rank of every process group: about two lists of R ranks
    header = len(orjson.dumps(list(range(R)))) * 2 // 3
    n = first + (steps - 1) * recs
    return Estimate(
        ranks=R, steps=steps, records_per_step=recs, events=R * (n + meta),
        bytes=int(R * (n * per_event + header + 40 * meta)),
        peak_bytes=int(PEAK_BYTES_PER_EVENT * n * R + PEAK_BYTES_PER_RECORD * n
                       + PLAN_BYTES_PER_RANK_PAIR * R * R + PEAK_BYTES_BASE))


def check(est: Estimate) -> None:
    """Refuse a request past the memory or output limit (one line, with the variable to raise)."""
    for what, value, env, default in (
            ("peak memory", est.peak_bytes, MAX_MEMORY_ENV, DEFAULT_MAX_MEMORY),
            ("trace output", est.bytes, MAX_BYTES_ENV, DEFAULT_MAX_BYTES)):
        limit = env_size(env, default)
        if value > limit:
            raise UsageError(
                f"synth: {est.ranks:,} ranks x {est.steps:,} steps needs {est.describe()}; "
                f"the {what} limit is {_size(limit)}: use fewer --ranks/--steps, or raise it "
                f"with {env}=<size> (e.g. {env}={max(1, -(-value // 2**30))}G)")
