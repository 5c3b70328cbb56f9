"""Driver of a distributed replay on Dask: shards, the collective coupling loop, the run write.

Each shard (a contiguous slice of the rank files) is ingested, built and costed on a worker and
stays there as a future; per coupling iteration only the members' arrival times travel (a few
floats per collective and rank). The driver sets every ghost's arrival to its remote member's
latest arrival and repeats until no arrival moves (see docs/distributed.md for why this is the
single-process schedule). Workers write the events and edges partitions of their ranks straight
into the run being built; steps, summary and collectives are assembled here.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa

from mtia_trace.errors import TraceFormatError, UsageError
from mtia_trace.ingest import consistency, cross_rank_warnings, trace_files
from mtia_trace.storage import begin_run, partition_path, write_run
from replay import pipeline
from replay.attribution import unexplained_summary
from replay.distributed import shard as S
from replay.hardware.source import resolve_source

#: Seconds to wait for a scheduler before giving up.
CONNECT_TIMEOUT_S = 10
MAX_ITERATIONS = 100_000
#: dask-scheduler's port when the address names none.
DEFAULT_PORT = 8786


def connect(scheduler: str | None, workers: int | None):  # noqa: ANN201
    """A Dask client: on ``scheduler`` (tcp://host:port), or on a local cluster of ``workers``."""
    try:
        from distributed import Client, LocalCluster
    except ImportError:
        raise UsageError("--scheduler/--workers need Dask; install mtia-trace[distributed] "
                         "(pip install 'dask[distributed]')") from None
    if scheduler:
        try:
            _probe(scheduler)
            return Client(scheduler, timeout=CONNECT_TIMEOUT_S)
        except Exception as exc:  # noqa: BLE001 - any protocol's failure (tls:// without a
            # security context, ucx:// without ucx-py, ...) is said once
            raise UsageError(f"--scheduler {scheduler}: cannot reach the Dask scheduler "
                             f"({_first_line(exc)}); check the address (tcp://HOST:PORT; tls:// "
                             "and ucx:// need Dask's security or UCX setup) and that "
                             "dask-scheduler is running") from None
    n = int(workers or 1)
    try:
        cluster = LocalCluster(n_workers=n, threads_per_worker=1, processes=True,
                               dashboard_address=None, silence_logs=QUIET)
        return Client(cluster)
    except Exception as exc:  # noqa: BLE001 - whatever stops the workers starting, say it once
        raise UsageError(f"--workers {n}: the local Dask cluster did not start "
                         f"({_first_line(exc)}); check free memory and that a worker process "
                         "can start, or replay without --workers") from None


#: Log level that silences Dask: its own one-line error is what the user sees.
QUIET = logging.CRITICAL + 1
_DASK_LOGGERS = ("distributed", "tornado", "bokeh", "asyncio")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:200] if text else type(exc).__name__


@contextmanager
def quiet_dask() -> Iterator[None]:
    """Silence Dask's loggers in this process (the scheduler and nannies of a local cluster log
    here) for the duration; their levels are restored after."""
    names = {n for n in logging.Logger.manager.loggerDict
             if n.split(".")[0] in _DASK_LOGGERS} | set(_DASK_LOGGERS)
    saved = {n: logging.getLogger(n).level for n in names}
    for n in names:
        logging.getLogger(n).setLevel(QUIET)
    try:
        yield
    finally:
        for n, level in saved.items():
            logging.getLogger(n).setLevel(level)


@contextmanager
def session(scheduler: str | None, workers: int | None) -> Iterator[object]:
    """`connect`, with Dask's logs silenced, a worker that keeps dying reported in one line and
    the client (and a local cluster) closed at the end."""
    from distributed import KilledWorker

    with quiet_dask():
        client = connect(scheduler, workers)
        try:
            yield client
        except KilledWorker as exc:
            tries = getattr(exc, "allowed_failures", 0) + 1
            raise UsageError(f"replay: a Dask worker died repeatedly running "
                             f"{getattr(exc, 'task', '?')} ({tries} tries); check the workers' "
                             "memory (a shard holds its ranks' events), or use more --workers"
                             ) from None
        finally:
            cluster = getattr(client, "cluster", None)
            client.close()
            if cluster is not None and not scheduler:
                cluster.close()


def _probe(address: str) -> None:
    """Fail at once when a tcp:// scheduler refuses connections or its host has no address
    (Dask itself retries those until its timeout); other protocols are left to Dask."""
    import socket
    from urllib.parse import urlsplit

    if "://" not in address:
        address = "tcp://" + address  # Dask's default protocol
    if not address.startswith("tcp://"):
        return
    u = urlsplit(address)
    if not u.hostname:
        raise ValueError("expected tcp://HOST:PORT")
    socket.create_connection((u.hostname, u.port or DEFAULT_PORT), timeout=CONNECT_TIMEOUT_S).close()


def _chunks(files: list[Path], n: int) -> list[list[str]]:
    n = max(1, min(n, len(files)))
    return [[str(f) for f in part] for part in np.array_split(np.array(files, dtype=object), n)]


def replay_distributed(trace: Path, model: object, dest: Path, meta: dict, *, client,  # noqa: ANN001
                       force: bool = False, shards: int | None = None,
                       source_hw: str | None = None,
                       progress: Callable[[str], None] | None = None) -> tuple[pa.Table, dict]:
    """Replay ``trace`` (a folder of per-rank files) on ``client``; write the run at ``dest``.

    Returns (steps table, run.json metadata).
    """
    say = progress or (lambda _m: None)
    files = trace_files(Path(trace))
    nworkers = max(1, len(client.scheduler_info().get("workers", {})))
    chunks = _chunks(files, shards or nworkers)
    t_start = time.perf_counter()
    say(f"{len(files)} trace files in {len(chunks)} shards on {nworkers} workers")

    from distributed import as_completed

    ing = [client.submit(S.ingest, c) for c in chunks]
    fact_f = [client.submit(S.facts, f) for f in ing]
    facts: list[dict] = [None] * len(chunks)  # type: ignore[list-item]
    idx = {f.key: i for i, f in enumerate(fact_f)}
    done = 0
    for fut, fact in as_completed(fact_f, with_results=True):
        i = idx[fut.key]
        facts[i] = fact
        done += len(facts[i]["ranks"])
        r = facts[i]["ranks"]
        say(f"ingested ranks {r[0]}-{r[-1]} ({done} ranks done)" if r else "ingested an empty shard")
    t_ingest = time.perf_counter() - t_start

    # ---- global facts: ranks, ids, time origin, collectives --------------------------------
    owner: dict[int, int] = {}
    for i, f in enumerate(facts):
        for r in f["ranks"]:
            if r in owner:
                raise TraceFormatError(
                    f"{trace}: rank {r} comes from two shards ({chunks[owner[r]][0]}, "
                    f"{chunks[i][0]}); distributed replay needs one trace per rank that names "
                    "its rank (distributedInfo.rank or 'rank<N>' in the file name)")
            owner[r] = i
    ranks = sorted(owner)
    # each shard's own warnings, then those across ranks, which need every shard's facts; a
    # trace no schedule satisfies is refused here, as in one process, before any shard works
    cross = consistency.combine([f["cross"] for f in facts])
    refused = consistency.cycle(cross)
    if refused is not None:
        raise TraceFormatError(f"{refused}; fix or re-export the rank's trace")
    for f in facts:
        if f.get("refused"):
            raise TraceFormatError(f["refused"])
    warnings = [w for f in facts for w in f["warnings"]] + cross_rank_warnings([cross])
    rows = {r: facts[owner[r]]["rows"][r] for r in ranks}
    offsets = dict(zip(ranks, np.concatenate([[0], np.cumsum([rows[r] for r in ranks])[:-1]])
                       .astype(int).tolist()))
    t0s = [f["t0"] for f in facts]
    t0 = float(min(t0s))
    t0_rank = min(r for r in ranks
                  if facts[owner[r]]["t0"] == t0)  # a rank of the shard holding the origin
    mem = pd.concat([f["members"].assign(shard=i) for i, f in enumerate(facts)], ignore_index=True)
    mem["gid"] = [offsets[int(r)] + int(i) - facts[s]["start"][int(r)]
                  for r, i, s in zip(mem["rank"], mem["id"], mem["shard"])]
    mem["n"] = mem.groupby(["pg", "seq"])["rank"].transform("size")
    mem = mem[mem["n"] >= 2].sort_values(["pg", "seq", "rank"]).reset_index(drop=True)
    mem["m"] = np.arange(len(mem))

    source = _source(facts, source_hw)
    builds, ghost_idx, member_idx = [], [], []
    for i, f in enumerate(facts):
        mine = mem[mem["shard"] == i]
        keys = mine[["pg", "seq"]].drop_duplicates()
        peers = mem.merge(keys, on=["pg", "seq"])
        gh = peers[peers["shard"] != i].reset_index(drop=True)
        ghost_idx.append(gh["m"].to_numpy())
        member_idx.append(mine["m"].to_numpy())
        anchor = None
        if f["t0"] > t0:
            anchor = (t0_rank, t0)
        builds.append(client.submit(S.build, ing[i], gh, mine["id"].to_numpy(), offsets,
                                    anchor, model, source))

    # ---- coupling: iterate arrivals to the fixed point -------------------------------------
    slow = float(model.overlap_slowdown())  # type: ignore[attr-defined]
    arr, iters = _couple(client, builds, ghost_idx, member_idx, len(mem), say)
    iterations = [iters]
    # each shard knows whether its model stretches anything (`S.stretch`)
    stretched = [client.submit(S.stretch, b, arr[g], slow) for b, g in zip(builds, ghost_idx)]
    flags = client.gather([client.submit(S.is_stretched, b) for b in stretched])
    if any(flags):
        builds = stretched
        arr, iters = _couple(client, builds, ghost_idx, member_idx, len(mem), say,
                             stage="overlap")
        iterations.append(iters)
    t_replay = time.perf_counter() - t_start - t_ingest

    # ---- write: partitions on the workers, small tables here -------------------------------
    tmp = begin_run(dest, force)
    try:
        outs = [client.submit(S.finish, b, arr[g], str(tmp)) for b, g in zip(builds, ghost_idx)]
        results: list[dict] = [None] * len(outs)  # type: ignore[list-item]
        oidx = {f.key: i for i, f in enumerate(outs)}
        for fut, result in as_completed(outs, with_results=True):
            i = oidx[fut.key]
            results[i] = result
            fut.release()  # its result is here: a lost worker must not make Dask redo it
            r = facts[i]["ranks"]
            say(f"wrote ranks {r[0]}-{r[-1]}" if r else "wrote an empty shard")
        # a worker lost from here on must not make Dask redo a write into the finished run
        client.cancel(outs)
        _check_partitions(tmp, ranks, sum(int(r["events"]) for r in results))
        steps = _sorted(pa.concat_tables([r["steps"] for r in results]), ["rank", "step"])
        summary = _sorted(pa.concat_tables([r["summary"] for r in results]), ["rank"])
        members = pd.concat([r["members"].assign(member=member_idx[i][r["members"]["member"]])
                             for i, r in enumerate(results)], ignore_index=True)
        colls = pipeline.collectives_table(members, t0)
        notes = _notes([r["notes"] for r in results], colls.num_rows)
        notes["coupling_iterations"] = iterations
        full = dict(meta)
        full["traces"] = [d for f in facts for d in f["files"]] or [{"path": str(trace)}]
        full["warnings"] = warnings
        full.setdefault("assumptions", {})["model"] = notes
        full["timings_s"] = {"ingest": round(t_ingest, 4), "replay": round(t_replay, 4)}
        full["unexplained"] = unexplained_summary(steps)
        full["distributed"] = {"shards": len(chunks), "workers": nworkers,
                               "coupling_iterations": iterations}
        write_run({"steps": steps, "summary": summary, "collectives": colls}, dest, full,
                  force=force, tmp=tmp)
    except BaseException:
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return steps, full


def _couple(client, builds, ghost_idx, member_idx, n, say, stage: str = "schedule"  # noqa: ANN001
            ) -> tuple[np.ndarray, int]:
    """Jacobi iteration of member arrivals from 0 (a lower bound) to the fixed point."""
    arr = np.zeros(n)
    for it in range(1, MAX_ITERATIONS):
        futs = [client.submit(S.arrivals, b, arr[g]) for b, g in zip(builds, ghost_idx)]
        new = arr.copy()
        for m, a in zip(member_idx, client.gather(futs)):
            new[m] = a
        moved = int((new != arr).sum())
        # times only grow (up to float noise from rescans starting at other positions)
        assert it == 1 or (new >= arr - 1e-6).all(), "collective coupling is not monotone"
        arr = new
        say(f"{stage}: coupling iteration {it}, {moved} arrivals moved")
        if moved == 0:
            return arr, it
    raise AssertionError("collective coupling does not converge")


def _check_partitions(tmp: Path, ranks: list[int], events: int) -> None:
    """Every rank's events and edges partition is in place and no part file of a killed write
    is left; the partitions hold all the events the shards replayed."""
    import pyarrow.parquet as pq

    for table in ("events", "edges"):
        d = tmp / table
        for f in d.glob(".*"):  # a write interrupted by a lost worker (replaced by its retry)
            f.unlink(missing_ok=True)
        names = {f.name for f in d.iterdir()} if d.is_dir() else set()
        want = {partition_path(tmp, table, r).name for r in ranks}
        assert names == want, f"{table}: partitions {sorted(names ^ want)[:5]} missing or extra"
    rows = sum(pq.ParquetFile(partition_path(tmp, "events", r)).metadata.num_rows for r in ranks)
    assert rows == events, f"events partitions hold {rows} rows, the shards replayed {events}"


def _sorted(t: pa.Table, keys: list[str]) -> pa.Table:
    o = np.lexsort([t.column(k).to_numpy() for k in reversed(keys)])
    return t.take(pa.array(o))


def _source(facts: list[dict], given: str | None) -> tuple[str | None, str]:
    class _T:  # the files' device names, as `resolve_source` reads them
        files = [type("F", (), {"device_properties": [{"name": d} for d in f["devices"]]})()
                 for f in facts]

    return resolve_source(_T(), given)


def _notes(parts: list[dict], matched: int) -> dict:
    """Shard notes merged: counts (and the removed source slowdown, us) summed, other values
    from the first shard."""
    out = dict(parts[0]) if parts else {}
    for k, v in out.items():
        if isinstance(v, int) and not isinstance(v, bool):
            out[k] = sum(int(p.get(k, 0)) for p in parts)
    if "source_overlap_removed_us" in out:
        out["source_overlap_removed_us"] = sum(float(p.get("source_overlap_removed_us", 0.0))
                                               for p in parts)
    out["collectives_matched"] = matched
    out["passes"] = max((int(p.get("passes", 0)) for p in parts), default=0)
    return out
