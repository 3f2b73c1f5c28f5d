#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""CUDA graph capture of an all_reduce. R2CCL refuses collectives on a
capturing stream (docs/nccl.md): with its libnccl.so.2 preloaded the capture
must fail with NCCL's invalid-usage error and the library's message; with
NVIDIA's NCCL (--expect replay) the graph must replay 100 times with correct
results.

  python3 torch_graph.py --rank R --nranks N --addr HOST [--gpu G] --expect error|replay
"""
import argparse
import sys

import torch
import torch.distributed as dist


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--nranks", type=int, required=True)
    ap.add_argument("--addr", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=29551)
    ap.add_argument("--gpu", type=int, default=0)
    ap.add_argument("--expect", choices=["error", "replay"], required=True)
    a = ap.parse_args()
    dev = torch.device("cuda", a.gpu)
    torch.cuda.set_device(dev)
    dist.init_process_group("nccl", init_method=f"tcp://{a.addr}:{a.port}", rank=a.rank,
                            world_size=a.nranks, device_id=dev)
    x = torch.ones(1 << 20, device=dev)
    dist.all_reduce(x)  # warm up outside the capture
    torch.cuda.synchronize()
    s = torch.cuda.Stream()
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.stream(s):
            with torch.cuda.graph(graph, stream=s):
                x.fill_(a.rank + 1)
                dist.all_reduce(x)
    except Exception as e:  # torch's DistBackendError / RuntimeError
        msg = str(e)
        print(f"rank {a.rank}: capture failed: {msg[:400]}", flush=True)
        ok = a.expect == "error" and ("invalid usage" in msg.lower() or "CUDA graph" in msg)
        print("torch_graph: OK (refused as documented)" if ok else "torch_graph: FAIL",
              flush=True)
        sys.exit(0 if ok else 1)
    if a.expect == "error":
        print("torch_graph: FAIL (the capture succeeded; R2CCL should refuse it)")
        sys.exit(1)
    want = a.nranks * (a.nranks + 1) / 2
    for i in range(100):
        graph.replay()
        torch.cuda.synchronize()
        if not torch.all(x == want):
            print(f"torch_graph: FAIL at replay {i}: {x[0].item()} != {want}")
            sys.exit(1)
    print("torch_graph: OK (100 replays)", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
