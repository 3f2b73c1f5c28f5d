#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Host time of a torch.distributed all_reduce call (issue 19: the library
adds under 5 us per call): bursts of back-to-back calls on a small tensor,
each burst timed from the first call to the return of the last (nothing
waits for the GPU inside it), then synchronized, untimed. Run the same
program with the library preloaded and with PyTorch's NCCL in one command:
PyTorch's own work per call (its work object, events, stream guards) is in
both, so the difference is what the library adds over NCCL's call.

  python3 torch_hosttime.py --rank R --nranks N [--addr A --port P --gpu G]
                            [--bytes 1024 --burst 100 --bursts 30 --label L]

Prints one line per rank:
  hosttime <label> rank R: <bytes> B, <n> calls: per call median M us, min m us, p90 q us (alloc <how>)
and checks the result (MAX of every rank's constant: exact).
"""
import argparse
import os
import statistics
import time

import torch
import torch.distributed as dist


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--nranks", type=int, required=True)
    ap.add_argument("--addr", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=29571)
    ap.add_argument("--gpu", type=int, default=0)
    ap.add_argument("--bytes", type=int, default=1024)
    ap.add_argument("--burst", type=int, default=100)
    ap.add_argument("--bursts", type=int, default=30)
    ap.add_argument("--label", default="run")
    a = ap.parse_args()
    dev = torch.device("cuda", a.gpu)
    torch.cuda.set_device(dev)
    dist.init_process_group("nccl", init_method=f"tcp://{a.addr}:{a.port}", rank=a.rank,
                            world_size=a.nranks, device_id=dev)
    # MAX of constants: the same value however many times it runs
    x = torch.full((max(a.bytes // 4, 1),), float(a.rank + 1), dtype=torch.float32, device=dev)
    for _ in range(2 * a.burst):  # warm: registration, the daemon's plans
        dist.all_reduce(x, op=dist.ReduceOp.MAX)
    torch.cuda.synchronize()
    dist.barrier()
    per_call = []
    for _ in range(a.bursts):
        t0 = time.perf_counter_ns()
        for _ in range(a.burst):
            dist.all_reduce(x, op=dist.ReduceOp.MAX)
        t1 = time.perf_counter_ns()
        torch.cuda.synchronize()
        per_call.append((t1 - t0) / a.burst / 1e3)
    want = float(a.nranks)
    ok = bool(torch.all(x == want).item())
    per_call.sort()
    alloc = os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "") or "cudaMalloc (default)"
    print(f"hosttime {a.label} rank {a.rank}: {a.bytes} B, {a.burst * a.bursts} calls: per call "
          f"median {statistics.median(per_call):.2f} us, min {per_call[0]:.2f} us, "
          f"p90 {per_call[int(0.9 * (len(per_call) - 1))]:.2f} us (alloc {alloc}) "
          f"result {'exact' if ok else 'WRONG'}", flush=True)
    dist.destroy_process_group()
    if not ok:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
