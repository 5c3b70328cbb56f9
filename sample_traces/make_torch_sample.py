"""Profile a tiny DLRM-style training step with torch on CPU, 2 ranks over gloo.

Writes sample_traces/torch_cpu_dlrm/rank{0,1}.json.gz (Kineto traces with shapes). Needs torch
(not a project dependency):  pip install torch && python sample_traces/make_torch_sample.py
"""

from __future__ import annotations

import gzip
import os
import shutil
import socket
import tempfile
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

OUT = Path(__file__).resolve().parent / "torch_cpu_dlrm"
WORLD = 2
TABLES, ROWS, DIM, BATCH, BAG = 2, 5000, 16, 64, 4


class TinyDLRM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.bottom = nn.Sequential(nn.Linear(13, 32), nn.ReLU(), nn.Linear(32, DIM), nn.ReLU())
        self.table = nn.EmbeddingBag(ROWS, DIM, mode="sum", sparse=True)  # this rank's table
        n_feat = TABLES + 1
        self.top = nn.Sequential(nn.Linear(n_feat * (n_feat - 1) // 2 + DIM, 32), nn.ReLU(),
                                 nn.Linear(32, 1))

    def forward(self, dense: torch.Tensor, idx: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
        x = self.bottom(dense)
        with torch.profiler.record_function("embedding_lookup"):
            pooled = self.table(idx, offsets)                       # [global batch, DIM]
        with torch.profiler.record_function("emb_all_to_all_fwd"):
            recv = torch.empty_like(pooled)
            dist.all_to_all_single(recv, pooled.contiguous())       # -> [WORLD * local batch, DIM]
        emb = recv.view(WORLD, -1, DIM).transpose(0, 1)              # [local batch, tables, DIM]
        with torch.profiler.record_function("interaction"):
            feats = torch.cat([x.unsqueeze(1), emb], dim=1)
            z = torch.bmm(feats, feats.transpose(1, 2))
            li, lj = torch.tril_indices(feats.shape[1], feats.shape[1], offset=-1)
            inter = torch.cat([x, z[:, li, lj]], dim=1)
        return self.top(inter)


def _batch(gen: torch.Generator) -> tuple[torch.Tensor, ...]:
    local = BATCH // WORLD
    dense = torch.randn(local, 13, generator=gen)
    lengths = torch.randint(1, 2 * BAG, (BATCH,), generator=gen)
    idx = (torch.rand(int(lengths.sum()), generator=gen) ** 3 * ROWS).long()
    offsets = torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)[:-1]])
    label = torch.randint(0, 2, (local, 1), generator=gen).float()
    return dense, idx, offsets, label


def _run(rank: int, port: int, tmp: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), GLOO_SOCKET_IFNAME="lo")
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    torch.manual_seed(7 + rank)
    torch.set_num_threads(1)
    model = TinyDLRM()
    dense_params = [p for n, p in model.named_parameters() if not n.startswith("table")]
    opt = torch.optim.SGD(dense_params, lr=0.01)
    sparse_opt = torch.optim.SGD(model.table.parameters(), lr=0.01)
    gen = torch.Generator().manual_seed(100 + rank)
    loss_fn = nn.BCEWithLogitsLoss()
    sched = torch.profiler.schedule(wait=1, warmup=1, active=2, repeat=1)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], schedule=sched,
                                record_shapes=True, with_flops=True) as prof:
        for _ in range(4):
            dense, idx, offsets, label = _batch(gen)
            opt.zero_grad()
            sparse_opt.zero_grad()
            loss = loss_fn(model(dense, idx, offsets), label)
            loss.backward()
            with torch.profiler.record_function("grad_all_reduce"):
                flat = torch.cat([p.grad.flatten() for p in dense_params])
                dist.all_reduce(flat)
                flat /= WORLD
            opt.step()
            sparse_opt.step()
            prof.step()
    prof.export_chrome_trace(f"{tmp}/rank{rank}.json")
    dist.destroy_process_group()


def main() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    OUT.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(_run, args=(port, tmp), nprocs=WORLD, join=True)
        for rank in range(WORLD):
            dst = OUT / f"rank{rank}.json.gz"
            with open(f"{tmp}/rank{rank}.json", "rb") as src, gzip.GzipFile(dst, "wb", mtime=0) as out:
                shutil.copyfileobj(src, out)
            print(f"{dst}: {dst.stat().st_size:,} bytes")


if __name__ == "__main__":
    main()
