#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""A DistributedDataParallel training loop (small MLP, fixed data, SGD) whose
losses are written one per line, to compare runs: R2CCL's libnccl.so.2
preloaded against PyTorch's own NCCL beside it (same command, same seeds).

  python3 torch_ddp.py --rank R --nranks N --addr HOST [--port P] [--gpu G]
      [--steps 200] [--losses FILE] [--mark-step 100 --mark-file F]

--mark-step: at that step the rank creates --mark-file (the caller sets a
rail down when it appears) and goes on; the run must finish with the same
losses. Prints steps/s at the mark (before a fault set there) and at the end.
"""
import argparse
import datetime
import os
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--nranks", type=int, required=True)
    ap.add_argument("--addr", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=29541)
    ap.add_argument("--gpu", type=int, default=0)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--losses", default=None)
    ap.add_argument("--mark-step", type=int, default=-1)
    ap.add_argument("--mark-file", default=None)
    ap.add_argument("--width", type=int, default=2048)
    # the process group's timeout in seconds (PyTorch's default, 10 min for
    # NCCL, when left out): how long a hung collective lives before
    # PyTorch's watchdog aborts the job
    ap.add_argument("--pg-timeout", type=float, default=None)
    a = ap.parse_args()
    dev = torch.device("cuda", a.gpu)
    torch.cuda.set_device(dev)
    kw = {"timeout": datetime.timedelta(seconds=a.pg_timeout)} if a.pg_timeout else {}
    dist.init_process_group("nccl", init_method=f"tcp://{a.addr}:{a.port}", rank=a.rank,
                            world_size=a.nranks, device_id=dev, **kw)
    torch.manual_seed(1234)  # the same initial model everywhere
    w = a.width
    model = torch.nn.Sequential(torch.nn.Linear(256, w), torch.nn.ReLU(),
                                torch.nn.Linear(w, w), torch.nn.ReLU(),
                                torch.nn.Linear(w, 10)).to(dev)
    ddp = DDP(model, device_ids=[a.gpu])
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01, momentum=0.9)
    g = torch.Generator().manual_seed(99 + a.rank)  # each rank its own shard
    data = [(torch.randn(64, 256, generator=g), torch.randint(0, 10, (64,), generator=g))
            for _ in range(16)]
    losses = []
    torch.cuda.synchronize()
    t0 = time.time()
    for step in range(a.steps):
        if step == a.mark_step and a.mark_file and a.rank == 0:
            # steps/s before the fault: a run that hangs after it has only this
            print(f"torch_ddp: steps 0-{step} in {time.time() - t0:.2f} s = "
                  f"{step / (time.time() - t0):.1f} steps/s (before the mark)", flush=True)
            open(a.mark_file, "w").close()
        x, y = data[step % len(data)]
        x, y = x.to(dev, non_blocking=True), y.to(dev, non_blocking=True)
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(ddp(x), y)
        loss.backward()
        opt.step()
        # the mean loss over ranks (one more all_reduce per step)
        l = loss.detach().clone()
        dist.all_reduce(l, op=dist.ReduceOp.AVG)
        losses.append(l.item())
    torch.cuda.synchronize()
    dt = time.time() - t0
    if a.rank == 0:
        print(f"torch_ddp: {a.steps} steps in {dt:.2f} s = {a.steps / dt:.1f} steps/s, "
              f"final loss {losses[-1]:.6f}", flush=True)
        if a.losses:
            with open(a.losses, "w") as f:
                f.writelines(f"{v:.8f}\n" for v in losses)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
