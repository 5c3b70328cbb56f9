"""Multi-rank traces with one rank edited so the ranks disagree: shared by the consistency tests
and the fuzz campaign's "multi-rank consistency" family.

    docs = synth_docs(tmp)                      # {rank: Kineto document}, 8 ranks, 2 steps
    doc = edit(docs, "seq_off_by_one", rank=3)  # the edited rank's new document
    write_docs(docs | {3: doc}, folder)

Each edit names what the tool must say about it (`NEEDLES`): a substring of a warning (or, for
`EXPECT_ERROR` edits, of the one-line error).
"""

from __future__ import annotations

import copy
import gzip
import json
import random
from pathlib import Path


def synth_docs(folder: Path, ranks: int = 8, steps: int = 2) -> dict[int, dict]:
    """A consistent synthetic trace (`mtia-trace synth`), read back as documents."""
    from mtia_trace.cli import main

    out = folder / "synth"
    if not out.is_dir():
        assert main(["synth", "-o", str(out), "--ranks", str(ranks), "--steps", str(steps)]) == 0
    docs = {}
    for f in sorted(out.glob("*.json.gz")):
        doc = json.loads(gzip.decompress(f.read_bytes()))
        docs[doc["distributedInfo"]["rank"]] = doc
    return docs


def write_docs(docs: dict[int, dict], folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for r, doc in docs.items():
        (folder / f"rank{r}.json").write_text(json.dumps(doc))
    return folder


def _comms(doc: dict) -> list[dict]:
    """Events carrying a collective's Seq, in time order."""
    return sorted((e for e in doc["traceEvents"] if isinstance(e.get("args"), dict)
                   and "Seq" in e["args"]), key=lambda e: e.get("ts", 0))


def _seqs(doc: dict, op: str | None = None) -> list[int]:
    return sorted({e["args"]["Seq"] for e in _comms(doc)
                   if op is None or e["args"].get("Collective name") == op})


def _steps(doc: dict) -> list[dict]:
    return [e for e in doc["traceEvents"] if str(e.get("name", "")).startswith("ProfilerStep#")]


def edit(docs: dict[int, dict], kind: str, rank: int = 3,
         rng: random.Random | None = None) -> dict:
    """Rank ``rank``'s document with one inconsistency of ``kind`` (see `EDITS`)."""
    rng = rng or random.Random(0)
    doc = copy.deepcopy(docs[rank])
    comms = _comms(doc)
    seqs = _seqs(doc)
    dist = doc["distributedInfo"]
    if kind == "seq_renumber":
        for e in comms:
            e["args"]["Seq"] += 1000
    elif kind == "seq_off_by_one":
        for e in comms:
            e["args"]["Seq"] += 1
    elif kind == "op_differs":
        s = rng.choice(_seqs(doc, "allreduce"))
        for e in comms:
            if e["args"]["Seq"] == s:
                e["args"]["Collective name"] = "allgather"
    elif kind == "size_x1000":
        s = rng.choice(seqs)
        for e in comms:
            if e["args"]["Seq"] == s and "In msg nelems" in e["args"]:
                e["args"]["In msg nelems"] *= 1000
                e["args"]["Out msg nelems"] *= 1000
    elif kind == "missing":
        s = rng.choice(seqs)
        # the collective's events: the c10d op around its record_param_comms, all under it
        rec = [e for e in comms if e["args"]["Seq"] == s and e.get("cat") != "kernel"]
        ops = [e for e in doc["traceEvents"] if e.get("ph") == "X"
               and str(e.get("name", "")).startswith("c10d::") and any(
                   e.get("tid") == r.get("tid") and e["ts"] <= r["ts"] <= e["ts"] + e["dur"]
                   for r in rec)]
        gone = [e for e in doc["traceEvents"] if e.get("ph") == "X" and any(
            e.get("tid") == o.get("tid") and o["ts"] <= e["ts"] <= o["ts"] + o["dur"]
            for o in ops)]
        ids = {id(e) for e in gone}
        doc["traceEvents"] = [e for e in doc["traceEvents"] if id(e) not in ids
                              and not (isinstance(e.get("args"), dict)
                                       and e["args"].get("Seq") == s)]
    elif kind == "step_fewer":
        last = max(_steps(doc), key=lambda e: e["ts"])
        doc["traceEvents"].remove(last)
    elif kind == "steps_shifted":
        for e in _steps(doc):
            e["name"] = f"ProfilerStep#{int(e['name'].split('#')[1]) + 5}"
    elif kind == "world_size":
        dist["world_size"] = 4
    elif kind == "rank_99":
        dist["rank"] = 99
    elif kind == "pg_name":
        for e in comms:
            if "Process Group Name" in e["args"]:
                e["args"]["Process Group Name"] = "7"
        for c in dist.get("pg_config", []):
            c["pg_name"] = "7"
    elif kind == "group_size_3":
        for e in comms:
            if "Group size" in e["args"]:
                e["args"]["Group size"] = 3
    elif kind == "swapped_seq":
        a2a = _seqs(doc, "all_to_allv")
        a, b = a2a[0], a2a[1]  # two consecutive collectives on one stream
        for e in comms:
            v = e["args"]["Seq"]
            e["args"]["Seq"] = b if v == a else a if v == b else v
    else:
        raise ValueError(kind)
    return doc


#: Edit -> what the tool must say (a substring of a warning, or of the error).
NEEDLES = {
    "seq_renumber": "did not find all their peers",
    "seq_off_by_one": "differ in op",
    "op_differs": "differ in op",
    "size_x1000": "bytes",
    "missing": "did not find all their peers",
    "step_fewer": "steps",
    "steps_shifted": "steps",
    "world_size": "world_size",
    "rank_99": "rank 99",
    "pg_name": "process group",
    "group_size_3": "group size",
    "swapped_seq": "wait on each other",
}
EDITS = tuple(NEEDLES)
#: Edits no replay can schedule: refused in one line (exit 2) by every command that builds the
#: graph (inspect too).
EXPECT_ERROR = ("swapped_seq",)


# -- single-rank oddities -------------------------------------------------------------------------

def odd_doc(kind: str) -> dict:
    """A small one-rank trace (`fuzzcases.trace_doc`, 3 steps) with one oddity of ``kind``
    (see `ODD_NEEDLES`)."""
    from tests.fuzzcases import trace_doc

    doc = trace_doc(steps=3)
    ev = doc["traceEvents"]
    xs = [e for e in ev if e.get("ph") == "X"]
    kernels = [e for e in xs if e.get("cat") == "kernel"]
    steps = [e for e in xs if e["name"].startswith("ProfilerStep#")]
    launch = {e["args"]["correlation"]: e for e in xs if e["name"] == "cudaLaunchKernel"}
    if kind == "kernel_early":
        for k in kernels:
            k["ts"] = launch[k["args"]["correlation"]]["ts"] - 10_000
    elif kind == "all_dur_0":
        for e in xs:
            e["dur"] = 0
    elif kind == "all_ts_equal":
        for e in xs:
            e["ts"] = xs[0]["ts"]
    elif kind == "steps_one_number":
        for e in steps:
            e["name"] = "ProfilerStep#1"
    elif kind == "steps_overlap":
        steps[0]["dur"] = 1500
    elif kind == "swapped_correlation":
        a, b = kernels[0]["args"], kernels[1]["args"]
        a["correlation"], b["correlation"] = b["correlation"], a["correlation"]
    elif kind == "flow_self_loop":
        k = kernels[0]
        del k["args"]["correlation"]  # flows link device events without a correlation id
        ev += [{"ph": p, "cat": "ac2g", "name": "ac2g", "id": 77, "pid": k["pid"],
                "tid": k["tid"], "ts": k["ts"], **({"bp": "e"} if p == "f" else {})}
               for p in ("s", "f")]
    elif kind == "stream_overlap":
        kernels[0]["dur"] = 1500
    elif kind == "shared_pid":
        for k in kernels:
            k["pid"] = 1
    else:
        raise ValueError(kind)
    return doc


#: Oddity -> what inspect must say ("" for none: a case the ingest handles as it is).
ODD_NEEDLES = {
    "kernel_early": "before the call that launched them",
    "all_dur_0": "lasts 0 us",
    "all_ts_equal": "starts at the same time",
    "steps_one_number": "repeat a step number",
    "steps_overlap": "start before the previous step",
    "swapped_correlation": "correlation ids are probably swapped",
    "flow_self_loop": "no launching runtime call",
    "stream_overlap": "start before the previous op on their stream ends",
    "shared_pid": "",
}
ODDITIES = tuple(ODD_NEEDLES)
