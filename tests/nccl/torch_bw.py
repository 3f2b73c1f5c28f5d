#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""torch.distributed all_reduce bandwidth (float32, in place), in nccl-tests'
columns, to set beside r2ccl-bench --gpu on the same hosts (the issue asks
for at least 90% of its busbw at 64 MB-1 GB through the library).

  python3 torch_bw.py --rank R --nranks N --addr HOST [--gpu G] [-b 64M -e 1G -f 4 -n 10 -w 3]
"""
import argparse
import time

import torch
import torch.distributed as dist


def size(s):
    m = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(s[:-1]) * m[s[-1]] if s[-1] in m else int(s)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--nranks", type=int, required=True)
    ap.add_argument("--addr", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=29561)
    ap.add_argument("--gpu", type=int, default=0)
    ap.add_argument("-b", default="64M")
    ap.add_argument("-e", default="1G")
    ap.add_argument("-f", type=int, default=4)
    ap.add_argument("-n", type=int, default=10)
    ap.add_argument("-w", type=int, default=3)
    a = ap.parse_args()
    dev = torch.device("cuda", a.gpu)
    torch.cuda.set_device(dev)
    dist.init_process_group("nccl", init_method=f"tcp://{a.addr}:{a.port}", rank=a.rank,
                            world_size=a.nranks, device_id=dev)
    n = a.nranks
    if a.rank == 0:
        print(f"# {'size':>12} {'count':>12} {'type':>6} {'redop':>6} {'time us':>10} "
              f"{'algbw':>8} {'busbw':>8}")
    s = size(a.b)
    while s <= size(a.e):
        x = torch.ones(s // 4, dtype=torch.float32, device=dev)
        for _ in range(a.w):
            dist.all_reduce(x)
        torch.cuda.synchronize()
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(a.n):
            dist.all_reduce(x)
        torch.cuda.synchronize()
        us = (time.perf_counter() - t0) / a.n * 1e6
        alg = s / us / 1e3
        if a.rank == 0:
            print(f"  {s:>12} {s // 4:>12} {'float':>6} {'sum':>6} {us:>10.1f} {alg:>8.2f} "
                  f"{alg * 2 * (n - 1) / n:>8.2f}", flush=True)
        s *= a.f
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
