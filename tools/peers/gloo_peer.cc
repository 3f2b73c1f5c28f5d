// SPDX-License-Identifier: MIT
//
// gloo_peer: the Gloo peer of r2ccl-bench (Debian's libgloo-dev). One rank
// per process; r2ccl-bench forks one per local rank. Rendezvous through a
// FileStore directory (shared by the hosts: network namespaces share the
// filesystem), TCP on --addr (this host's address; default 127.0.0.1).
//
//   gloo_peer --rank R --nranks N --store DIR [--addr A] [-o OP] [-d TYPE]
//             [-r REDOP] [-R ROOT] [-n ITERS] [-w WARMUP] [-c 0|1] BYTES...
//
// Algorithms: allreduce AllreduceRingChunked (as the anchor figures),
// allgather AllgatherRing, reducescatter ReduceScatterHalvingDoubling,
// broadcast BroadcastOneToAll, reduce gloo::reduce, sendrecv unbound buffers
// (send to rank+1, receive from rank-1). Gloo's algorithms work in place, so
// the allreduce/reducescatter/broadcast buffers are reused across iterations
// (no copy is timed). Types: int8 uint8 int32 uint32 int64 uint64 half float
// double; avg runs as sum. Prints one r2peer line per size on rank 0 (see
// peer_common.h); the check covers rank 0's own result.
#include <gloo/algorithm.h>
#include <gloo/allgather_ring.h>
#include <gloo/allreduce_ring_chunked.h>
#include <gloo/barrier_all_to_all.h>
#include <gloo/broadcast_one_to_all.h>
#include <gloo/reduce.h>
#include <gloo/reduce_scatter.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/types.h>

#include <cstdint>
#include <exception>
#include <memory>
#include <vector>

#include "peer_common.h"

namespace {

template <typename T>
const gloo::ReductionFunction<T>* reduction(const char* op) {
  if (!strcmp(op, "prod")) return gloo::ReductionFunction<T>::product;
  if (!strcmp(op, "min")) return gloo::ReductionFunction<T>::min;
  if (!strcmp(op, "max")) return gloo::ReductionFunction<T>::max;
  return gloo::ReductionFunction<T>::sum;
}

template <typename T>
void (*reduce_fn(const char* op))(void*, const void*, const void*, size_t) {
  if (!strcmp(op, "prod")) return &gloo::product<T>;
  if (!strcmp(op, "min")) return &gloo::min<T>;
  if (!strcmp(op, "max")) return &gloo::max<T>;
  return &gloo::sum<T>;
}

template <typename T> T to_t(double v) { return static_cast<T>(v); }
template <> gloo::float16 to_t<gloo::float16>(double v) { return gloo::cpu_float2half_rn(static_cast<float>(v)); }
template <typename T> double from_t(T v) { return static_cast<double>(v); }
template <> double from_t<gloo::float16>(gloo::float16 v) { return gloo::cpu_half2float(v); }

template <typename T>
int run(const peer_args& a, std::shared_ptr<gloo::rendezvous::Context> ctx) {
  const int rank = a.rank, n = a.nranks;
  const size_t es = sizeof(T);
  size_t maxs = 1, maxr = 1;
  for (int i = 0; i < a.nsizes; i++) {
    peer_sizes s;
    peer_step(a.op, a.sizes[i], es, n, &s);
    maxs = std::max(maxs, s.send_elems);
    maxr = std::max(maxr, s.recv_elems);
  }
  std::vector<T> sb(std::max(maxs, maxr)), rb(std::max(maxs, maxr));
  const int to = (rank + 1) % n, from = (rank - 1 + n) % n;
  gloo::BarrierAllToAll barrier(ctx);

  for (int si = 0; si < a.nsizes; si++) {
    peer_sizes s;
    peer_step(a.op, a.sizes[si], es, n, &s);
    const size_t c = s.count;
    for (size_t j = 0; j < s.send_elems; j++) sb[j] = to_t<T>(peer_in(a.op, a.redop, rank, j));
    std::fill(rb.begin(), rb.end(), to_t<T>(0));

    // The algorithm objects for this size (set up once, run many times).
    std::unique_ptr<gloo::Algorithm> algo;
    std::unique_ptr<gloo::ReduceOptions> ropts;
    std::unique_ptr<gloo::transport::UnboundBuffer> ubs, ubr;
    T* data = sb.data();  // in-place algorithms work on sb
    if (c > 0) {
      switch (a.op) {
        case P_ALLREDUCE:
          algo.reset(new gloo::AllreduceRingChunked<T>(ctx, std::vector<T*>{data}, (int)c,
                                                       reduction<T>(a.redop)));
          break;
        case P_ALLGATHER:
          algo.reset(new gloo::AllgatherRing<T>(ctx, std::vector<const T*>{sb.data()}, rb.data(),
                                                (int)c));
          break;
        case P_REDUCESCATTER:
          algo.reset(new gloo::ReduceScatterHalvingDoubling<T>(
              ctx, std::vector<T*>{data}, (int)(c * n), std::vector<int>(n, (int)c),
              reduction<T>(a.redop)));
          break;
        case P_BROADCAST:
          algo.reset(new gloo::BroadcastOneToAll<T>(ctx, std::vector<T*>{data}, c, a.root));
          break;
        case P_REDUCE:
          ropts.reset(new gloo::ReduceOptions(ctx));
          ropts->setInput(sb.data(), c);
          ropts->setOutput(rb.data(), c);
          ropts->setRoot(a.root);
          ropts->setReduceFunction(reduce_fn<T>(a.redop));
          break;
        case P_SENDRECV:
          ubs = ctx->createUnboundBuffer(sb.data(), c * es);
          ubr = ctx->createUnboundBuffer(rb.data(), c * es);
          break;
      }
    }
    auto once = [&]() {
      if (c == 0) return;
      if (algo) {
        algo->run();
      } else if (ropts) {
        gloo::reduce(*ropts);
      } else {
        ubr->recv(from, (uint64_t)si);
        ubs->send(to, (uint64_t)si);
        ubs->waitSend();
        ubr->waitRecv();
      }
    };

    // The checked run, on fresh inputs.
    once();
    long long wrong = 0;
    if (a.check && rank == 0) {
      const T* out = (a.op == P_ALLREDUCE || a.op == P_REDUCESCATTER || a.op == P_BROADCAST)
                         ? sb.data() : rb.data();
      size_t ne = s.recv_elems, off = 0;
      if (a.op == P_REDUCESCATTER) off = 0;  // rank 0's block is the first
      if (a.op == P_REDUCE && rank != a.root) ne = 0;
      for (size_t j = 0; j < ne; j++) {
        double e;
        if (a.op == P_ALLGATHER) e = peer_in(a.op, a.redop, (int)(j / c), j % c);
        else if (a.op == P_BROADCAST) e = peer_in(a.op, a.redop, a.root, j);
        else if (a.op == P_SENDRECV) e = peer_in(a.op, a.redop, from, j);
        else e = peer_reduced(a.redop, n, off + j);
        if (from_t<T>(out[off + j]) != e) wrong++;
      }
    }
    for (int w = 0; w < a.warmup; w++) once();
    barrier.run();
    std::vector<double> lat(static_cast<size_t>(a.iters > 0 ? a.iters : 1));
    double t0 = peer_now_us();
    for (int it = 0; it < a.iters; it++) {
      double t = peer_now_us();
      once();
      lat[static_cast<size_t>(it)] = peer_now_us() - t;
    }
    double us = (peer_now_us() - t0) / a.iters;
    if (rank == 0) peer_print_lat("gloo", &a, n, &s, us, wrong, lat.data(), a.iters);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  peer_args a;
  if (peer_parse_args(argc, argv, &a, 1)) return 2;
  if (a.root >= a.nranks) a.root = 0;
  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = a.addr;
    auto dev = gloo::transport::tcp::CreateDevice(attr);
    gloo::rendezvous::FileStore store(a.store);
    auto ctx = std::make_shared<gloo::rendezvous::Context>(a.rank, a.nranks);
    ctx->connectFullMesh(store, dev);
    const char* t = a.type;
    if (!strcmp(t, "float")) return run<float>(a, ctx);
    if (!strcmp(t, "double")) return run<double>(a, ctx);
    if (!strcmp(t, "half")) return run<gloo::float16>(a, ctx);
    if (!strcmp(t, "int8")) return run<int8_t>(a, ctx);
    if (!strcmp(t, "uint8")) return run<uint8_t>(a, ctx);
    if (!strcmp(t, "int32")) return run<int32_t>(a, ctx);
    if (!strcmp(t, "uint32")) return run<uint32_t>(a, ctx);
    if (!strcmp(t, "int64")) return run<int64_t>(a, ctx);
    if (!strcmp(t, "uint64")) return run<uint64_t>(a, ctx);
    if (a.rank == 0) fprintf(stderr, "gloo_peer: type %s is not supported by Gloo\n", t);
    return 3;
  } catch (const std::exception& e) {
    fprintf(stderr, "gloo_peer: rank %d: %s\n", a.rank, e.what());
    return 1;
  }
}
