#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Every torch.distributed operation through backend="nccl", unchanged, with
whatever libnccl.so.2 the process binds (R2CCL's when preloaded), checked
against a CPU reference computed from every rank's inputs.

  python3 torch_ops.py --rank R --nranks N --addr HOST [--port P] [--gpu G]

Ops: all_reduce (SUM, PRODUCT, MIN, MAX, AVG, PREMUL_SUM), all_gather_into_tensor,
reduce_scatter_tensor, broadcast, reduce, send/recv, all_to_all_single,
barrier, new_group; types float32, bfloat16, float16, int64. Integers must
match exactly, floats within the reduction's rounding. Prints one line per
check and 'torch_ops: OK' at the end; exits 1 on the first mismatch.
bfloat16 PREMUL_SUM: PyTorch <= 2.11 hands NCCL the factor as a float, which
NCCL (and R2CCL alike) reads as 2 bytes (pytorch/pytorch#190745); when the
result is not 0.5 * sum, it must be what NCCL gives (a zero factor for 0.5).
"""
import argparse
import os
import struct
import sys

import torch
import torch.distributed as dist

DTYPES = [torch.float32, torch.bfloat16, torch.float16, torch.int64]
COUNT = 1 << 16 | 5  # odd: no lucky alignment


def inputs(rank, dtype, op, n=COUNT):
    """Rank's input, on the CPU: values whose reductions are exact in every type."""
    i = torch.arange(n, dtype=torch.int64)
    if op == "prod":
        v = torch.where((i + rank) % 3 == 0, -2, 1)
    elif op in ("min", "max"):
        v = ((i * 7 + rank * 13) % 41) - 20
    else:
        v = (i % 9) - 4 + rank
    return v.to(dtype)


def tol(dtype):
    return {torch.float32: (1e-6, 1e-6), torch.float16: (1e-3, 1e-3),
            torch.bfloat16: (1e-2, 1e-2)}.get(dtype, (0, 0))


def check(name, got, want):
    got = got.cpu()
    if want.dtype.is_floating_point:
        rtol, atol = tol(want.dtype)
        ok = torch.allclose(got.float(), want.float(), rtol=rtol, atol=atol)
    else:
        ok = torch.equal(got, want)
    print(f"{name:48s} {'ok' if ok else 'MISMATCH'}", flush=True)
    if not ok:
        bad = (got.float() - want.float()).abs().argmax().item()
        print(f"  first worst element {bad}: got {got[bad].item()} want {want[bad].item()}")
        sys.exit(1)


PREMUL = 0.5


def nccl_bf16_factor(f):
    """The factor NCCL (and R2CCL, which reads it alike) gets for a bfloat16
    PREMUL_SUM from PyTorch <= 2.11: PyTorch passes a 4-byte float
    (unpackPreMulSum<float, ncclBfloat16>, pytorch/pytorch#190745) and NCCL
    reads the type's 2 bytes, the float's low half: 0.0 for 0.5."""
    lo = int.from_bytes(struct.pack("<f", f)[:2], "little")
    return struct.unpack("<f", struct.pack("<I", lo << 16))[0]


def reference(op, dtype, n, count=COUNT, factor=PREMUL):
    xs = [inputs(r, dtype, op, count).double() for r in range(n)]
    if op == "sum":
        w = sum(xs)
    elif op == "prod":
        w = xs[0].clone()
        for x in xs[1:]:
            w *= x
    elif op == "min":
        w = torch.stack(xs).min(0).values
    elif op == "max":
        w = torch.stack(xs).max(0).values
    elif op == "avg":
        w = sum(xs) / n
    elif op == "premul":
        w = sum(x * factor for x in xs)
    return w.to(dtype)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--nranks", type=int, required=True)
    ap.add_argument("--addr", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=29531)
    ap.add_argument("--gpu", type=int, default=0)
    a = ap.parse_args()
    rank, n = a.rank, a.nranks
    dev = torch.device("cuda", a.gpu)
    torch.cuda.set_device(dev)
    dist.init_process_group("nccl", init_method=f"tcp://{a.addr}:{a.port}", rank=rank,
                            world_size=n, device_id=dev)
    print(f"rank {rank}: NCCL version {torch.cuda.nccl.version()} (compiled), "
          f"LD_PRELOAD={os.environ.get('LD_PRELOAD', '')}", flush=True)
    ops = {"sum": dist.ReduceOp.SUM, "prod": dist.ReduceOp.PRODUCT, "min": dist.ReduceOp.MIN,
           "max": dist.ReduceOp.MAX, "avg": dist.ReduceOp.AVG}
    for dtype in DTYPES:
        names = list(ops) + (["premul"] if dtype.is_floating_point else [])
        for name in names:
            if name == "avg" and not dtype.is_floating_point:
                continue  # torch refuses AVG on integers
            x = inputs(rank, dtype, name).to(dev)
            op = dist._make_nccl_premul_sum(PREMUL) if name == "premul" else ops[name]
            dist.all_reduce(x, op=op)
            want = reference(name, dtype, n)
            if name == "premul" and dtype == torch.bfloat16 and \
                    not torch.allclose(x.cpu().float(), want.float(), *tol(dtype)):
                # PyTorch's own bug, NCCL gives the same: expect NCCL's result
                f = nccl_bf16_factor(PREMUL)
                print(f"  PyTorch passes bfloat16 PREMUL_SUM's factor as a float "
                      f"(pytorch/pytorch#190745): NCCL's reading is {f}", flush=True)
                want = reference(name, dtype, n, factor=f)
            check(f"all_reduce {name} {dtype}", x, want)
        # all_gather_into_tensor
        x = inputs(rank, dtype, "sum").to(dev)
        out = torch.empty(n * COUNT, dtype=dtype, device=dev)
        dist.all_gather_into_tensor(out, x)
        check(f"all_gather_into_tensor {dtype}", out,
              torch.cat([inputs(r, dtype, "sum") for r in range(n)]))
        # reduce_scatter_tensor (sum)
        big = torch.cat([inputs(rank + q, dtype, "sum") for q in range(n)]).to(dev)
        out = torch.empty(COUNT, dtype=dtype, device=dev)
        dist.reduce_scatter_tensor(out, big, op=dist.ReduceOp.SUM)
        want = sum(inputs(r + rank, dtype, "sum").double() for r in range(n)).to(dtype)
        check(f"reduce_scatter_tensor {dtype}", out, want)
        # broadcast from the last rank
        x = (inputs(rank, dtype, "sum") if rank == n - 1 else
             torch.zeros(COUNT, dtype=dtype)).to(dev)
        dist.broadcast(x, src=n - 1)
        check(f"broadcast {dtype}", x, inputs(n - 1, dtype, "sum"))
        # reduce to rank 0
        x = inputs(rank, dtype, "sum").to(dev)
        dist.reduce(x, dst=0, op=dist.ReduceOp.SUM)
        if rank == 0:
            check(f"reduce {dtype}", x, reference("sum", dtype, n))
        # send/recv around a ring (isend/irecv: both directions at once)
        nxt, prv = (rank + 1) % n, (rank + n - 1) % n
        x = inputs(rank, dtype, "sum").to(dev)
        y = torch.empty_like(x)
        reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, x, nxt),
                                       dist.P2POp(dist.irecv, y, prv)])
        for r in reqs:
            r.wait()
        check(f"send/recv {dtype}", y, inputs(prv, dtype, "sum"))
        if n == 2:
            if rank == 0:
                dist.send(x, 1)
            else:
                dist.recv(y, 0)
                check(f"send then recv {dtype}", y, inputs(0, dtype, "sum"))
        # all_to_all_single: block q of rank p goes to block p of rank q
        x = torch.cat([inputs(rank * n + q, dtype, "sum", 1024) for q in range(n)]).to(dev)
        y = torch.empty_like(x)
        dist.all_to_all_single(y, x)
        check(f"all_to_all_single {dtype}", y,
              torch.cat([inputs(p * n + rank, dtype, "sum", 1024) for p in range(n)]))
    dist.barrier()
    print(f"{'barrier':48s} ok", flush=True)
    # new_group: every rank but the last (or all when 2)
    members = list(range(max(n - 1, 2)))
    g = dist.new_group(members)
    if rank in members:
        x = torch.full((1000,), rank + 1, dtype=torch.int64, device=dev)
        dist.all_reduce(x, group=g)
        check("new_group all_reduce", x,
              torch.full((1000,), sum(m + 1 for m in members), dtype=torch.int64))
    dist.barrier()
    torch.cuda.synchronize()
    dist.destroy_process_group()
    print("torch_ops: OK", flush=True)


if __name__ == "__main__":
    main()
