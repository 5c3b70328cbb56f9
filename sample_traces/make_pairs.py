"""Record counterfactual pairs: a DLRM-style training step profiled twice with torch on CPU
(ranks over gloo), a baseline `a/` and a run `b/` that differs in one known factor.

    python sample_traces/make_pairs.py OUT_DIR [--pair NAME ...] [--ranks 2] [--steps 4]
                                       [--dp manual|ddp]

``--dp manual`` (default) all-reduces the flattened dense gradients after backward on the main
thread; ``--dp ddp`` wraps the dense part (bottom MLP, interaction, top MLP) in
`DistributedDataParallel` (gloo, small buckets), whose reducer issues asynchronous bucketed
all-reduces on the gloo threads while backward still runs and waits for them at its end. Pair
folders are named ``dp_NAME`` (manual) or ``ddp_NAME``.

Needs torch (not a project dependency; install it in a separate virtualenv). Not run in CI.
Each pair folder gets `a/`, `b/` (one .pt.trace.json.gz per rank), a README.md saying what
changed, and a WHATIF file: the `--whatif` selectors that name the change, one per line, which
`benchmarks/check_pairs.py --pairs OUT_DIR` evaluates beside `mtia-trace diff a b`.

Pairs (every run has the same op sequence: the `data_wait` and `extra_compute` regions exist in
both runs, with a zero sleep or a small matmul in the baseline, so events match one to one):
same (nothing changed: two recordings of the baseline, the run-to-run noise), straggler (rank 1
sleeps in data_wait), compute (rank 1's extra_compute matmul is bigger), embedding (one table's
pooling grows), dense (the top MLP's first layer is wider).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import socket
import tempfile
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn


@dataclass(frozen=True)
class Config:
    ranks: int = 2
    steps: int = 4
    batch: int = 128
    rows: int = 20_000
    dim: int = 32
    pooling: tuple[int, ...] = (3, 8, 5, 20)   # mean pooling per table; table t on rank t % ranks
    top: tuple[int, ...] = (128, 64)
    bottom: tuple[int, ...] = (128, 64)
    sleep_ms: tuple[float, ...] = (0.0, 0.0)    # rank 0, rank 1 (others as rank 0), in data_wait
    extra_n: tuple[int, ...] = (64, 64)         # rank 0, rank 1 (others as rank 0): 4 mm of n x n
    dp: str = "manual"                          # dense data parallel: manual all_reduce or ddp
    bucket_mb: float = 0.05                     # DDP bucket cap (MB): a few buckets per step
    seed: int = 0

    def per_rank(self, values: tuple[float, ...], rank: int) -> float:
        return values[rank] if rank < len(values) else values[0]


#: pair name -> (what changed, b's config change, the what-ifs that name it)
PAIRS: dict[str, tuple[str, dict, list[str]]] = {
    "same": ("nothing: a second recording of the baseline (run-to-run noise)", {}, []),
    "straggler": ("rank 1 sleeps 8 ms in `data_wait` at the start of every step",
                  {"sleep_ms": (0.0, 8.0)}, ["rank=1,kind=annotation,name=data_wait:+8ms"]),
    "compute": ("rank 1's `extra_compute` multiplies 320x320 matrices instead of 64x64",
                {"extra_n": (64, 320)}, ["rank=1,scope=extra_compute,name=aten::mm:x125"]),
    "embedding": ("table 3 (on rank 1) has mean pooling 60 instead of 20",
                  {"pooling": (3, 8, 5, 60)},
                  ["rank=1,name=aten::embedding_bag:x2.43",
                   "rank=1,name=*EmbeddingBagBackward*:x2.43"]),
    "dense": ("the top MLP's first hidden layer is 384 wide instead of 128",
              {"top": (384, 64)}, ["scope=top_mlp,kind=gemm:x3"]),
}


def _mlp(sizes: list[int]) -> nn.Sequential:
    layers: list[nn.Module] = []
    for a, b in zip(sizes[:-1], sizes[1:]):
        layers += [nn.Linear(a, b), nn.ReLU()]
    return nn.Sequential(*layers)


class Dense(nn.Module):
    """The data-parallel part: bottom MLP, interaction, top MLP."""

    def __init__(self, c: Config) -> None:
        super().__init__()
        self.c = c
        self.bottom = _mlp([13, *c.bottom, c.dim])
        n = len(c.pooling) + 1
        self.top = nn.Sequential(_mlp([n * (n - 1) // 2 + c.dim, *c.top]),
                                 nn.Linear(c.top[-1], 1))

    def forward(self, dense: torch.Tensor, emb: torch.Tensor) -> torch.Tensor:
        c = self.c
        with torch.profiler.record_function("dense_forward"):
            with torch.profiler.record_function("bottom_mlp"):
                x = self.bottom(dense)
            with torch.profiler.record_function("interaction"):
                feats = torch.cat([x.unsqueeze(1), emb[:, :len(c.pooling)]], dim=1)
                z = torch.bmm(feats, feats.transpose(1, 2))
                li, lj = torch.tril_indices(feats.shape[1], feats.shape[1], offset=-1)
                inter = torch.cat([x, z[:, li, lj]], dim=1)
            with torch.profiler.record_function("top_mlp"):
                return self.top(inter).squeeze(1)


class DLRM(nn.Module):
    def __init__(self, c: Config, rank: int) -> None:
        super().__init__()
        self.c, self.rank = c, rank
        self.mine = [t for t in range(len(c.pooling)) if t % c.ranks == rank]
        self.tables = nn.ModuleList(nn.EmbeddingBag(c.rows, c.dim, mode="sum")
                                    for _ in self.mine)
        self.dense: nn.Module = Dense(c)

    def forward(self, dense: torch.Tensor, bags: list[tuple[torch.Tensor, torch.Tensor]]
                ) -> torch.Tensor:
        c = self.c
        local = dense.shape[0]
        with torch.profiler.record_function("embedding_lookup"):
            pooled = [tb(idx, off) for tb, (idx, off) in zip(self.tables, bags)]
            send = torch.cat(pooled, dim=1) if pooled else torch.zeros(c.batch, 0)
        with torch.profiler.record_function("emb_all_to_all_fwd"):
            per = len(self.mine)  # tables per rank (table-wise, balanced)
            recv = torch.empty(c.ranks * local, per * c.dim)
            dist.all_to_all_single(recv, send.contiguous())
        emb = recv.view(c.ranks, local, per, c.dim).permute(1, 0, 2, 3).reshape(local, -1, c.dim)
        return self.dense(dense, emb)


def _run(rank: int, port: int, c: Config, out: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), GLOO_SOCKET_IFNAME="lo")
    dist.init_process_group("gloo", rank=rank, world_size=c.ranks)
    torch.set_num_threads(1)
    torch.manual_seed(c.seed + rank)
    model = DLRM(c, rank)
    dense_params = list(model.dense.parameters())
    if c.dp == "ddp":
        model.dense = nn.parallel.DistributedDataParallel(model.dense,
                                                          bucket_cap_mb=c.bucket_mb)
    opt = torch.optim.SGD(dense_params, lr=0.01)
    sparse_opt = torch.optim.Adagrad(model.tables.parameters(), lr=0.01)
    gen = torch.Generator().manual_seed(100 + c.seed + rank)
    local = c.batch // c.ranks
    n = int(c.per_rank(c.extra_n, rank))
    a = torch.randn(n, n, generator=gen)
    sched = torch.profiler.schedule(wait=1, warmup=2, active=c.steps, repeat=1)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], schedule=sched,
                                record_shapes=True) as prof:
        for _ in range(3 + c.steps):
            with torch.profiler.record_function("data_wait"):
                time.sleep(c.per_rank(c.sleep_ms, rank) / 1e3)
                dense = torch.randn(local, 13, generator=gen)
                label = torch.randint(0, 2, (local,), generator=gen).float()
                bags = []
                for t in model.mine:
                    lengths = torch.poisson(torch.full((c.batch,), float(c.pooling[t])),
                                            generator=gen).long().clamp(min=1)
                    idx = torch.randint(0, c.rows, (int(lengths.sum()),), generator=gen)
                    bags.append((idx, torch.cat([torch.zeros(1, dtype=torch.long),
                                                 lengths.cumsum(0)[:-1]])))
            with torch.profiler.record_function("extra_compute"):
                for _ in range(4):
                    torch.mm(a, a)
            with torch.profiler.record_function("zero_grad"):
                opt.zero_grad()
                sparse_opt.zero_grad()
            loss = nn.functional.binary_cross_entropy_with_logits(model(dense, bags), label)
            with torch.profiler.record_function("backward"):
                loss.backward()
            if c.dp == "manual":  # DDP all-reduced the gradients during backward
                with torch.profiler.record_function("grad_all_reduce"):
                    flat = torch.cat([p.grad.flatten() for p in dense_params])
                    dist.all_reduce(flat)
                    flat /= c.ranks
            with torch.profiler.record_function("optimizer_step"):
                opt.step()
                sparse_opt.step()
            with torch.profiler.record_function("loss_all_reduce"):
                dist.all_reduce(loss.detach().clone())
            prof.step()
    prof.export_chrome_trace(f"{out}/rank{rank}.json")
    dist.destroy_process_group()


def record(c: Config, dest: Path, stem: str) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dest.mkdir(parents=True)
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(_run, args=(port, c, tmp), nprocs=c.ranks, join=True)
        for r in range(c.ranks):
            out = dest / f"{stem}_rank{r}.pt.trace.json.gz"
            with open(f"{tmp}/rank{r}.json", "rb") as src, gzip.GzipFile(out, "wb", mtime=0) as g:
                shutil.copyfileobj(src, g)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--pair", action="append", choices=sorted(PAIRS))
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--dp", choices=["manual", "ddp"], default="manual")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    for name in args.pair or sorted(PAIRS):
        what, change, whatifs = PAIRS[name]
        base = Config(ranks=args.ranks, steps=args.steps, dp=args.dp, seed=args.seed)
        new = replace(base, **change)
        folder = args.out / f"{'ddp' if args.dp == 'ddp' else 'dp'}_{name}"
        if folder.exists():
            raise SystemExit(f"{folder}: exists; remove it or choose another OUT_DIR")
        record(base, folder / "a", f"{folder.name}_a")
        record(new, folder / "b", f"{folder.name}_b")
        (folder / "README.md").write_text(
            f"# {folder.name}\n\n{base.ranks} ranks, dense data parallel: {base.dp}; "
            f"b differs from a: {what}.\n")
        if whatifs:
            (folder / "WHATIF").write_text("\n".join(whatifs) + "\n")
        (folder / "manifest.json").write_text(json.dumps(
            {"a": asdict(base), "b": asdict(new), "torch": torch.__version__}, indent=2))
        print(f"{folder}: a/ and b/ recorded ({what})")


if __name__ == "__main__":
    main()
