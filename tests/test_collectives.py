"""The collective model: hand-computed cases per algorithm x protocol, the tuner's choice,
monotonicity, same-spec comparisons, spec keys that matter and sources a user can open,
`hw collective`, and the validation against published nccl-tests tables (when present)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np
import orjson
import pytest

from replay.hardware import list_specs, load_spec, model_for
from replay.hardware.collectives import (
    ALGORITHMS,
    OPS,
    PROTOCOLS,
    busbw_factor,
    collective_costs,
    nccl_tests_rows,
)
from tests.conftest import NCCL_TABLES
from tests.conftest import invoke_cli as cli

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
import validate_collectives as vc  # noqa: E402

MB, GB = 1 << 20, 1 << 30


#: NCCL's tuning model alone: the as-run pipeline fill (calibrated) set aside
TUNING = ("comm.fill_chunks=0",)


def one(hw: str, op: str, p: int, size: float, sets: tuple[str, ...] = TUNING,
        rpn: int | None = None):
    spec = load_spec(hw, [*sets, *([f"network.ranks_per_node={rpn}"] if rpn else [])])
    c = collective_costs(spec, np.array([OPS.index(op)]), np.array([size]), np.array([size]),
                         np.array([p]))
    return (float(c.collective_us[0]), float(c.post_us[0]), ALGORITHMS[c.algorithm[0]],
            PROTOCOLS[c.protocol[0]])


def forced(a: str, p: str) -> tuple[str, ...]:
    return (*TUNING, f"comm.algorithm={a}", f"comm.protocol={p}")


# h100: NVLink 450 GB/s x 0.824 = 370.8 GB/s per rank; NIC 50 x 0.96 = 48 GB/s per rank
B, NIC = 370800.0, 48000.0   # bytes/us
N1 = 1 << 20                 # 1 MiB; log2(N1 / 64) = 14 for the tree correction
CASES = [
    # ring, one node of 8: base + 2(p-1) NVLink steps; busbw -> algbw x p / 2(p-1)
    ("ring", "simple", 8, N1, 8.4 + 14 * 3.4 + N1 / (B * 8 / 14)),
    ("ring", "ll", 8, N1, 6.6 + 14 * 0.6 + N1 / (min(141000.0, 0.5 * B) * 8 / 14)),
    ("ring", "ll128", 8, N1, 14.0 + 14 * 1.9 + N1 / (min(0.92 * B, 16 * 36700.0) * 8 / 14)),
    # tree, one node: NCCL's chain, base + 2 (8 / 1 - 1) NVLink steps (tuning.cc
    # ncclTopoTuneModel); algbw = 0.5 busbw x correction (row, index 14)
    ("tree", "simple", 8, N1, 8.4 + 2 * 7 * 4.0 + N1 / (0.5 * min(0.92 * B, 16 * 38700.0) * .5)),
    ("tree", "ll", 8, N1, 6.8 + 2 * 7 * 0.6
     + N1 / (0.5 * min(min(0.92 * B, 16 * 38700.0) / 3.8, 141000.0) * .5)),
    ("tree", "ll128", 8, N1, 14.0 + 2 * 7 * 1.25
     + N1 / (0.5 * min(min(0.92 * B, 16 * 38700.0) * 7 / 9, 16 * 36700.0) * .6)),
    # NVLS: 8 channels at NCCL's 40 GB/s search step (370.8 / 8 = 46.35), x 0.85 x 7/8 x 2
    ("nvls", "simple", 8, N1, 25.0 + N1 / (8 * 40000.0 * 0.85 * 7 / 8 * 2 * 8 / 14)),
    # two nodes of 8, 1 GiB: ring over the node's 8 NICs (min(370.8, 8 x 48)), post floor x3
    # on the NVLink steps, 2(N-1) network steps, x1.4 plateau
    ("ring", "simple", 16, GB, (8.4 + 28 * max(3.4, 3.0) + 2 * 14.0) * 1.4
     + GB / (min(B, 8 * NIC) * 16 / 30)),
    ("ring", "ll", 16, GB, 6.6 + 28 * max(0.6, 1.0) + 2 * 2.7
     + GB / (min(39000.0, 0.5 * B) * 16 / 30)),
    # NVLS-tree: min(NVLS 59.5, 2 x NIC step 48, cap 57.7) per channel x 8 channels
    ("nvls_tree", "simple", 16, GB, 25.0 + 2 * 1 * 20.9 + GB / (8 * 57700.0 * 16 / 30)),
    # tree over 2 nodes of 8: a 7-step chain in each node and log2i(2) = 1 network level
    ("tree", "simple", 16, GB, 8.4 + 2 * (7 * 4.0 + 1 * 14.0)
     + GB / (0.5 * min(0.92 * B, 16 * 38700.0) * 1.0)),
    # small messages run on fewer of the 16 channels (NCCL's enqueue: a channel per
    # comm.channel_*_bytes, threads x bytes per thread), at that share of the bandwidth. Ring LL:
    # 512 x 8 B x 8 ranks = 32 KiB per channel, so 64 KiB runs on 2
    ("ring", "ll", 8, 64 * 1024, 6.6 + 14 * 0.6
     + 64 * 1024 / (min(141000.0, 0.5 * B) * 8 / 14 * 2 / 16)),
    # ring Simple: 512 x 64 B = 32 KiB per channel, so 256 KiB runs on 8
    ("ring", "simple", 8, 256 * 1024, 8.4 + 14 * 3.4 + 256 * 1024 / (B * 8 / 14 * 8 / 16)),
    # tree LL128: 640 x 8 B = 5 KiB per channel, so 16 KiB runs on 3; tree correction index
    # log2(16 KiB / 64) = 8
    ("tree", "ll128", 8, 16 * 1024, 14.0 + 2 * 7 * 1.25
     + 16 * 1024 / (0.5 * min(min(0.92 * B, 16 * 38700.0) * 7 / 9, 16 * 36700.0) * .8 * 3 / 16)),
]


@pytest.mark.parametrize("alg, proto, p, size, want", CASES,
                         ids=[f"{c[0]}-{c[1]}-{c[2]}" for c in CASES])
def test_all_reduce_by_hand(alg: str, proto: str, p: int, size: int, want: float) -> None:
    t, post, a, q = one("h100", "all_reduce", p, size, forced(alg, proto))
    assert (a, q) == (alg, proto)
    assert t == pytest.approx(want, rel=1e-9) and post == 0.0


def test_collnet_and_direct_by_hand() -> None:
    t, _, a, _ = one("h100", "all_reduce", 16, GB, ("comm.collnet=true", *forced("collnet", "simple")))
    assert a == "collnet"
    assert t == pytest.approx(2 * 7 * 2.8 + 30.0 + GB / (0.5 * min(B, 8 * NIC)))
    # direct all-to-all over 2 nodes: one step of the slowest link class, in-node and off-node
    # parts at once, one NIC post (1 us) per off-node peer
    s = 16 * MB
    t, post, a, q = one("h100", "all_to_all", 16, s, ("comm.protocol=simple",))
    assert (a, q) == ("direct", "simple")
    assert t == pytest.approx(8.4 + max(3.4, 14.0) + max(7 / 16 * s / B, 8 / 16 * s / NIC))
    assert post == pytest.approx(8 * 1.0)
    # all_gather / reduce_scatter take the whole buffer; ring algbw = busbw x p / (p - 1)
    t, _, _, _ = one("h100", "all_gather", 8, GB, forced("ring", "simple"))
    assert t == pytest.approx(8.4 + 7 * 3.4 + GB / (B * 8 / 7))


def _battery(p_list=(2, 8, 16, 40), ops=("all_reduce", "all_gather", "reduce_scatter",
                                         "all_to_all", "broadcast")):
    sizes = [8, 4096, 256 * 1024, 8 * MB, 256 * MB, 4 * GB]
    rows = [(op, p, s) for op in ops for p in p_list for s in sizes]
    op = np.array([OPS.index(r[0]) for r in rows])
    p = np.array([r[1] for r in rows])
    s = np.array([float(r[2]) for r in rows])
    return op, p, s


def _times(spec, op, p, s) -> np.ndarray:
    c = collective_costs(spec, op, s, s, p)
    return c.collective_us + c.post_us


@pytest.mark.parametrize("hw", ["h100", "a100", "mtia300"])
def test_auto_picks_the_cheapest(hw: str) -> None:
    op, p, s = _battery()
    extra = ("comm.collnet=true", *TUNING) if hw == "h100" else TUNING
    auto = collective_costs(load_spec(hw, extra), op, s, s, p)
    t_auto = auto.collective_us + auto.post_us
    best = np.full(len(op), np.inf)
    for a in ALGORITHMS[:-2]:  # hierarchical only when named; direct is the all-to-all's own
        for q in PROTOCOLS:
            c = collective_costs(load_spec(hw, [*extra, *forced(a, q)]), op, s, s, p)
            t = c.collective_us + c.post_us
            ran = (np.array(ALGORITHMS)[c.algorithm] == a) & (np.array(PROTOCOLS)[c.protocol] == q)
            assert (t_auto <= t + 1e-9).all()   # never beaten by a forced choice
            best = np.where(ran, np.minimum(best, t), best)
    direct = op == OPS.index("all_to_all")
    assert np.allclose(t_auto[~direct], best[~direct], rtol=1e-12)


@pytest.mark.parametrize("hw", ["h100", "a100", "mtia300"])
def test_smaller_rack_never_faster(hw: str) -> None:
    """Splitting a group over smaller racks never speeds a ring (and an all-to-all) up. Not so
    NCCL's tree, a chain of the node's ranks
    (`test_tree_chain_in_a_large_rack_outlasts_the_same_ranks_over_racks`), so auto, which
    may pick one, is checked here on the ring only (a binary tree:
    `test_binary_tree_in_a_smaller_rack_never_faster`)."""
    op, p, s = _battery(p_list=(8, 16, 40))
    prev = None
    for rpn in (72, 40, 16, 8, 4, 3, 2, 1):
        t = _times(load_spec(hw, [f"network.ranks_per_node={rpn}", "comm.algorithm=ring"]),
                   op, p, s)
        if prev is not None:
            assert (t >= prev * (1 - 1e-12)).all(), rpn
        prev = t


@pytest.mark.parametrize("hw", ["h100", "a100", "mtia300"])
@pytest.mark.parametrize("knob", ["network.intra_node_GBps", "network.inter_node_GBps",
                                  "comm.intra_efficiency", "comm.inter_efficiency"])
def test_more_bandwidth_never_slower(hw: str, knob: str) -> None:
    op, p, s = _battery()
    base = float(load_spec(hw).value(knob))
    prev = None
    for f in (0.25, 0.5, 1.0):
        t = _times(load_spec(hw, [f"{knob}={base * f}"]), op, p, s)
        if prev is not None:
            assert (t <= prev * (1 + 1e-12)).all()
        prev = t


def test_same_spec_on_both_sides_gives_ratio_one() -> None:
    op, p, s = _battery()
    path = ROOT / "replay" / "hardware" / "specs" / "h100.toml"
    a = _times(load_spec("h100"), op, p, s)
    b = _times(load_spec(str(path)), op, p, s)
    c = _times(load_spec("h100", ["hbm.capacity_GB=40"]), op, p, s)  # not a collective value
    assert a.sum() / b.sum() == 1.0 and a.sum() / c.sum() == 1.0


def _perturbed(spec, key: str) -> str:
    v = spec.value(key)
    if isinstance(v, bool):
        return f"{key}={'false' if v else 'true'}"
    if isinstance(v, str):
        choices = spec.entries[key].choices
        return f"{key}={next(c for c in choices if c != v)}"
    if key == "network.ranks_per_node":
        return f"{key}=2"
    if key.endswith("_us"):
        return f"{key}={v + 100}"
    if key.endswith("efficiency"):
        return f"{key}={v / 2}"
    if isinstance(v, int):
        return f"{key}={max(1, v // 4) if v >= 4 else v * 4}"
    return f"{key}={v * 0.01}"  # bandwidths and caps: low enough to bind


def _fingerprint(spec) -> tuple:
    m = model_for(spec)
    op, p, s = _battery(p_list=(2, 8, 16, 40, 100, 200))
    c = collective_costs(spec, op, s, s, p, share=m.pool_capacity()
                         if m.link_sharing() == "split" else 1)
    out = [c.collective_us, c.post_us, c.nic_bytes,
           np.array([r.time_us for r in nccl_tests_rows(spec, "all_reduce", 8, [8], 8)])]
    # each algorithm and each protocol named once, so values that bind only there show
    for item in [f"comm.algorithm={a}" for a in ALGORITHMS[:-1]] + [
            f"comm.protocol={q}" for q in PROTOCOLS]:
        fc = collective_costs(spec.with_overrides([item]), op, s, s, p)
        out.append(fc.collective_us + fc.post_us)
    return (tuple(np.round(np.concatenate(out), 9).tolist()), m.pool_capacity(), m.slots(),
            round(m.overlap_slowdown(), 12), m.pool_kind())


#: keys of the collective model that only act together with another value
_NEEDS = {"comm.concurrent_collectives": ["comm.link_sharing=split"],
          "comm.link_sharing": ["comm.concurrent_collectives=4", "comm.engines_per_collective=4"],
          "comm.channels": ["network.intra_node_GBps=2000"],
          "comm.message_engines": ["comm.link_sharing=split", "comm.engines_per_collective=4"],
          "network.collnet_intra_us": ["comm.collnet=true"],
          "network.collnet_inter_us": ["comm.collnet=true"]}


@pytest.mark.parametrize("hw", list_specs())
def test_every_network_and_comm_key_changes_something(hw: str) -> None:
    spec = load_spec(hw)
    dead = []
    base: dict[tuple[str, ...], tuple] = {}
    # comm.path switches key sets; the compute-interference keys (SM sharing, overlap slowdown)
    # are covered by the overlap tests in test_hardware_costs / test_hardware_replay
    skip = {"comm.path", "comm.sm_count", "comm.comm_ctas", "comm.mem_contention",
            "comm.gemm_waves_max", "comm.overlap_slowdown"}
    for key in [k for k in spec.keys() if k.startswith(("network.", "comm.")) and k not in skip]:
        needs = [n for n in _NEEDS.get(key, []) if n.split("=")[0] in spec.entries]
        ctx = spec.with_overrides(needs)
        try:
            changed = ctx.with_overrides([_perturbed(ctx, key)])
        except Exception as exc:  # noqa: BLE001
            raise AssertionError(f"{hw}: cannot perturb {key}: {exc}") from None
        if tuple(needs) not in base:
            base[tuple(needs)] = _fingerprint(ctx)
        if _fingerprint(changed) == base[tuple(needs)]:
            dead.append(key)
    assert not dead, f"{hw}: keys that change nothing: {dead}"


_FILE = re.compile(r"[\w./-]+\.(?:md|py|cc|h|toml|json|txt|yaml)\b", re.IGNORECASE)
_URL = re.compile(r"https?://\S+")


@pytest.mark.parametrize("hw", list_specs())
def test_sources_cite_public_documents_not_missing_files(hw: str) -> None:
    spec = load_spec(hw)
    bad = []
    for key in spec.keys():
        src = spec.source(key)
        urls = [u.rstrip(").,;") for u in _URL.findall(src)]
        rest = _URL.sub(" ", src)
        for name in _FILE.findall(rest):
            if name.lower().startswith(("www.", "glennklockwood.com")) or "." in name.split("/")[0] \
                    and "/" in name:
                continue  # a web address written without its scheme
            in_repo = (ROOT / name).exists()
            cited = any(u.endswith("/" + name.split("/")[-1]) for u in urls)
            if not (in_repo or cited):
                bad.append(f"{key}: {name}")
    assert not bad, f"{hw} cites files a user cannot open: {bad}"
    for key in spec.keys():
        assert "HARDWARE.md" not in spec.source(key) and "../shared" not in spec.source(key)


def test_nccl_tests_rows_definitions() -> None:
    rows = nccl_tests_rows(load_spec("h100"), "all_gather", 16, [MB, GB])
    for r in rows:
        assert r.algbw_GBps == pytest.approx(r.bytes / r.time_us / 1e3)
        assert r.busbw_GBps == pytest.approx(r.algbw_GBps * busbw_factor("all_gather", 16))
    assert busbw_factor("all_reduce", 8) == 2 * 7 / 8 and busbw_factor("broadcast", 8) == 1.0


def test_gpus_per_thread_bounds_small_messages_by_the_host_launches() -> None:
    """nccl-tests -g G: one thread launches every iteration on G GPUs, so small messages take
    G launches; large ones keep their device time; -g 1 never binds."""
    spec = load_spec("a100")
    launch = spec.value("comm.group_launch_us")
    sizes = [1024, 64 * MB]
    one = nccl_tests_rows(spec, "all_reduce", 8, sizes)
    eight = nccl_tests_rows(spec, "all_reduce", 8, sizes, gpus_per_thread=8)
    assert [r.bound for r in one] == ["collective", "collective"]
    assert one[0].time_us < 8 * launch < one[1].time_us
    assert eight[0].bound == "launch" and eight[0].time_us == pytest.approx(8 * launch)
    assert eight[0].algorithm == one[0].algorithm and eight[0].busbw_GBps < one[0].busbw_GBps
    assert eight[1] == one[1]
    with pytest.raises(ValueError, match="gpus_per_thread 0"):
        nccl_tests_rows(spec, "all_reduce", 8, sizes, gpus_per_thread=0)


def test_hw_collective_cli(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(["hw", "collective", "h100", "--op", "all_reduce", "--ranks", "16",
                        "--ranks-per-node", "8", "--bytes", "1K:4K,1G", "--format", "json"], capsys)
    assert code == 0
    rows = orjson.loads(out)
    assert [r["bytes"] for r in rows] == [1024, 2048, 4096, GB]
    assert set(rows[0]) == {"bytes", "time_us", "algbw_GBps", "busbw_GBps", "algorithm", "protocol",
                            "bound"}
    want = nccl_tests_rows(load_spec("h100"), "all_reduce", 16, [GB])[0]
    assert rows[-1]["time_us"] == pytest.approx(want.time_us)
    code, out, _ = cli(["hw", "collective", "mtia300", "--op", "all_to_all", "--ranks", "40",
                        "--bytes", "2M", "--format", "csv"], capsys)
    assert code == 0 and out.splitlines()[0].replace('"', "").startswith("bytes,time_us,algbw_GBps")
    code, out, _ = cli(["hw", "collective", "a100", "--op", "broadcast", "--ranks", "8",
                        "--bytes", "8M"], capsys)
    assert code == 0 and "busbw_GBps" in out


@pytest.mark.parametrize("args, msg", [
    (["--op", "scan", "--ranks", "8", "--bytes", "1K"], "--op scan"),
    (["--op", "all_reduce", "--ranks", "1", "--bytes", "1K"], "--ranks 1"),
    (["--op", "all_reduce", "--ranks", "8", "--bytes", "1Q"], "--bytes 1Q"),
    (["--op", "all_reduce", "--ranks", "8", "--bytes", "4K:1K"], "0 < A <= B"),
    (["--op", "all_reduce", "--ranks", "8", "--ranks-per-node", "0", "--bytes", "1K"],
     "--ranks-per-node 0"),
    (["--op", "all_reduce", "--ranks", "8", "--gpus-per-thread", "0", "--bytes", "1K"],
     "--gpus-per-thread 0"),
])
def test_hw_collective_bad_input(args: list[str], msg: str,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = cli(["hw", "collective", "h100", *args], capsys)
    assert code == 2 and msg in err and "Traceback" not in err


def test_hw_show_vs_names_the_differences(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(["hw", "show", "mtia300", "--vs", "h100"], capsys)
    assert code == 0
    tail = out.split("collective model: mtia300 vs h100")[1]
    for key in ("network.intra_node_GBps", "comm.post_us", "comm.path", "comm.nvls_efficiency"):
        assert key in tail
    assert "network.inter_ring_ll_us" not in tail  # the same published value on both
    code, out, _ = cli(["hw", "show", "h100", "--vs", "h100"], capsys)
    assert "(0 value(s) differ" in out


# --- validation against published nccl-tests tables (../shared/nccl; skipped when absent) ---

#: tables whose system is a bundled spec's but where the model misses the target; measured
#: median / p90 relative error in the reason (see docs/hardware.md, "Validation")
KNOWN_MISSES: dict[str, str] = {}
NCCL_DIR = NCCL_TABLES  # ../shared/nccl, else the vendored copy in tests/data/nccl
TABLES = sorted(NCCL_DIR.glob("*.json")) if NCCL_DIR.is_dir() else []


def test_gpus_per_thread_read_from_the_table() -> None:
    """nccl-tests' -g comes from the table's env / note, else its source's harness, else 1."""
    assert vc._gpus_per_thread({"env": "all_reduce_perf -b 32k -e 16G -f 2 -g 8 -n 50"}) == 8
    assert vc._gpus_per_thread({"env": "defaults", "note": "(nThread 1 nGpus 4)"}) == 4
    assert vc._gpus_per_thread({"env": "mpirun -np 16 all_reduce_perf -b 8 -e 8G"}) == 1
    azure = {"url": "https://github.com/Azure/AI-benchmarking-guide/blob/main/x.md",
             "hardware": {"gpus_per_node": 4}}
    assert vc._gpus_per_thread(azure) == 4


def _doc(gpu: str, nodes: int = 2, nics: int | None = 8, gbps: int | None = 400,
         nic_type: str = "InfiniBand", env: str = "defaults", **extra: object) -> dict:
    return {"hardware": {"gpu": gpu, "gpus_per_node": 8, "nodes": nodes, "nics_per_node": nics,
                         "nic_gbps": gbps, "nic_type": nic_type}, "env": env, "op": "all_reduce",
            "ranks": 8 * nodes, **extra}


def test_infer_table_maps_a_table_from_its_own_fields() -> None:
    t = vc.infer_table(_doc("NVIDIA H200 141GB"))
    assert t is not None and (t.spec, t.sets, t.match, t.gpus_per_thread) == ("h200", (), True, 1)
    t = vc.infer_table(_doc("A100-SXM4-80GB", nics=4, gbps=200))  # 4x200G per 8 GPUs
    assert t is not None and t.sets == ("network.inter_node_GBps=12.5",) and not t.match
    t = vc.infer_table(_doc("H100 80GB HBM3", nics=32, gbps=100, nic_type="AWS EFA"))
    assert t is not None and t.sets == () and not t.match  # 50 GB/s per GPU, another fabric
    t = vc.infer_table(_doc("H100", nodes=1, nics=None, gbps=None,
                            env="NCCL_ALGO=COLLNETCHAIN, NCCL_COLLNET_ENABLE=1"))
    assert t is not None and t.sets == ("comm.collnet=true", "comm.algorithm=collnet") and t.match
    t = vc.infer_table(_doc("A100", nodes=1, env="NCCL_ALGO=NVLS"))  # A100 has no NVLS
    assert t is not None and t.sets == ()
    assert vc.infer_table(_doc("H100", nodes=1, env="NCCL_ALGO=NVLS")).sets == (  # type: ignore[union-attr]
        "comm.algorithm=nvls",)
    rows = [{"bytes": 1 << 30, "algbw": 2.40, "busbw": 4.75}]  # 2(n-1)/n = 1.979: 96 ranks
    t = vc.infer_table(_doc("H100", nodes=8, ranks=None, rows=rows))
    assert t is not None and t.ranks == 96
    assert vc.infer_table(_doc("NVIDIA B200")) is None
    assert not vc.infer_table(_doc("H100 PCIe", nodes=1)).match  # type: ignore[union-attr]


def test_mixed_tables_price_each_row_as_its_own_collective(tmp_path: Path) -> None:
    rows = [{"op": "all_reduce", "bytes": MB, "time_us": 50.0},
            {"op": "all_gather", "bytes": MB, "time_us": 50.0},
            {"op": "sendrecv", "bytes": MB, "time_us": 50.0}]  # not priced: left out
    path = tmp_path / "mixed.json"
    path.write_bytes(orjson.dumps(_doc("H100", nodes=1, op="mixed", rows=rows)))
    r = vc.validate_table(path)
    assert r is not None and r.rows == 2
    spec = load_spec("h100")
    want = [nccl_tests_rows(spec, op, 8, [MB])[0].time_us for op in ("all_reduce", "all_gather")]
    assert [p["predicted"] for p in r.points] == pytest.approx(want)


def test_time_error_by_size_band_has_the_sign_of_the_miss(tmp_path: Path) -> None:
    """A table measured 2x the model's time on small messages and 0.8x on large ones: the small
    band reads -50% (the model is faster), the large +25%, the empty middle band nothing; a
    busbw-only table's error is turned into time the same way."""
    spec = load_spec("h100")
    small, large = 4096, GB
    t_small, t_large = (nccl_tests_rows(spec, "all_reduce", 8, [s])[0] for s in (small, large))
    rows = [{"bytes": small, "time_us": 2 * t_small.time_us},
            {"bytes": large, "time_us": 0.8 * t_large.time_us}]
    path = tmp_path / "t.json"
    path.write_bytes(orjson.dumps(_doc("H100", nodes=1, rows=rows)))
    r = vc.validate_table(path)
    assert r is not None
    assert r.bias == pytest.approx({"<64K": -0.5, "64K-256M": None, ">=256M": 0.25})
    rows = [{"bytes": small, "busbw": t_small.busbw_GBps / 2}]  # half the busbw: twice the time
    path.write_bytes(orjson.dumps(_doc("H100", nodes=1, rows=rows)))
    r = vc.validate_table(path)
    assert r is not None and r.metric == "busbw" and r.bias["<64K"] == pytest.approx(-0.5)
    assert "-50%" in vc.render([r]).splitlines()[2]


@pytest.mark.real
@pytest.mark.skipif(not TABLES, reason="published nccl-tests tables (../shared/nccl) absent")
def test_every_shared_table_has_a_spec() -> None:
    results, skipped = vc.validate_dir(NCCL_DIR)
    assert skipped == [] and len(results) == len(TABLES)


def _matching_tables() -> list[str]:
    out = []
    for p in TABLES:
        t = vc.infer_table(orjson.loads(p.read_bytes()))
        if t is not None and t.match:
            out.append(p.stem)
    return out


@pytest.mark.real
@pytest.mark.parametrize("name", [
    pytest.param(n, marks=pytest.mark.xfail(reason=KNOWN_MISSES[n], strict=True))
    if n in KNOWN_MISSES else n
    for n in _matching_tables()])
def test_validation_targets_on_matching_systems(name: str) -> None:
    r = vc.validate_table(NCCL_DIR / f"{name}.json")
    assert r is not None and r.rows > 0
    assert r.median <= vc.MEDIAN_TARGET and r.p90 <= vc.P90_TARGET, (r.median, r.p90)
    assert all(r.band_passed(b[0]) is not False for b in vc.BANDS), r.band_error


@pytest.mark.real
@pytest.mark.skipif(not TABLES, reason="published nccl-tests tables (../shared/nccl) absent")
def test_validation_script_prints_the_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert vc.main([str(NCCL_DIR)]) == 0
    out = capsys.readouterr().out
    assert "median" in out and "nccltests290_h100_1node_allreduce" in out


# --- pipeline fill (comm.fill_chunks, calibrated) ---------------------------------------------

def test_fill_slows_the_in_node_links_until_the_pipeline_streams() -> None:
    """One node of 8, ring Simple forced: with fill f and 16 channels of 512 KiB chunks per
    peer, the NVLink rate is 1 / (1 + f / (1 + bytes / (8 x 16 x 512 KiB))) of the tuning
    model's; the latency is untouched, so the as-run transfer is the tuning transfer x that."""
    f = 0.5
    for size in (MB, 64 * MB, 4 * GB):
        t0, *_ = one("h100", "all_reduce", 8, size, forced("ring", "simple"))
        t1, *_ = one("h100", "all_reduce", 8, size, (*forced("ring", "simple"),
                                                     f"comm.fill_chunks={f}"))
        lat = 8.4 + 14 * 3.4
        rounds = size / (8 * 16 * 512 * 1024)
        assert t1 - lat == pytest.approx((t0 - lat) * (1 + f / (1 + rounds)), rel=1e-9)
    # the share fades: 8 MiB (1/8 round) is >20% slower than the tuning model; 4 GiB (64 rounds)
    # at most fill / 65 slower
    ratio = [one("h100", "all_reduce", 8, s, ("comm.protocol=simple",))[0]
             / one("h100", "all_reduce", 8, s, (*TUNING, "comm.protocol=simple"))[0]
             for s in (8 * MB, 4 * GB)]
    fill = float(load_spec("h100").value("comm.fill_chunks"))
    assert ratio[0] > 1.2 and ratio[1] <= 1 + fill / 65 + 1e-12


def test_fill_leaves_a_nic_bound_collective_alone() -> None:
    """Two A100 nodes on 4 x 200G: the ring runs at the NICs' 8 x 12 GB/s, under the slowed
    NVLink rate, so the fill adds nothing (the published table of that system matches the
    tuning model at 32-64 MB); on one node the same message pays it."""
    sets = ("network.inter_node_GBps=12.5", "comm.protocol=simple")
    t_fill, *_ = one("a100", "all_reduce", 16, 32 * MB, sets, rpn=8)
    t_tune, *_ = one("a100", "all_reduce", 16, 32 * MB, (*sets, *TUNING), rpn=8)
    assert t_fill == pytest.approx(t_tune, rel=1e-12)
    t_fill, *_ = one("a100", "all_reduce", 8, 32 * MB, sets)
    t_tune, *_ = one("a100", "all_reduce", 8, 32 * MB, (*sets, *TUNING))
    assert t_fill > 1.1 * t_tune


def test_fill_never_makes_the_tuning_model_faster() -> None:
    op, p, s = _battery()
    for hw in ("h100", "a100", "mtia300"):
        assert (_times(load_spec(hw), op, p, s)
                >= _times(load_spec(hw, list(TUNING)), op, p, s) * (1 - 1e-12)).all()


# --- cross-node tree depth beyond two nodes ---------------------------------------------------

@pytest.mark.parametrize("nodes", [3, 5])
def test_tree_across_3_and_5_nodes_by_hand(nodes: int) -> None:
    """8 ranks per node over 3 / 5 nodes, as NCCL's tuner counts the tree (tuning.cc
    ncclTopoTuneModel: 2 x ((nRanks / nNodes - 1) x intra + log2i(nNodes) x inter)): a chain of
    24 / 3 - 1 = 40 / 5 - 1 = 7 NVLink steps in each node and log2i(3) = 1 / log2i(5) = 2
    network levels; the >2-node tree caps apply (h100: 16 x 36.0 GB/s tree cap above 0.92 x
    the 8 NICs' 384 GB/s, LL capped at 20.4 GB/s); 1 GiB is past the correction table, so the
    correction is 1."""
    p = 8 * nodes
    chain = 7
    levels_o = {3: 1, 5: 2}[nodes]
    b_ring = min(B, 8 * NIC)
    for proto, base, hi, ho in (("simple", 8.4, 4.0, 14.0), ("ll", 6.8, 0.6, 5.0)):
        t, _, a, q = one("h100", "all_reduce", p, GB, forced("tree", proto))
        assert (a, q) == ("tree", proto)
        bus = min(0.92 * b_ring, 16 * 36000.0)
        if proto == "ll":
            bus = min(bus / 3.8, 20400.0)
        want = base + 2 * (chain * hi + levels_o * ho) + GB / (0.5 * bus)
        assert t == pytest.approx(want, rel=1e-9)


@pytest.mark.parametrize("nodes, levels", [(2, 1), (3, 1), (4, 2), (5, 2), (8, 3), (9, 3)])
def test_tree_latency_counts_nccls_network_levels(nodes: int, levels: int) -> None:
    """A tiny tree all-reduce over N nodes of 8 takes NCCL's log2i(N) = floor(log2 N) network
    levels (one more from 3 to 4 nodes and from 7 to 8, none from 2 to 3 or 4 to 5) and a
    7-step NVLink chain each way: base 6.8 + 2 x (7 x 0.6 + levels x 5.0) us at LL, plus 8 B
    on one of the 16 channels at half the LL cap (39 GB/s on 2 nodes, 20.4 beyond)."""
    t = one("h100", "all_reduce", 8 * nodes, 8, forced("tree", "ll"))[0]
    cap = 39000.0 if nodes == 2 else 20400.0
    assert t == pytest.approx(6.8 + 2 * (7 * 0.6 + levels * 5.0) + 8 / (0.5 * cap / 16),
                              rel=1e-9)


def test_one_node_tree_is_a_chain_so_ring_ll_wins_small_all_reduces() -> None:
    """On one 8-GPU node NCCL's tuner costs tree LL at 6.8 + 2 x 7 x 0.6 = 15.2 us and ring LL
    at 6.6 + 14 x 0.6 = 15.0 us, so a small all-reduce runs ring LL (a binary tree's 3 levels
    would cost 10.4 us and win)."""
    tree = one("h100", "all_reduce", 8, 8, forced("tree", "ll"))[0]
    ring = one("h100", "all_reduce", 8, 8, forced("ring", "ll"))[0]
    assert tree == pytest.approx(6.8 + 2 * 7 * 0.6, abs=0.01)
    assert ring == pytest.approx(6.6 + 14 * 0.6, abs=0.01)
    for size in (8, 1024, 4096):
        assert one("h100", "all_reduce", 8, size)[2:] == ("ring", "ll")


def test_tree_chain_in_a_large_rack_outlasts_the_same_ranks_over_racks() -> None:
    """NCCL's chain makes a tree slower in one large rack than over smaller ones: 40 ranks in a
    rack of 40 walk 39 NVLink steps each way (6.8 + 2 x 39 x 0.6 = 53.6 us at LL); in racks
    of 16 (3 nodes, 40 // 3 = 13 per node) 12 steps and log2i(3) = 1 network level
    (6.8 + 2 x (12 x 0.6 + 5.0) = 31.2 us). The 8 B move on one of 16 channels at half the LL
    bandwidth: one node 0.92 x 370.8 / 3.8 GB/s, three nodes the 20.4 GB/s cap."""
    big = one("h100", "all_reduce", 40, 8, forced("tree", "ll"), rpn=40)[0]
    split = one("h100", "all_reduce", 40, 8, forced("tree", "ll"), rpn=16)[0]
    assert big == pytest.approx(6.8 + 2 * 39 * 0.6 + 8 / (0.5 * 0.92 * B / 3.8 / 16), rel=1e-9)
    assert split == pytest.approx(6.8 + 2 * (12 * 0.6 + 5.0) + 8 / (0.5 * 20400.0 / 16),
                                  rel=1e-9)
    assert big > split



# --- tree shape (comm.tree_shape: NCCL's chain on the GPUs, a binary tree on MTIA) --------------

#: 8 B tree LL on mtia300 (one rack or two): 16 channels' LL cap 39 GB/s binds (0.92 x 940 GB/s
#: and 16 x 38.7 GB/s / 3.8 are above it), one channel of 16 runs it at half of it
_MTIA_LL_8B = 8 / (0.5 * 39000.0 / 16)


@pytest.mark.parametrize("p, levels_in, levels_out", [(40, 6, 0), (144, 7, 1)])
def test_mtia_tree_is_log_depth_by_hand(p: int, levels_in: int, levels_out: int) -> None:
    """MTIA's tree (``comm.tree_shape = "binary"``, HCCL's own is not published) has
    ceil(log2 p) levels each way, ceil(log2 N) across racks: 40 ranks in one 72-rank rack take
    6 levels (NCCL's chain would take 39 steps: 6.8 + 2 x 39 x 5.0 = 396.8 us), 144 ranks on two
    racks 7 in the rack and 1 across (the chain: 71 and 1), at 5.0 us a step at LL."""
    want = 6.8 + 2 * (levels_in * 5.0 + levels_out * 5.0) + _MTIA_LL_8B
    t, _, a, q = one("mtia300", "all_reduce", p, 8, forced("tree", "ll"))
    assert (a, q) == ("tree", "ll")
    assert t == pytest.approx(want, rel=1e-9)
    chain = one("mtia300", "all_reduce", p, 8, (*forced("tree", "ll"), "comm.tree_shape=chain"))[0]
    assert chain == pytest.approx(6.8 + 2 * ((p // (1 + levels_out) - 1) * 5.0
                                             + levels_out * 5.0) + _MTIA_LL_8B, rel=1e-9)


def test_tree_shape_is_the_only_difference_between_gpu_and_mtia_trees() -> None:
    """The same machinery for every target: h100 with ``comm.tree_shape=binary`` walks
    ceil(log2 40) = 6 NVLink levels in a 40-rank rack (6.8 + 2 x 6 x 0.6 = 14.0 us at LL) where
    its shipped chain takes 39 steps (53.6 us)."""
    xfer = 8 / (0.5 * 0.92 * B / 3.8 / 16)
    sets = forced("tree", "ll")
    assert one("h100", "all_reduce", 40, 8, sets, rpn=40)[0] == pytest.approx(
        6.8 + 2 * 39 * 0.6 + xfer, rel=1e-9)
    assert one("h100", "all_reduce", 40, 8, (*sets, "comm.tree_shape=binary"), rpn=40)[0] == (
        pytest.approx(6.8 + 2 * 6 * 0.6 + xfer, rel=1e-9))
    for hw in list_specs():
        assert load_spec(hw).value("comm.tree_shape") == (
            "binary" if load_spec(hw).family == "mtia" else "chain"), hw


@pytest.mark.parametrize("hw", ["h100", "mtia300"])
def test_binary_tree_in_a_smaller_rack_never_faster(hw: str) -> None:
    """With a binary tree (ceil(log2 L) + ceil(log2 N) >= ceil(log2 LN)) splitting a group over
    smaller racks never speeds any collective up, trees and the tuner's choice included."""
    op, p, s = _battery(p_list=(8, 16, 40))
    prev = None
    for rpn in (72, 40, 16, 8, 4, 3, 2, 1):
        t = _times(load_spec(hw, [f"network.ranks_per_node={rpn}", "comm.tree_shape=binary"]),
                   op, p, s)
        if prev is not None:
            assert (t >= prev * (1 - 1e-12)).all(), rpn
        prev = t

# --- table matching and spec keys ---------------------------------------------------------------

def test_single_node_table_matches_whatever_its_cluster_nic() -> None:
    """One node uses no NIC: an EFA / TCPX cluster's single-node run is the bundled spec's
    system; across nodes it is not."""
    doc = _doc("H100", nodes=1, rows=[])
    doc["hardware"]["nic_type"] = "AWS EFA (3200 Gbps aggregate)"
    t = vc.infer_table(doc)
    assert t is not None and t.match
    doc = _doc("H100", nodes=2, rows=[])
    doc["hardware"]["nic_type"] = "AWS EFA (3200 Gbps aggregate)"
    t = vc.infer_table(doc)
    assert t is not None and not t.match


@pytest.mark.parametrize("key", ["comm.fill_chunks", "comm.fill_chunk_bytes",
                                 "comm.group_launch_us"])
def test_spec_without_a_calibrated_key_fails_clearly(tmp_path: Path, key: str) -> None:
    import tomllib

    from mtia_trace.errors import HardwareSpecError

    text = (ROOT / "replay" / "hardware" / "specs" / "h100.toml").read_text(encoding="utf-8")
    name = key.split(".")[1]
    kept = [line for line in text.splitlines() if not line.startswith(f"{name} = ")]
    path = tmp_path / "mine.toml"
    path.write_text("\n".join(kept), encoding="utf-8")
    assert tomllib.loads(path.read_text(encoding="utf-8"))
    with pytest.raises(HardwareSpecError, match=f"missing keys {key}"):
        load_spec(str(path))


def test_calibrated_values_are_listed_with_the_assumed_ones(capsys: pytest.CaptureFixture[str]) -> None:
    spec = load_spec("h100")
    assert spec.confidence("comm.fill_chunks") == "calibrated"
    assert {"comm.fill_chunks", "comm.group_launch_us"} <= set(spec.assumed())
    code, out, _ = cli(["hw", "show", "h100", "--assumed"], capsys)
    assert code == 0 and "comm.fill_chunks" in out and "calibrated" in out
    assert "fit_collectives.py" in spec.source("comm.fill_chunks")


def test_published_all_to_all_rows_within_target() -> None:
    """The published all-to-all rows bundled in the repository (tests/data/nccl_alltoall, each
    file with its source address) are predicted within the targets; one size band only."""
    results, skipped = vc.validate_dir(ROOT / "tests" / "data" / "nccl_alltoall")
    assert results and not skipped
    for r in results:
        assert r.op == "all_to_all" and r.match
        assert r.points[0]["algorithm"] == "direct"
        assert r.passed, (r.name, r.median, r.band_error)


def test_fit_script_without_tables_says_so_and_exits_0(tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    import fit_collectives

    assert fit_collectives.main([str(tmp_path / "absent")]) == 0
    assert "nothing to fit" in capsys.readouterr().out
    assert fit_collectives.main([str(tmp_path)]) == 0  # a directory without a matching table
    assert "nothing to fit" in capsys.readouterr().out


def test_fit_script_prints_each_held_out_tables_refitted_launch(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The leave-one-out columns end with the fill and the launch cost refitted without the
    table: for a spec fitted on two tables, the other table's fit alone."""
    import shutil

    import fit_collectives

    names = ("azure_nda100v4_1node_allreduce_busbw", "stas00_a100_1node_allreduce")
    for n in names:
        shutil.copy(NCCL_TABLES / f"{n}.json", tmp_path / f"{n}.json")
    assert fit_collectives.main([str(tmp_path)]) == 0
    out = capsys.readouterr().out
    head = next(line for line in out.splitlines() if line.startswith("table "))
    assert head.rstrip().endswith("LOO fill  LOO launch")
    tables = fit_collectives.load(tmp_path)
    assert [t.name for t in tables] == list(names)
    for t in tables:
        fill, launch = fit_collectives.fit([u for u in tables if u is not t])
        row = next(line for line in out.splitlines() if line.startswith(t.name))
        assert [float(x) for x in row.split()[-2:]] == [fill, launch["a100"]]


# --- NVLS placement (comm.nvls_placement: NCCL < 2.20 "chunked", >= 2.20 "balanced") ---------


def _nvls_us(placement: str, sizes: list[int]) -> list[float]:
    spec = load_spec("h100", overrides=("comm.algorithm=nvls", "comm.fill_chunks=0",
                                        f"comm.nvls_placement={placement}"))
    return [r.time_us for r in nccl_tests_rows(spec, "all_reduce", 8, sizes)]


def test_chunked_nvls_runs_a_small_message_on_the_channels_its_chunks_reach() -> None:
    """NCCL < 2.20 cuts an NVLS AllReduce below 8 MB into 16 KB chunks, 8 heads x 16 KB = 128 KB
    per channel: 128 KB runs on 1 of the 16 channels (16x the balanced transfer time), 1 MB on 8
    (2x), 2 MB and up on all 16 (the same as balanced)."""
    sizes = [128 << 10, 1 << 20, 2 << 20, 64 << 20]
    bal, chk = _nvls_us("balanced", sizes), _nvls_us("chunked", sizes)
    lat = float(load_spec("h100").value("network.nvls_us"))
    for size, factor, b, c in zip(sizes, (16, 2, 1, 1), bal, chk, strict=True):
        assert c - lat == pytest.approx(factor * (b - lat), rel=1e-9), size
    # the transfer a 128 KB message makes on one channel is the one 2 MB makes on all 16
    assert chk[0] - lat == pytest.approx(bal[2] - lat, rel=1e-9)


def test_chunked_placement_leaves_other_algorithms_alone() -> None:
    """Only NVLS AllReduce changes; a ring or tree run, and every spec without NVLS, do not."""
    for algo in ("ring", "tree"):
        rows = [nccl_tests_rows(load_spec("h100", overrides=(f"comm.algorithm={algo}",
                                                             f"comm.nvls_placement={p}")),
                                "all_reduce", 8, [1 << 17, 1 << 20]) for p in ("balanced", "chunked")]
        assert [r.time_us for r in rows[0]] == [r.time_us for r in rows[1]]


def test_nvls_placement_follows_the_tables_nccl_release() -> None:
    """A one-node table on NCCL < 2.20 gets the chunked placement; 2.20 and later, an unstated
    release, or a multi-node run do not."""
    doc = {"hardware": {"gpu": "NVIDIA H100 80GB HBM3", "gpus_per_node": 8, "nodes": 1},
           "op": "all_reduce", "ranks": 8}
    for version, chunked in (("2.18.5", True), ("2.19.3", True), ("2.20.5", False),
                             ("2.23.4", False), ("not stated", False)):
        t = vc.infer_table({**doc, "nccl_version": version})
        assert t is not None and ("comm.nvls_placement=chunked" in t.sets) is chunked, version
    two = {**doc, "nccl_version": "2.18.5", "hardware": {**doc["hardware"], "nodes": 2}}
    t = vc.infer_table(two)
    assert t is not None and "comm.nvls_placement=chunked" not in t.sets
    a100 = {**doc, "nccl_version": "2.18.5", "hardware": {"gpu": "NVIDIA A100-SXM4-80GB",
                                                          "gpus_per_node": 8, "nodes": 1}}
    t = vc.infer_table(a100)
    assert t is not None and "comm.nvls_placement=chunked" not in t.sets


# --- ring LL share by NCCL release ------------------------------------------------------------

def test_ring_ll_quarter_share_by_hand() -> None:
    """NCCL < 2.21 (tuning.cc at v2.18.5 / v2.20.5) runs a ring LL at 1/4 of the bus bandwidth
    for AllReduce and 1/3 for a one-node AllGather (master: 1/2 for both), capped at the LL
    maximum. h100 one node of 8, 1 MiB (32 channels' worth at 32 KiB each: all 16 run):
    all-reduce min(141, 370.8 / 4) GB/s x 8 / 14; all-gather min(141, 370.8 / 3) x 8 / 7."""
    q = (*forced("ring", "ll"), "comm.ring_ll_share=quarter")
    t, _, a, p = one("h100", "all_reduce", 8, N1, q)
    assert (a, p) == ("ring", "ll")
    assert t == pytest.approx(6.6 + 14 * 0.6 + N1 / (min(141000.0, B / 4) * 8 / 14), rel=1e-9)
    t, _, _, _ = one("h100", "all_gather", 8, N1, q)
    assert t == pytest.approx(6.6 + 7 * 0.6 + N1 / (min(141000.0, B / 3) * 8 / 7), rel=1e-9)
    half, _, _, _ = one("h100", "all_gather", 8, N1, forced("ring", "ll"))
    assert half == pytest.approx(6.6 + 7 * 0.6 + N1 / (min(141000.0, B / 2) * 8 / 7), rel=1e-9)
    # across nodes every collective takes 1/4: two nodes of 8 at 12.5 x 0.96 GB/s NIC per GPU
    # (ring min(370.8, 8 x 12) = 96 GB/s; LL 24 GB/s, under the 39 GB/s two-node cap, where
    # master's half would reach the cap); 14 NVLink steps at the 1 us post floor, 1 network step
    lat = 6.6 + 14 * max(0.6, 1.0) + 1 * 2.7
    for share, ll in (("quarter", 96000.0 / 4), ("half", 39000.0)):
        sets = (*forced("ring", "ll"), f"comm.ring_ll_share={share}",
                "network.inter_node_GBps=12.5")
        t, _, _, _ = one("h100", "all_gather", 16, GB, sets)
        assert t == pytest.approx(lat + GB / (ll * 16 / 15), rel=1e-9), share


def test_ring_ll_share_follows_the_tables_nccl_release() -> None:
    """A table on NCCL < 2.21 gets the quarter ring LL share, and on Hopper on one node that
    release's 87.7 GB/s LL cap (141 from 2.21); 2.21 and later or an unstated release do not."""
    doc = {"hardware": {"gpu": "NVIDIA H100 80GB HBM3", "gpus_per_node": 8, "nodes": 1},
           "op": "all_reduce", "ranks": 8}
    for version, quarter in (("2.18.5", True), ("2.20.5", True), ("2.21.5", False),
                             ("2.26.2", False), ("not stated", False)):
        t = vc.infer_table({**doc, "nccl_version": version})
        assert t is not None
        assert ("comm.ring_ll_share=quarter" in t.sets) is quarter, version
        assert ("comm.ll_max_1node_GBps=87.7" in t.sets) is quarter, version
    two = {**doc, "nccl_version": "2.18.5", "hardware": {**doc["hardware"], "nodes": 2}}
    t = vc.infer_table(two)
    assert t is not None and "comm.ring_ll_share=quarter" in t.sets
    assert not any(s.startswith("comm.ll_max_1node") for s in t.sets)
    a100 = {**doc, "nccl_version": "2.18.5", "hardware": {"gpu": "NVIDIA A100-SXM4-80GB",
                                                          "gpus_per_node": 8, "nodes": 1}}
    t = vc.infer_table(a100)
    assert t is not None and "comm.ring_ll_share=quarter" in t.sets
    assert not any(s.startswith("comm.ll_max_1node") for s in t.sets)  # Ampere's is unchanged
