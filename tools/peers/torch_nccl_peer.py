#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The NCCL peer of the GPU benchmarks: PyTorch's NCCL (torch.distributed),
AllReduce float32 sum over GPU tensors, printed with nccl-tests' columns so
tests/gpu/run-on-device.sh can put it beside r2ccl-bench --gpu.

One process per rank (one per namespace host in the two-namespace case):
  torch_nccl_peer.py --rank R --nranks N --addr ROOT_ADDR [--port P] [--gpu D]
                     [-b 64M] [-e 1G] [-f 4] [-n 10] [-w 3]
Environment decides NCCL's transport (the caller sets NCCL_SOCKET_IFNAME,
NCCL_IB_DISABLE, NCCL_P2P_DISABLE, NCCL_SHM_DISABLE, NCCL_SOCKET_NTHREADS,
NCCL_NSOCKS_PERTHREAD). Every timed size is checked once: each rank
contributes rank+1 in every element, so the sum is n(n+1)/2 everywhere.
"""
import argparse
import datetime
import os
import sys
import time


def size_arg(s):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    s = s.strip().upper()
    return int(s[:-1]) * mult[s[-1]] if s[-1] in mult else int(s)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--nranks", type=int, required=True)
    ap.add_argument("--addr", required=True)
    ap.add_argument("--port", type=int, default=29531)
    ap.add_argument("--gpu", type=int, default=None)
    ap.add_argument("-b", type=size_arg, default=64 << 20)
    ap.add_argument("-e", type=size_arg, default=1 << 30)
    ap.add_argument("-f", type=int, default=4)
    ap.add_argument("-n", type=int, default=10)
    ap.add_argument("-w", type=int, default=3)
    a = ap.parse_args()

    import torch
    import torch.distributed as dist

    dev = a.gpu if a.gpu is not None else a.rank % torch.cuda.device_count()
    torch.cuda.set_device(dev)
    dist.init_process_group("nccl", init_method=f"tcp://{a.addr}:{a.port}", rank=a.rank,
                            world_size=a.nranks, timeout=datetime.timedelta(seconds=120),
                            device_id=torch.device("cuda", dev))
    n = a.nranks
    if a.rank == 0:
        print(f"# torch {torch.__version__} NCCL {'.'.join(map(str, torch.cuda.nccl.version()))}"
              f" allreduce float32 sum, {n} ranks, GPU {dev} (rank 0)")
        print("#       size        count    type  redop     time   algbw   busbw  #wrong")
        print("#        (B)   (elements)                    (us)  (GB/s)  (GB/s)")
    size = a.b
    bad_total = 0
    while size <= a.e:
        count = size // 4
        x = torch.full((count,), float(a.rank + 1), dtype=torch.float32, device="cuda")
        for _ in range(a.w):
            dist.all_reduce(x)
        torch.cuda.synchronize()
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(a.n):
            dist.all_reduce(x)
        torch.cuda.synchronize()
        us = (time.perf_counter() - t0) / a.n * 1e6
        x.fill_(float(a.rank + 1))
        dist.all_reduce(x)
        wrong = int((x != float(n * (n + 1) // 2)).sum().item())
        w = torch.tensor([wrong], dtype=torch.int64, device="cuda")
        dist.all_reduce(w)
        bad_total += int(w.item())
        alg = size / us / 1e3
        if a.rank == 0:
            print(f"{size:12d} {count:12d}   float    sum {us:8.1f} {alg:7.2f} {alg * 2 * (n - 1) / n:7.2f}"
                  f" {int(w.item()):7d}", flush=True)
        del x
        size *= a.f
    dist.destroy_process_group()
    if a.rank == 0:
        print(f"# Out of bounds values : {bad_total} {'FAILED' if bad_total else 'OK'}")
    sys.exit(1 if bad_total else 0)


if __name__ == "__main__":
    main()
