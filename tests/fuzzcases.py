"""Hostile-input cases shared by tests/test_fuzz.py (hypothesis, bounded) and
benchmarks/fuzz_campaign.py (a larger seeded campaign): each case is one CLI invocation with the
outcome it must have, and `classify` sorts what happened into the campaign's columns.

Outcomes: ``clean exit 2`` (one error, no traceback), ``clean exit 0`` (valid input, accepted),
``traceback``, ``wrong exit`` (an unexpected exit code), ``hang`` (past the time limit) and
``silent wrong`` (accepted although it should have been refused or warned about, or a file
changed that must not) and ``query wrote`` (a file changed or created through `query`).
"""

from __future__ import annotations

import copy
import gzip
import hashlib
import json
import os
import random
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

EPOCH_US = 1_700_000_000_000_000

OUTCOMES = ("clean exit 2", "clean exit 0", "traceback", "wrong exit", "hang", "silent wrong",
            "query wrote", "unsafe output")
#: Prefix of a check's finding that a `query` changed or created a file (its own column).
WROTE = "wrote: "
#: Prefix of a check's finding that a name from a trace reached an output raw (its own column).
UNSAFE = "unsafe: "


def trace_doc(rank: int = 0, steps: int = 2, world: int = 1) -> dict:
    """One rank: per step a ProfilerStep, an op, its launch and a kernel."""
    events: list[dict] = [{"ph": "M", "name": "thread_name", "pid": 1, "tid": 1,
                           "args": {"name": "python"}}]
    for s in range(steps):
        t = EPOCH_US + 1000 + s * 1000
        events += [
            {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{s}", "pid": 1,
             "tid": 1, "ts": t, "dur": 900},
            {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": t + 10,
             "dur": 50, "args": {"External id": s + 1, "Input Dims": [[64, 64], [64, 64]],
                                 "Input type": ["float", "float"]}},
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
             "ts": t + 20, "dur": 10, "args": {"correlation": s + 1, "External id": s + 1}},
            {"ph": "X", "cat": "kernel", "name": "sm80_gemm", "pid": 0, "tid": 7, "ts": t + 40,
             "dur": 300 + 100 * rank,
             "args": {"correlation": s + 1, "External id": s + 1, "device": 0, "stream": 7}},
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaDeviceSynchronize", "pid": 1,
             "tid": 1, "ts": t + 400, "dur": 100, "args": {"correlation": 100 + s}},
        ]
    return {"distributedInfo": {"rank": rank, "world_size": world}, "traceEvents": events}


#: Values a careless or hostile producer puts where a number, id or name belongs.
HOSTILE = [0, -1, 1, 2**31, 2**63, 2**64 + 1, -(2**63) - 1, 10**30, 1e300, -1e300, 1e-300,
           0.5, "", "x", "0x10", "1e3", "nan", "inf", None, True, False, [], {}, [1, 2],
           {"a": 1}, "ProfilerStep#2147483648", "\u2603" * 3, "a" * 300]
FIELDS = ["ph", "name", "cat", "pid", "tid", "ts", "dur", "id", "args"]
ARG_FIELDS = ["External id", "correlation", "device", "stream", "Input Dims", "Input type",
              "flops", "Collective name", "In msg nelems", "Group size", "Process Group Ranks"]


def mutate(doc: dict, rng: random.Random, n: int = 1) -> tuple[dict, str]:
    """``n`` random hostile edits of a trace document; returns (new doc, what was done)."""
    doc = copy.deepcopy(doc)
    done = []
    for _ in range(n):
        ev = doc["traceEvents"]
        op = rng.choice(["field", "arg", "drop_field", "dup", "drop", "shift", "top", "rank"])
        i = rng.randrange(len(ev))
        if op == "field":
            f, v = rng.choice(FIELDS), rng.choice(HOSTILE)
            ev[i][f] = v
            done.append(f"event {i} {f}={v!r:.40}")
        elif op == "arg":
            f, v = rng.choice(ARG_FIELDS), rng.choice(HOSTILE)
            if not isinstance(ev[i].get("args"), dict):
                ev[i]["args"] = {}
            ev[i]["args"][f] = v
            done.append(f"event {i} args.{f}={v!r:.40}")
        elif op == "drop_field":
            f = rng.choice(FIELDS)
            ev[i].pop(f, None)
            done.append(f"event {i} without {f}")
        elif op == "dup":
            ev.insert(i, copy.deepcopy(ev[i]))
            done.append(f"event {i} duplicated")
        elif op == "drop" and len(ev) > 1:
            ev.pop(i)
            done.append(f"event {i} dropped")
        elif op == "shift" and isinstance(ev[i].get("ts"), int | float):
            k = rng.choice([1, 3, 5, 6, 7, 8, 9, 10, 12, 15])
            ev[i]["ts"] = ev[i]["ts"] - rng.choice([-1, 1]) * 10**k
            done.append(f"event {i} ts shifted by 1e{k}")
        elif op == "top":
            key, v = rng.choice(["traceEvents", "distributedInfo", "deviceProperties"]), \
                rng.choice(HOSTILE)
            doc[key] = v
            done.append(f"{key}={v!r:.40}")
            if key == "traceEvents":
                break
        else:
            doc.setdefault("distributedInfo", {})
            if isinstance(doc["distributedInfo"], dict):
                doc["distributedInfo"]["rank"] = rng.choice(HOSTILE)
                done.append(f"rank={doc['distributedInfo']['rank']!r:.40}")
    return doc, "; ".join(done)


def page_spans(path: Path) -> list[tuple[int, int]]:
    """(offset, length) of every column chunk's pages in a Parquet file (row group by row group)."""
    import pyarrow.parquet as pq

    md = pq.ParquetFile(path).metadata
    spans = []
    for g in range(md.num_row_groups):
        for j in range(md.num_columns):
            c = md.row_group(g).column(j)
            start = c.dictionary_page_offset if c.has_dictionary_page and \
                c.dictionary_page_offset else c.data_page_offset
            spans.append((start, c.total_compressed_size))
    return spans


def flip_byte(path: Path, pos: int, bit: int = 0) -> None:
    b = bytearray(path.read_bytes())
    b[pos] ^= 1 << bit
    path.write_bytes(bytes(b))


def tree(root: Path) -> dict[str, str]:
    """Every file and directory under ``root`` with a hash of each file (for "unchanged")."""
    if not root.exists():
        return {}
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            if p.is_file() else "dir" for p in sorted(root.rglob("*"))}


@dataclass
class Case:
    """One invocation and the outcome it must have."""

    cls: str
    argv: list[str]
    #: "error": must exit 2; "ok": must exit 0; "warn": exit 0 with ``needle`` in the output;
    #: "clean": exit 0 or a clean exit 2 are both acceptable
    expect: str
    what: str = ""
    needle: str = ""
    env: dict[str, str] = field(default_factory=dict)
    #: after the run: a description of what went wrong that the exit code cannot show, or None
    check: Callable[[], str | None] | None = None
    #: in the case's own process, before it runs (a fault to inject, a lower memory limit)
    setup: Callable[..., None] | None = None


def is_clean_error(code: int, err: str) -> bool:
    if code != 2 or "Traceback" in err:
        return False
    lines = [x for x in err.splitlines() if x.strip()]
    one = len(lines) == 1 and lines[0].startswith("mtia-trace: error: ")
    usage = any(x.lstrip("│ ").startswith(("Error:", "Invalid value", "No such option",
                                           "Missing")) for x in lines) or "Error" in err
    return one or usage


def classify(case: Case, code: int | None, out: str, err: str, crashed: bool,
             timed_out: bool, problem: str | None = None) -> tuple[str, str]:
    """(outcome, detail) for one finished (or killed) invocation; ``problem``: from its check."""
    if timed_out:
        return "hang", ""
    if crashed or "Traceback (most recent call last)" in err:
        return "traceback", err.strip().splitlines()[-1][:200] if err.strip() else ""
    if problem:
        if problem.startswith(WROTE):
            return "query wrote", problem[len(WROTE):]
        if problem.startswith(UNSAFE):
            return "unsafe output", problem[len(UNSAFE):]
        return "silent wrong", problem
    assert code is not None
    if case.expect == "any" and code in (0, 1):  # e.g. validate: 1 = the check failed
        return "clean exit 0", ""
    if case.expect in ("error", "clean", "any") and is_clean_error(code, err):
        if case.needle and case.needle not in err:
            return "wrong exit", f"message lacks {case.needle!r}: {err.strip()[:160]}"
        return "clean exit 2", ""
    if code == 0:
        if case.expect == "error":
            return "silent wrong", f"accepted: {case.what}"
        if case.expect == "warn" and case.needle not in out + err:
            return "silent wrong", f"no warning {case.needle!r}: {case.what}"
        return "clean exit 0", ""
    return "wrong exit", f"exit {code}: {err.strip()[-160:]}"


# -- case families ----------------------------------------------------------------------------

class Workspace:
    """Files the cases run against: traces, a stored run, specs; created once per campaign."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.run = root / "runs" / "base"
        self.good = root / "good.json"
        self.n = 0

    def build(self) -> Workspace:
        from runfixture import tiny_meta, tiny_tables

        from mtia_trace.storage import write_run

        self.root.mkdir(parents=True, exist_ok=True)
        write_run(tiny_tables(), self.run, tiny_meta())
        self.good.write_text(json.dumps(trace_doc()))
        return self

    def fresh(self, name: str) -> Path:
        self.n += 1
        d = self.root / "cases" / f"{self.n:06d}-{name}"
        d.mkdir(parents=True)
        return d


def ingest_mutation(ws: Workspace, rng: random.Random) -> Case:
    doc, what = mutate(trace_doc(steps=rng.choice([1, 2, 3])), rng, n=rng.choice([1, 1, 2, 3]))
    d = ws.fresh("mut")
    path = d / ("t.json.gz" if rng.random() < 0.2 else "t.json")
    text = json.dumps(doc).encode()
    path.write_bytes(gzip.compress(text) if path.name.endswith(".gz") else text)
    cmd = rng.choice(["inspect", "replay", "replay", "validate"])
    argv = {"inspect": ["inspect", str(path)],
            "replay": ["replay", str(path), "--hw", rng.choice(["mtia300", "h100"]), "--out",
                       str(d / "run"), "-q"],
            "validate": ["validate", str(path)]}[cmd]
    if cmd == "validate":
        return Case("ingest mutation", argv, "any", what)
    return Case("ingest mutation", argv, "clean", what, check=_no_partial_run(d))


def _written(folder: Path) -> Path:
    """The run `replay -o FOLDER` wrote for one target (FOLDER itself when it holds none)."""
    runs = [p for p in folder.iterdir() if (p / "run.json").is_file()] if folder.is_dir() else []
    return runs[0] if len(runs) == 1 else folder


def _half_written(folder: Path) -> str | None:
    """What is wrong in the folder `replay -o FOLDER` writes runs in: a temporary left, or a
    directory in it that is not a whole run (None: nothing, or only whole runs)."""
    if not folder.exists():
        return None
    if not folder.is_dir():
        return "the -o folder became something else"
    for p in folder.iterdir():
        if p.name.startswith(".") and ".tmp-" in p.name:
            return f"temporary left behind: {p.name}"
        if p.is_dir() and not (p / "run.json").is_file():
            return "half-written run directory"
    if not any(folder.iterdir()):
        return "empty -o folder left behind"
    return None


def _no_partial_run(d: Path) -> Callable[[], str | None]:
    def check() -> str | None:
        left = [p.name for p in d.iterdir() if p.name.startswith(".") and ".tmp-" in p.name]
        if left:
            return f"temporary left behind: {left}"
        return _half_written(d / "run")
    return check


def ingest_file(ws: Workspace, rng: random.Random) -> Case:
    d = ws.fresh("file")
    kind = rng.choice(["fifo", "dev", "bomb", "loop", "deep", "truncgz", "empty", "garbage",
                       "notjson", "nodir", "bigfile", "fifo_in_dir", "dangling"])
    path = d / "t.json"
    env: dict[str, str] = {}
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dev":
        path = Path("/dev/zero")
    elif kind == "bomb":
        path = d / "t.json.gz"
        path.write_bytes(gzip.compress(b" " * (8 * 2**20), compresslevel=9))
        env = {"MTIA_TRACE_MAX_BYTES": "1M"}
    elif kind == "bigfile":
        path.write_bytes(b" " * (2 * 2**20))
        env = {"MTIA_TRACE_MAX_BYTES": "1M"}
    elif kind == "loop":
        (d / "rank0.json").write_text(json.dumps(trace_doc()))
        (d / "rank1.json").symlink_to("rank1.json")
        path = d
    elif kind == "dangling":
        (d / "rank0.json").write_text(json.dumps(trace_doc()))
        (d / "rank1.json").symlink_to("nowhere.json")
        path = d
    elif kind == "fifo_in_dir":
        (d / "rank0.json").write_text(json.dumps(trace_doc()))
        os.mkfifo(d / "rank1.json")
        path = d
    elif kind == "deep":
        depth = rng.choice([2000, 5000, 50000])
        doc = trace_doc()
        target = rng.choice(["arg", "top", "events"])
        if target == "arg":
            doc["traceEvents"][2]["args"]["junk"] = "__DEEP__"
        elif target == "top":
            doc["junk"] = "__DEEP__"
        else:
            doc["traceEvents"].append("__DEEP__")
        deep = rng.choice(["[" * depth + "]" * depth,
                           '{"a":' * depth + "0" + "}" * depth])
        path.write_text(json.dumps(doc).replace('"__DEEP__"', deep))
    elif kind == "truncgz":
        path = d / "t.json.gz"
        data = gzip.compress(json.dumps(trace_doc()).encode())
        path.write_bytes(data[:rng.randrange(1, len(data))])
    elif kind == "empty":
        path.write_bytes(b"")
    elif kind == "garbage":
        path.write_bytes(bytes(rng.randrange(256) for _ in range(rng.randrange(1, 4096))))
    elif kind == "notjson":
        path.write_text(rng.choice(["[]", "{}", "null", "1", '"x"', '{"traceEvents": 1}',
                                    '{"traceEvents": [1, 2]}', '{"traceEvents": []}']))
    else:
        path = d / "missing"
    cmd = rng.choice(["inspect", "replay"])
    argv = [cmd, str(path)] + (["--hw", "mtia300", "--out", str(d / "run"), "-q"]
                               if cmd == "replay" else [])
    return Case("ingest file", argv, "error", kind, env=env)


def timestamps(ws: Workspace, rng: random.Random) -> Case:
    doc = trace_doc(steps=3)
    ev = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    d = ws.fresh("ts")
    kind = rng.choice(["zero", "shift", "all1e300", "allsame", "negdur", "hugedur"])
    expect = "error"
    if kind == "zero":
        rng.choice(ev)["ts"] = 0
    elif kind == "shift":
        k = rng.choice([1, 2, 3, 4, 5, 6, 7, 8, 9, 10])
        e = rng.choice(ev)
        e["ts"] -= 10**k
        expect = "clean"  # small shifts are plausible; large ones must be named
        kind = f"shift 1e{k} of {e['name']}"
    elif kind == "all1e300":
        for e in ev:
            e["ts"] = 1e300
    elif kind == "allsame":
        for e in ev:
            e["ts"] = EPOCH_US
        expect = "clean"
    elif kind == "negdur":
        rng.choice(ev)["dur"] = -5
    else:
        rng.choice(ev)["dur"] = 1e18
    path = d / "t.json"
    path.write_text(json.dumps(doc))
    argv = ["replay", str(path), "--hw", "mtia300", "--out", str(d / "run"), "-q"]
    return Case("timestamps", argv, expect, kind, check=_no_partial_run(d))


SPEC_VALUES = ["0", "-1", "1e-300", "1e300", "inf", "-inf", "nan", "abc", "", "1.5", "true",
               "99999999999999999999", "1e-9", "0.0001", "2", "1e6", "0x10", "ring", "none"]


def spec_override(ws: Workspace, rng: random.Random) -> Case:
    from replay.hardware import load_spec
    from replay.hardware.spec import validate_value

    hw = rng.choice(["mtia300", "h100"])
    spec = load_spec(hw)
    key = rng.choice(spec.keys())
    value = rng.choice(SPEC_VALUES)
    item = f"{key}={value}"
    replay = rng.random() < 0.25
    d = ws.fresh("spec")
    argv = (["replay", str(ws.good), "--hw", hw, "--set", item, "--out", str(d / "run"), "-q"]
            if replay else ["hw", "show", hw, "--set", item])

    def check() -> str | None:
        run = d / "run"
        if replay and (_written(run) / "steps.parquet").is_file():
            import numpy as np
            import pyarrow.parquet as pq
            t = pq.read_table(_written(run) / "steps.parquet")
            for c in t.column_names:
                if c.endswith("_us"):
                    a = t.column(c).to_numpy()
                    if not np.isfinite(a).all():
                        return f"--set {item}: run has non-finite {c}"
        return None

    expect = "clean"
    try:
        spec.with_overrides([item])
    except Exception:  # noqa: BLE001 - only deciding what the CLI must say
        expect = "error"
    else:
        try:
            validate_value(key, spec.with_overrides([item]).value(key), "x")
        except Exception:  # noqa: BLE001
            return Case("spec value", argv, "error", item, check=check)
    return Case("spec value", argv, expect, item, check=check)


def spec_file(ws: Workspace, rng: random.Random) -> Case:
    from importlib import resources
    src = Path(str(resources.files("replay.hardware") / "specs" / "h100.toml")).read_text()
    lines = src.splitlines()
    idx = [i for i, line in enumerate(lines) if "value = " in line]
    i = rng.choice(idx)
    kind = rng.choice(["value", "key", "drop", "section"])
    if kind == "value":
        v = rng.choice(['"abc"', "0", "-1", "1e-300", "inf", "nan", "true", "[1]",
                        "99999999999999999999"])
        head, _, rest = lines[i].partition("value = ")
        tail = rest[rest.index(","):] if "," in rest else " }"
        lines[i] = f"{head}value = {v}{tail}"
    elif kind == "key":
        name = lines[i].split("=", 1)[0].strip()
        lines[i] = lines[i].replace(name, name[:-1] + "x", 1)
    elif kind == "drop":
        lines.pop(i)
    else:
        lines.insert(i, "[bogus]")
    d = ws.fresh("specfile")
    path = d / "my.toml"
    path.write_text("\n".join(lines) + "\n")
    return Case("spec file", ["hw", "show", str(path)], "clean", f"{kind} at line {i + 1}")


SQL_WRITES = [
    "COPY events TO '{t}' (FORMAT parquet)", "COPY (SELECT 1 AS x) TO '{t}' (USE_TMP_FILE false)",
    "EXPORT DATABASE '{t}'", "ATTACH '{t}' AS x", "INSTALL httpfs", "LOAD httpfs",
    "LOAD '{t}'", "CREATE PERSISTENT SECRET s (TYPE s3, KEY_ID 'k', SECRET 'v')",
    "SET enable_external_access = true", "SET lock_configuration = false",
    "SET allowed_paths = ['{t}']", "PRAGMA enable_profiling = 'json'",
    "SET profile_output = '{t}'", "CALL enable_logging(storage_path := '{t}')",
    "SET temp_directory = '{t}'", "RESET lock_configuration",
]


def sql_write(ws: Workspace, rng: random.Random) -> Case:
    d = ws.fresh("sql")
    target = rng.choice([ws.run / "events.parquet", ws.run / "new.csv", d / "out.parquet",
                         Path("relative.csv")])
    stmt = rng.choice(SQL_WRITES).format(t=target)
    prefix = rng.choice(["", "", "EXPLAIN ", "EXPLAIN ANALYZE ", "explain analyze ",
                         "SELECT 1; ", "/* c */ ", "EXPLAIN (FORMAT json) "])
    sql = prefix + (stmt.lower() if rng.random() < 0.2 else stmt)
    before, cwd_before = tree(ws.run), tree(d)

    def check() -> str | None:
        if tree(ws.run) != before:
            return f"{WROTE}run changed by: {sql}"
        if tree(d) != cwd_before or Path("relative.csv").exists():
            return f"{WROTE}file written by: {sql}"
        return None

    return Case("sql write", ["query", str(ws.run), sql], "error", sql, check=check)


def output_dest(ws: Workspace, rng: random.Random) -> Case:
    d = ws.fresh("out")
    (d / "file").write_text("x")
    (d / "existing.txt").write_text("keep")
    kind = rng.choice(["in_run", "existing", "under_file", "too_long", "is_dir"])
    target = {"in_run": ws.run / rng.choice(["steps.parquet", "x.csv", "sub/x.md"]),
              "existing": d / "existing.txt", "under_file": d / "file" / "x.csv",
              "too_long": d / ("n" * 300), "is_dir": d}[kind]
    cmd = rng.choice([["query", str(ws.run), "SELECT * FROM steps", "-o"],
                      ["analyze", str(ws.run), "step_breakdown", "-o"],
                      ["report", str(ws.run), "-o"], ["export", str(ws.run), "--perfetto"],
                      ["compare", str(ws.run), str(ws.run), "-o"],
                      ["replay", str(ws.good), "--hw", "mtia300", "-q", "--out"]])
    if cmd[0] == "replay" and kind in ("existing", "is_dir"):
        kind = "under_file"
        target = d / "file" / "run"
    before, here = tree(ws.run), tree(d)

    def check() -> str | None:
        if tree(ws.run) != before:
            return f"run changed by {cmd[0]} -> {target}"
        if tree(d) != here:
            return f"{cmd[0]} wrote near {target}"
        return None

    return Case("output rule", [*cmd, str(target)], "error", f"{cmd[0]} {kind}", check=check)


def corrupt_run(ws: Workspace, rng: random.Random) -> Case:
    d = ws.fresh("corrupt")
    run = d / "run"
    shutil.copytree(ws.run, run)
    files = sorted(p for p in run.iterdir() if p.suffix in (".parquet", ".json"))
    f = rng.choice(files)
    kind = rng.choice(["truncate", "garbage", "empty", "delete", "dir", "json_junk",
                       "json_list", "swap", "flip", "page", "page", "old_schema"])
    expect = "error"
    check = None
    setup = None
    data = f.read_bytes()
    if kind == "truncate":
        f.write_bytes(data[:rng.randrange(0, len(data))])
    elif kind == "garbage":
        f.write_bytes(bytes(rng.randrange(256) for _ in range(len(data))))
    elif kind == "empty":
        f.write_bytes(b"")
    elif kind == "delete":
        f.unlink()
    elif kind == "dir":
        f.unlink()
        f.mkdir()
    elif kind == "json_junk":
        f = run / "run.json"
        f.write_text(rng.choice(["{", "", "\u0000", "[1,2", '{"schema_version": '
                                 '"99.0"}']))
    elif kind == "old_schema":
        f = run / "run.json"
        meta = json.loads(f.read_text())
        meta["schema_version"] = rng.choice(["1.0", "0.9", "0", "1"])
        f.write_text(json.dumps(meta))
    elif kind == "json_list":
        f = run / "run.json"
        f.write_text(rng.choice(["[]", "1", '"x"', "null"]))
    elif kind == "swap":
        other = rng.choice([p for p in files if p.suffix == ".parquet" and p != f] or [f])
        if f.suffix == ".parquet" and other != f:
            a, b = f.read_bytes(), other.read_bytes()
            f.write_bytes(b)
            other.write_bytes(a)
        else:
            f.write_bytes(b"")
    elif kind == "flip":
        expect = "clean"  # anywhere in the file: a byte of unused statistics may change nothing
        b = bytearray(data)
        if b:
            b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
        f.write_bytes(bytes(b))
    else:  # a flipped bit inside a column chunk's pages: refused, or (page header) harmless
        expect = "clean"
        f = rng.choice([p for p in files if p.suffix == ".parquet"])
        pick, at, bit = rng.random(), rng.random(), rng.randrange(8)

        def setup(_patch: object = None, f: Path = f) -> None:
            # in the case's own process: reading the footer loads Arrow, whose allocator maps
            # 1 GiB of address space, which every case forked after it would inherit (and the
            # memory-limit cases would start without room)
            spans = page_spans(f)
            start, size = spans[int(pick * len(spans))]
            flip_byte(f, start + int(at * size), bit)

        check = _same_data_or_refused(ws.run / f.name, f)
    table = f.stem if f.suffix == ".parquet" and f.stem != "run" else "events"
    cmd = rng.choice([["query", str(run), f"SELECT * FROM {table}"],
                      ["analyze", str(run)], ["report", str(run)],
                      ["export", str(run), "--perfetto", str(d / "p.json")],
                      ["compare", str(ws.run), str(run)], ["report", str(run), "--format",
                                                           "html"]])
    if cmd[0] == "compare":
        expect = "any" if expect == "clean" else expect
    return Case("corrupt run", cmd, expect, f"{kind} {f.name}",
                needle="was written by schema" if kind == "old_schema" else "", check=check,
                setup=setup)


def _same_data_or_refused(original: Path, corrupted: Path) -> Callable[[], str | None]:
    """After a page flip: the file must fail its checks, or decode to the original values."""
    def check() -> str | None:
        import pyarrow as pa
        import pyarrow.parquet as pq
        try:
            got = pq.read_table(corrupted, page_checksum_verification=True)
        except (OSError, pa.ArrowException):
            return None
        if not got.equals(pq.read_table(original)):
            return f"{corrupted.name}: flipped page decodes to other values unnoticed"
        return None
    return check


def arguments(ws: Workspace, rng: random.Random) -> Case:
    d = ws.fresh("args")
    out = ["--out", str(d / "run"), "-q"]
    g = str(ws.good)
    table = [
        (["replay", g, "--hw", "mtia300", "--seed", "-1", *out], "error", "--seed"),
        (["replay", g, "--hw", "mtia300", "--seed", str(2**64), *out], "error", "--seed"),
        (["replay", g, "--hw", "mtia300", "--seed", str(2**63), *out], "error", "--seed"),
        (["replay", g, "--hw", "mtia300", "--seed", "7", *out], "ok", ""),
        (["replay", g, "--hw", "", *out], "error", "--hw"),
        (["replay", g, "--hw", ",", *out], "error", "--hw"),
        (["replay", g, "--hw", " ", *out], "error", "--hw"),
        (["replay", g, "--hw", "mtia300", "--loss-rate", "2", *out], "error", ""),
        (["replay", g, "--hw", "mtia300", "--loss-rate", "nan", *out], "error", ""),
        (["synth", "-o", str(d / "s"), "--steps", "0"], "error", ""),
        (["synth", "-o", str(d / "s"), "--ranks", "-3"], "error", ""),
        (["synth", "-o", str(d / "s"), "--seed", "-1"], "error", "--seed"),
        (["synth", "-o", str(d / "s"), "--batch", "0"], "error", ""),
        (["synth", "-o", str(d / "s"), "--zipf", "nan"], "error", ""),
        (["query", str(ws.run), "SELECT [1,2] AS l, {'a': 1} AS s, INTERVAL 1 DAY AS i, "
          "union_value(k := 1) AS u", "--format", rng.choice(["csv", "json", "table",
                                                              "markdown"])], "ok", ""),
        (["query", str(ws.run), "SELECT [1,2] AS l, {'a': 1} AS s, INTERVAL 1 DAY AS i, "
          "union_value(k := 1) AS u, MAP {'k': 1} AS m", "--format", "parquet", "-o",
          str(d / "r.parquet")], "ok", ""),
        (["query", str(ws.run), "SELECT 1 AS a, 2 AS a", "--format", "json"], "clean", ""),
        (["query", str(ws.run), "SELECT 1 AS a, 2 AS a", "--format", "csv"], "clean", ""),
        (["query", str(ws.run), "SELECT 1 AS a, 2 AS a", "--format", "parquet", "-o",
          str(d / "dup.parquet")], "clean", ""),
        (["query", str(ws.run), "-f", str(d)], "error", ""),
    ]
    argv, expect, needle = rng.choice(table)

    def check() -> str | None:
        if argv[:1] == ["query"] and "AS a, 2 AS a" in argv[2] and "json" in argv:
            return None  # classified by the exit code; json output is checked in the tests
        return None

    return Case("arguments", argv, expect, " ".join(argv[:1] + argv[2:5])[:80], needle=needle,
                check=check)


def synth_bounds(ws: Workspace, rng: random.Random) -> Case:
    """Requests of every size under a lowered limit: refused in one line, or written in full."""
    d = ws.fresh("synthb")
    sharding = rng.choice(["tw", "rw", "cw", "twrw", "dp"])
    ranks = rng.choice([1, 2, 8, 16, 64, 1000, 10**5, 10**7])
    steps = rng.choice([1, 2, 5, 10**3, 10**5, 10**9])
    # limits low enough that what is accepted is small (a case must stay fast)
    env = rng.choice([{"MTIA_TRACE_SYNTH_MAX_MEMORY": rng.choice(["32M", "128M"])},
                      {"MTIA_TRACE_SYNTH_MAX_MEMORY": "128M",
                       "MTIA_TRACE_SYNTH_MAX_BYTES": rng.choice(["1K", "1M", "4M"])}])
    argv = ["synth", "-o", str(d / "t"), "--ranks", str(ranks), "--steps", str(steps),
            "--sharding", sharding, "--batch", str(ranks * rng.choice([1, 64]))]

    def check() -> str | None:
        out = d / "t"
        if out.exists() and len(list(out.iterdir())) != ranks:
            return f"{len(list(out.iterdir()))} files for {ranks} ranks"
        left = [p.name for p in d.iterdir() if p.name.startswith(".")]
        return f"temporary left behind: {left}" if left else None

    return Case("synth bounds", argv, "clean", f"{ranks} ranks x {steps} steps {sharding} "
                f"{env}", env=env, check=check)


def query_stream(ws: Workspace, rng: random.Random) -> Case:
    """Large and failing results through every format, to the terminal and to files."""
    d = ws.fresh("qs")
    n = rng.choice([0, 1, 5, 10**4, 10**6, 3 * 10**6])
    body = rng.choice(["range AS x", "range AS x, 'ab' AS y", "range AS x, [range] AS l",
                       "CAST(CASE WHEN range < {h} THEN '1' ELSE 'x' END AS INT) AS v",
                       "range // 0 AS z", "INTERVAL 1 DAY * range AS i"]).format(h=n // 2)
    sql = f"SELECT {body} FROM range({n})"
    fmt = rng.choice(["table", "csv", "json", "markdown", "parquet"])
    out = d / f"r.{fmt}"
    to_file = fmt == "parquet" or rng.random() < 0.5
    argv = ["query", str(ws.run), sql, "--format", fmt] + (["-o", str(out)] if to_file else [])
    if not to_file and rng.random() < 0.5:
        argv += ["--max-rows", str(rng.choice([0, 1, 50]))]
    if fmt == "table" and to_file and n > 10**5:
        n = 10**5  # a table file holds every row to align them: keep it small
        argv[2] = sql = f"SELECT {body} FROM range({n})"

    def check() -> str | None:
        if out.exists() and fmt in ("csv", "json"):
            text = out.read_text()
            rows = text.count("\n") - 1 if fmt == "csv" else (text.count("},{") + 1 if n else 0)
            if rows != n and "x" not in body:
                return f"{fmt} file has {rows} rows, expected {n}"
        left = [p.name for p in d.iterdir() if p.name.startswith(".")]
        return f"temporary left behind: {left}" if left else None

    return Case("query stream", argv, "clean", sql[:60] + f" {fmt}", check=check)


# ---- output escaping -------------------------------------------------------------------------
# Names from a trace that attack where they are shown: a terminal (escape sequences, bidi
# overrides), Markdown in a CI job summary (headings, HTML, links) and the HTML report (the end
# of its script). Each case renders a trace (or a run) whose op, thread and annotation names are
# hostile to a file in one format and checks that none of them arrives there raw.

HOSTILE_NAMES = [
    "\x1b]52;c;SU5KRUNURUQ=\x07clip", "\x1b]8;;https://evil.example\x1b\\link\x1b]8;;\x1b\\",
    "op\x1b[2K\rPASS", "\x1b[8mhidden\x1b[0m", "txt\u202eINJECTED\u202c", "del\x7f\x9b31m",
    "x\n## INJECTED heading", "y\r# INJECTED", "<img src=x onerror=alert(1)>",
    "<details><summary>INJECTED</summary>", "[INJECTED](https://evil.example)",
    "<!--<script>", "</script><script>alert(1)</script>", "a|b`c``d", "&amp;<b>INJECTED</b>",
]
_RAW_HTML = re.compile(r"(?<!\\)<\s*(img|details|summary|script|b|!--)", re.I)


def _unsafe_text(text: str, fmt: str) -> str | None:
    """What in ``text`` (an output in ``fmt``) is a hostile name arriving raw, or None."""
    from mtia_trace.escape import has_unsafe
    body = text.replace("\n", "").replace("\t", "")
    if fmt in ("table", "md") and has_unsafe(body):
        return f"{fmt}: a control or bidi character"
    if fmt == "md":
        raw = re.sub(r"\\.", "", text)
        if re.search(r"^\s{0,3}#{1,6}\s*INJECTED", text, re.M):
            return "md: a name started a heading"
        if _RAW_HTML.search(raw) or "](https://evil" in raw:
            return "md: raw HTML or a link from a name"
    if fmt == "html":
        if "<!--<script>" in text or "alert(1)</script>" in text or "<b>INJECTED" in text:
            return "html: a name ends or changes the page's markup"
        for data in re.findall(r'<script type="application/json">(.*?)</script>', text, re.S):
            if set("<>&") & set(data):
                return "html: <, > or & raw in the embedded JSON"
    return None


def _hostile_trace(d: Path, rng: random.Random) -> Path:
    doc = trace_doc(steps=2)
    names = rng.sample(HOSTILE_NAMES, k=rng.choice([1, 2, 4]))
    for e in doc["traceEvents"]:
        if e.get("name") in ("aten::mm", "sm80_gemm") or e.get("ph") == "M":
            target = e["args"] if e.get("ph") == "M" else e
            target["name"] = rng.choice(names)
    doc["traceEvents"].append({"ph": "X", "cat": "user_annotation", "name": rng.choice(names),
                               "pid": 1, "tid": 1, "ts": EPOCH_US + 1005, "dur": 80})
    path = d / "t.json"
    path.write_text(json.dumps(doc))
    return path


def output_escaping(ws: Workspace, rng: random.Random) -> Case:
    d = ws.fresh("escape")
    trace = _hostile_trace(d, rng)
    run = d / "run"
    out = d / "out"
    cmd = rng.choice(["analyze", "query", "whatif", "report", "report-html", "diff"])
    fmt = {"report-html": "html", "report": "md"}.get(cmd, rng.choice(["table", "md"]))
    ingest_first = cmd in ("analyze", "query", "report", "report-html")
    if cmd == "whatif":
        argv = ["whatif", str(trace), "--top", "5", "--format", fmt, "-o", str(out), "-q"]
    elif cmd == "diff":
        argv = ["diff", str(trace), str(trace), "--format", "md" if fmt == "md" else "text",
                "-o", str(out), "-q"]
    else:
        argv = []

    def check() -> str | None:
        from mtia_trace.cli import main
        if ingest_first:
            code = main(["replay", str(trace), "--hw", "mtia300", "-o", str(run), "-q"])
            if code != 0:
                return None  # refused: nothing rendered
            sub = {"analyze": ["analyze", str(run), "top_ops", "critical_path", "--format", fmt],
                   "query": ["query", str(run), "SELECT DISTINCT name, track FROM events",
                             "--format", fmt],
                   "report": ["report", str(run), "--format", "md"],
                   "report-html": ["report", str(run), "--format", "html"]}[cmd]
            if main([*sub, "-o", str(out)]) != 0:
                return None
        if not out.exists():
            return None
        found = _unsafe_text(out.read_text(errors="replace"), fmt)
        return UNSAFE + found + f" ({cmd})" if found else None

    if ingest_first:  # the case's own run happens in check(), after this harmless call
        argv = ["inspect", str(trace)]
    return Case("output escaping", argv, "clean", f"{cmd} {fmt}", check=check)


FAMILIES: dict[str, Callable[[Workspace, random.Random], Case]] = {
    "ingest mutation": ingest_mutation,
    "ingest file": ingest_file,
    "timestamps": timestamps,
    "spec value": spec_override,
    "spec file": spec_file,
    "sql write": sql_write,
    "output rule": output_dest,
    "corrupt run": corrupt_run,
    "arguments": arguments,
    "synth bounds": synth_bounds,
    "query stream": query_stream,
    "output escaping": output_escaping,
}


# == families: multi-rank consistency, faults during writes, input shapes, the timestamp window,
# memory limits =================================================================================
# (kept in one block: other families are appended in blocks of their own)

import errno  # noqa: E402
import gzip as _gzip  # noqa: E402
import sys  # noqa: E402

from rank_edits import EDITS, EXPECT_ERROR, NEEDLES, edit, write_docs  # noqa: E402

#: Families whose setup changes the process (a lower memory limit): run only in a forked child.
FORK_ONLY = {"memory limits"}


def _in_child(fn: Callable[[], None]) -> None:
    """Run ``fn`` in a forked child when this process has not loaded Arrow yet (the campaign's
    parent stays free of Arrow threads before it forks), else here."""
    if "pyarrow" in sys.modules:
        fn()
        return
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            fn()
            code = 0
        finally:
            os._exit(code)
    os.waitpid(pid, 0)


def _synth8(ws: Workspace) -> dict[int, dict]:
    """The workspace's consistent 8-rank synthetic trace, as documents (made once)."""
    out = ws.root / "synth8"
    if not (out / "rank7.pt.trace.json.gz").is_file():
        from mtia_trace.cli import main as cli_main

        _in_child(lambda: None if cli_main(["synth", "-o", str(out), "--ranks", "8", "--steps",
                                            "2"]) == 0 else sys.exit(1))
    docs = getattr(ws, "_synth8_docs", None)
    if docs is None:
        docs = {}
        for f in sorted(out.glob("*.json.gz")):
            doc = json.loads(_gzip.decompress(f.read_bytes()))
            docs[doc["distributedInfo"]["rank"]] = doc
        ws._synth8_docs = docs  # type: ignore[attr-defined]
    return docs


def multi_rank(ws: Workspace, rng: random.Random) -> Case:
    """An 8-rank trace with one rank edited so the ranks disagree: warned about (inspect,
    replay and run.json) or, where no schedule exists, refused in one line."""
    docs = _synth8(ws)
    kind = rng.choice([*EDITS, "none"])
    rank = rng.randrange(1, 8)
    d = ws.fresh("ranks")
    trace = write_docs(docs if kind == "none" else docs | {rank: edit(docs, kind, rank, rng)},
                       d / "t")
    cmd = rng.choice(["inspect", "replay"])
    run = d / "run"
    argv = ["inspect", str(trace)] if cmd == "inspect" else \
        ["replay", str(trace), "--hw", rng.choice(["mtia300", "h100"]), "-o", str(run)]
    what = f"{kind} on rank {rank}: {cmd}"
    if kind == "none":
        return Case("multi-rank consistency", argv, "ok", what, check=_no_partial_run(d))
    needle = NEEDLES[kind]
    if kind in EXPECT_ERROR:
        return Case("multi-rank consistency", [*argv, "-q"] if cmd == "replay" else argv,
                    "error", what, needle=needle, check=_no_partial_run(d))

    def check() -> str | None:
        problem = _no_partial_run(d)()
        if problem or cmd != "replay" or not (_written(run) / "run.json").is_file():
            return problem
        warned = json.loads((_written(run) / "run.json").read_text()).get("warnings", [])
        return None if any(needle in w for w in warned) else f"run.json lacks {needle!r}"

    return Case("multi-rank consistency", argv, "warn", what, needle=needle, check=check)


#: Where outputs are written: a fault injected here is a full disk.
_WRITERS = (("mtia_trace.storage", "write_table"), ("mtia_trace.synth.generate", "write_trace"),
            ("pathlib", "Path.write_bytes"), ("pathlib", "Path.write_text"),
            ("mtia_trace.cli.output", "_write_parquet"))


def _disk_full_after(k: int, patch: Callable[[object, str, object], None]) -> None:
    """Every write through `_WRITERS` after the first ``k`` raises ENOSPC."""
    import importlib

    calls = [0]
    for mod, attr in _WRITERS:
        owner: object = importlib.import_module(mod)
        *path, name = attr.split(".")
        for p in path:
            owner = getattr(owner, p)
        original = getattr(owner, name)

        def failing(*a: object, _orig: Callable = original, **kw: object) -> object:
            calls[0] += 1
            if calls[0] > k:
                raise OSError(errno.ENOSPC, "No space left on device")
            return _orig(*a, **kw)

        patch(owner, name, failing)


def write_faults(ws: Workspace, rng: random.Random) -> Case:
    """A full disk after the first k writes of a command that writes: one line (or, when the
    command writes fewer times, success), nothing half-written, no temporary left."""
    d = ws.fresh("enospc")
    k = rng.choice([0, 0, 1, 2, 4])
    cmd = rng.choice([
        ["replay", str(ws.good), "--hw", "mtia300", "-q", "-o", str(d / "out")],
        ["synth", "-o", str(d / "out"), "--ranks", "2", "--steps", "1"],
        ["report", str(ws.run), "-o", str(d / "out")],
        ["export", str(ws.run), "--perfetto", str(d / "out")],
        ["query", str(ws.run), "SELECT * FROM steps", "--format", "parquet", "-o",
         str(d / "out")],
        ["sweep", str(ws.good), "--hw", "mtia300", "--vary", "comm.message_engines=4,8", "-q",
         "-o", str(d / "out")],
    ])
    before = tree(ws.run)

    def check() -> str | None:
        left = [p.name for p in d.iterdir() if p.name.startswith(".")]
        if left:
            return f"left behind: {left}"
        if tree(ws.run) != before:
            return "the input run changed"
        return _half_written(d / "out") if cmd[0] == "replay" else None

    def setup(patch: Callable[[object, str, object], None] = setattr) -> None:
        _disk_full_after(k, patch)

    return Case("faults during writes", cmd, "clean", f"{cmd[0]} with ENOSPC after {k} writes",
                needle="space left on device" if k == 0 and cmd[0] != "synth" else "",
                check=check, setup=setup)


def _events_file(path: Path, events: list[dict], extra: dict | None = None) -> Path:
    path.write_text(json.dumps({"traceEvents": events, **(extra or {})}))
    return path


def input_shape(ws: Workspace, rng: random.Random) -> Case:
    """Inputs whose cost grows with their shape: many identical or deeply nested events, many
    threads, steps, ranks or collectives, a very long name. They finish (or are refused) within
    the campaign's time limit."""
    d = ws.fresh("shape")
    kind = rng.choice(["identical", "nested", "threads", "steps", "ranks", "collectives",
                       "long_name"])
    x = {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1}
    n = rng.choice([50_000, 100_000, 200_000])
    path = d / "t.json"
    if kind == "identical":
        _events_file(path, [{**x, "ts": 1000.0, "dur": 10.0}] * n)
    elif kind == "nested":
        _events_file(path, [{**x, "ts": 1000.0 + i, "dur": 4.0 * n - 2 * i} for i in range(n)])
    elif kind == "threads":
        _events_file(path, [{**x, "tid": i, "ts": 1000.0 + i, "dur": 5.0}
                            for i in range(n // 5)])
    elif kind == "steps":
        _events_file(path, [{**x, "cat": "user_annotation", "name": f"ProfilerStep#{i}",
                             "ts": 1000.0 + 10 * i, "dur": 9.0} for i in range(n // 5)])
    elif kind == "ranks":
        path = d / "t"
        path.mkdir()
        for r in range(rng.choice([200, 500])):
            (path / f"rank{r}.json").write_text(json.dumps(trace_doc(rank=r, steps=1, world=500)))
    elif kind == "collectives":
        path = d / "t"
        path.mkdir()
        for r in range(2):
            ev = [{**x, "name": "record_param_comms", "ts": 1000.0 + 10 * i, "dur": 5.0,
                   "args": {"Seq": i, "Collective name": "allreduce", "In msg nelems": 1024,
                            "Out msg nelems": 1024, "dtype": "Float", "Group size": 2,
                            "Process Group Name": "0"}} for i in range(n // 10)]
            _events_file(path / f"rank{r}.json", ev,
                         {"distributedInfo": {"rank": r, "world_size": 2}})
    else:
        _events_file(path, [{**x, "name": "n" * rng.choice([10**5, 10**6, 10**7]), "ts": 1000.0,
                             "dur": 10.0}])
    cmd = rng.choice(["inspect", "replay"])
    argv = ["inspect", str(path)] if cmd == "inspect" else \
        ["replay", str(path), "--hw", "mtia300", "-q", "-o", str(d / "run")]
    return Case("input shape", argv, "clean", f"{kind} x{n}: {cmd}", check=_no_partial_run(d))


def timestamp_window(ws: Workspace, rng: random.Random) -> Case:
    """Times near and past the int64-nanosecond window: replayed as measured to the step, or
    refused in one line; never replayed wrong."""
    d = ws.fresh("tswin")
    doc = trace_doc(steps=3)
    xs = [e for e in doc["traceEvents"] if "ts" in e]
    kind = rng.choice(["near_max", "past_max", "2^63ns", "near_min", "past_min", "1e17",
                       "2^53us", "huge_dur", "one_rank"])
    t0 = min(e["ts"] for e in xs)
    to = {"near_max": 3e15 - 1e4, "past_max": 3e15 + 1e4, "2^63ns": 2**63 / 1000,
          "near_min": -3e15, "past_min": -3e15 - 1e4, "1e17": 1e17, "2^53us": 2.0**53,
          "huge_dur": t0, "one_rank": t0}[kind]
    for e in xs:
        e["ts"] = e["ts"] - t0 + to
    if kind == "huge_dur":
        doc["traceEvents"][1]["dur"] = rng.choice([3e15, 3e15 + 1, 1e16])
    path = d / "t.json"
    if kind == "one_rank":  # two ranks, one shifted far: the skew is named, not replayed wrong
        path = d / "t"
        path.mkdir()
        other = trace_doc(rank=1, steps=3, world=2)
        for e in other["traceEvents"]:
            if "ts" in e:
                e["ts"] += rng.choice([1e12, 1e15])
        doc["distributedInfo"]["world_size"] = 2
        (path / "rank0.json").write_text(json.dumps(doc))
        (path / "rank1.json").write_text(json.dumps(other))
    else:
        path.write_text(json.dumps(doc))
    run = d / "run"
    argv = ["replay", str(path), "-q", "-o", str(run)]  # as measured: must reproduce the trace

    def check() -> str | None:
        problem = _no_partial_run(d)()
        if problem or not (_written(run) / "steps.parquet").is_file():
            return problem
        import numpy as np
        import pyarrow.parquet as pq
        t = pq.read_table(_written(run) / "steps.parquet")
        total, measured = t.column("total_us").to_numpy(), t.column("measured_us").to_numpy()
        if not (np.isfinite(total).all() and np.isfinite(measured).all()):
            return f"{kind}: non-finite step times"
        if measured.size and (np.abs(total - measured) > 1e-3 * np.maximum(measured, 1.0)
                              + 1.0).any():
            return f"{kind}: as-measured replay gives {total.tolist()} for {measured.tolist()}"
        return None

    return Case("timestamp window", argv, "clean", kind, check=check)


def _cached(ws: Workspace, name: str, make: Callable[[Path], None]) -> Path:
    path = ws.root / name
    if not path.exists():
        make(path)
    return path


def _whitespace_gz(path: Path) -> None:
    with _gzip.open(path, "wb", compresslevel=1) as fh:
        block = b" " * 2**24
        for _ in range(96):  # 1.5 GiB of leading whitespace
            fh.write(block)
        fh.write(json.dumps(trace_doc()).encode())


def memory_limits(ws: Workspace, rng: random.Random) -> Case:
    """Work under a memory limit below the campaign's own: a clean result or one line
    ("out of memory"), never a traceback."""
    d = ws.fresh("mem")
    limit = rng.choice([1, 2, 3]) * 2**30
    kind = rng.choice(["whitespace", "identical", "query", "synth"])
    env: dict[str, str] = {}
    if kind == "whitespace":
        argv = ["inspect", str(_cached(ws, "ws.json.gz", _whitespace_gz))]
    elif kind == "identical":
        big = _cached(ws, "same1m.json", lambda p: _events_file(
            p, [{"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1,
                 "ts": 1000.0, "dur": 10.0}] * 1_000_000))
        argv = rng.choice([["inspect", str(big)],
                           ["replay", str(big), "--hw", "mtia300", "-q", "-o", str(d / "run")]])
    elif kind == "query":
        argv = ["query", str(ws.run), "SELECT list(range) AS l FROM range(200000000)",
                "--format", "csv", "-o", str(d / "q.csv")]
    else:
        env = {"MTIA_TRACE_SYNTH_MAX_MEMORY": "64G", "MTIA_TRACE_SYNTH_MAX_BYTES": "64G"}
        argv = ["synth", "-o", str(d / "t"), "--ranks", "64", "--steps", "4"]

    def setup(patch: Callable[[object, str, object], None] = setattr) -> None:
        import resource
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    return Case("memory limits", argv, "clean", f"{kind} under {limit >> 30} GiB", env=env,
                check=_no_partial_run(d), setup=setup)


FAMILIES.update({
    "multi-rank consistency": multi_rank,
    "faults during writes": write_faults,
    "input shape": input_shape,
    "timestamp window": timestamp_window,
    "memory limits": memory_limits,
})
