#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The figures of tools/bench/tenant-bench.sh, in parts that are tested alone
(`tenant-shares.py selftest`, in the unit suite).

  sample   CMD... : runs CMD (prints `r2cclctl --json tenants`) every
             --interval s for --duration s; one line per sample on stdout:
             "t_ms name bytes_total" per tenant; --raw FILE keeps each
             sample's JSON too ("t_ms [tenants...]")
  shares   FILE NAME=WEIGHT... [--queued RAW] [--traces CSV...] : per window of consecutive
             samples, each tenant's share of the named tenants' bytes against
             its weight's share; the windows where every named tenant sent
             (the first and last of such a stretch left out: contention starts
             or ends inside them); with --traces (r2ccl-bench --trace of every
             loop of every tenant) only the windows while all of them ran
             their timed iterations, and the figure of every window beside;
             with --queued (sample --raw's file) also the windows where every
             tenant had chunks queued at both ends
  rate     FILE NAME RATE_BPS BURST_BYTES : the tenant's bytes in every window
             of 1 s (sample pairs 1 s apart or more) against rate*T + burst,
             and its mean rate against the cap
  pct      TRACE... : p50 and p99 of r2ccl-bench --trace files (end - start)
  react    FOLLOW CMDS NAME=WEIGHT... : how soon each `r2cclctl --json
             tenants set` of CMDS (its sent_mono_us) shows in the counters of
             FOLLOW (`r2cclctl --json -f -i 1 tenants`, snapshot_mono_us):
             rate=0 (uncapped): the first byte counted after it; rate=R
             (capped to almost nothing): the last one; weight=W: the first
             snapshot at which the tenant's share of the last 512 KiB that
             the named tenants sent since it, while all had chunks queued,
             is past the midpoint between its share before and the new
             weights' share (NAME=WEIGHT: the weights after it)
  throughput FILE NAME... [--vs FILE2 NAME2...] : the named tenants' bytes
             together per second, from the first sample where they grew to the
             last (host 0: what left it on every rail); with --vs, the ratio to
             the same figure of another run (aggregate vs one tenant alone)
"""
import json
import subprocess
import sys
import time


def parse_samples(lines):
    """lines "t_ms name bytes" -> sorted [(t_ms, {name: bytes})]"""
    by_t = {}
    for line in lines:
        parts = line.split()
        if len(parts) != 3 or parts[0].startswith('#'):
            continue
        t, name, b = float(parts[0]), parts[1], int(parts[2])
        by_t.setdefault(t, {})[name] = b
    return sorted(by_t.items())


def windows(samples):
    """consecutive sample pairs -> [(t0, t1, {name: bytes in the window})]"""
    out = []
    for (t0, a), (t1, b) in zip(samples, samples[1:]):
        out.append((t0, t1, {n: b[n] - a.get(n, 0) for n in b}))
    return out


def mono_t0(lines):
    """the '# t0_mono_us' line of a samples file, or None"""
    for line in lines:
        parts = line.split()
        if len(parts) == 3 and parts[:2] == ['#', 't0_mono_us']:
            return int(parts[2])
    return None


def timed_span(paths, t0_us):
    """(from_ms, to_ms) in the samples' time: from the latest first timed
    iteration's start to the earliest last one's end over the r2ccl-bench
    --trace files (every loop of every tenant in its timed iterations)"""
    starts, ends = [], []
    for p in paths:
        rows = []
        with open(p) as f:
            for line in f:
                parts = line.strip().split(',')
                if len(parts) >= 3 and parts[0].isdigit():
                    rows.append((float(parts[1]), float(parts[2])))
        if not rows:
            return None
        starts.append(min(r[0] for r in rows))
        ends.append(max(r[1] for r in rows))
    return ((max(starts) - t0_us) / 1000.0, (min(ends) - t0_us) / 1000.0)


def shares(samples, weights, span=None):
    """[(t0, t1, {name: (share, want)})] over the contended windows (every
    named tenant sent in them), the first of each contended stretch left
    out (contention began inside it) and its last where a window without
    contention follows (a tenant stopped inside it)"""
    total_w = sum(weights.values())
    rows, run = [], []
    for t0, t1, d in windows(samples):
        sent = {n: d.get(n, 0) for n in weights}
        if not all(v > 0 for v in sent.values()):
            rows.extend(run[1:-1])  # the stretch ended inside its last window
            run = []
            continue
        tot = sum(sent.values())
        run.append((t0, t1, {n: (sent[n] / tot, weights[n] / total_w) for n in weights}))
    rows.extend(run[1:])  # still contended when the samples end
    if span:
        rows = [r for r in rows if r[0] >= span[0] and r[1] <= span[1]]
    return rows


def rate_check(samples, name, rate_bps, burst, span_ms=1000.0):
    """(worst bytes - (rate*T + burst) over windows of >= span_ms, mean bit/s
    while it sent)"""
    pts = [(t, s.get(name, 0)) for t, s in samples]
    worst = None
    j = 0
    for i in range(len(pts)):
        while j < len(pts) and pts[j][0] - pts[i][0] < span_ms:
            j += 1
        if j >= len(pts):
            break
        t_span = (pts[j][0] - pts[i][0]) / 1000.0
        excess = (pts[j][1] - pts[i][1]) - (rate_bps / 8.0 * t_span + burst)
        worst = excess if worst is None else max(worst, excess)
    active = [(t, b) for t, b in pts if b > pts[0][1]]
    mean = 0.0
    if len(active) >= 2:
        (ta, ba), (tb, bb) = active[0], active[-1]
        if tb > ta:
            mean = (bb - ba) * 8.0 / ((tb - ta) / 1000.0)
    return worst, mean


def throughput(samples, names):
    """bytes/s of the named tenants together, over the span where they sent"""
    pts = [(t, sum(s.get(n, 0) for n in names)) for t, s in samples]
    grew = [i for i in range(1, len(pts)) if pts[i][1] > pts[i - 1][1]]
    if not grew:
        return 0.0
    i0, i1 = grew[0] - 1, grew[-1]
    dt = (pts[i1][0] - pts[i0][0]) / 1000.0
    return (pts[i1][1] - pts[i0][1]) / dt if dt > 0 else 0.0


def percentile(xs, p):
    xs = sorted(xs)
    if not xs:
        return float('nan')
    k = min(len(xs) - 1, max(0, int(round(p / 100.0 * (len(xs) - 1)))))
    return xs[k]


def trace_times(paths):
    """r2ccl-bench --trace: iteration,start_us,end_us,size,in_place"""
    out = []
    for p in paths:
        with open(p) as f:
            for line in f:
                parts = line.strip().split(',')
                if len(parts) < 3 or not parts[0].isdigit():
                    continue
                out.append(float(parts[2]) - float(parts[1]))
    return out


def cmd_sample(argv):
    interval, duration, raw = 0.1, 10.0, None
    while argv and argv[0].startswith('--'):
        if argv[0] == '--interval':
            interval = float(argv[1])
        elif argv[0] == '--duration':
            duration = float(argv[1])
        elif argv[0] == '--raw':
            raw = open(argv[1], 'w')
        else:
            raise SystemExit('sample: unknown option ' + argv[0])
        argv = argv[2:]
    t_start = time.monotonic()
    nxt = t_start
    # the samples' time base on CLOCK_MONOTONIC, that of r2ccl-bench --trace
    print('# t0_mono_us %d' % int(t_start * 1e6), flush=True)
    while time.monotonic() - t_start < duration:
        now = time.monotonic()
        try:
            out = subprocess.run(argv, capture_output=True, text=True, timeout=5).stdout
            tenants = json.loads(out).get('tenants', [])
        except (subprocess.SubprocessError, ValueError):
            tenants = []
        t_ms = (now - t_start) * 1000.0
        # the daemon's own time of the counters where it says (the command
        # runs a few to a few hundred ms after `now` on a busy machine)
        snap = tenants[0].get('snapshot_mono_us') if tenants else None
        if snap:
            t_ms = snap / 1000.0 - t_start * 1000.0
        for t in tenants:
            print('%.1f %s %d' % (t_ms, t['name'], t.get('bytes_total', 0)), flush=True)
        if raw:  # every sample whole, for a look at queues and rails
            raw.write('%.1f %s\n' % (t_ms, json.dumps(tenants)))
            raw.flush()
        nxt += interval
        time.sleep(max(0.0, nxt - time.monotonic()))
    return 0


def summary(rows):
    """(largest distance, windows within 2 points) of shares() rows"""
    worst, ok = 0.0, 0
    for _, _, d in rows:
        dist = max(abs(s - w) for s, w in d.values())
        worst = max(worst, dist)
        ok += dist <= 0.02 + 1e-9
    return worst, ok


def queued_at(path):
    """sample --raw FILE -> {t_ms: {name: queued_bytes}}"""
    out = {}
    with open(path) as f:
        for line in f:
            t, _, js = line.partition(' ')
            try:
                out[float(t)] = {x['name']: x.get('queued_bytes', 0) for x in json.loads(js)}
            except ValueError:
                continue
    return out


def backlogged(rows, queued, names):
    """the rows whose every named tenant had chunks queued at both ends of
    the window (contention in the daemon's queues, where the scheduler
    decides; a window without it shows what the tenants offered)"""
    def full(t):
        q = queued.get(t)
        return q is not None and all(q.get(n, 0) > 0 for n in names)
    return [r for r in rows if full(r[0]) and full(r[1])]


def cmd_shares(argv):
    queued = None
    if '--queued' in argv:
        i = argv.index('--queued')
        queued = queued_at(argv[i + 1])
        argv = argv[:i] + argv[i + 2:]
    traces = argv[argv.index('--traces') + 1:] if '--traces' in argv else []
    argv = argv[:argv.index('--traces')] if '--traces' in argv else argv
    path, weights = argv[0], {}
    for a in argv[1:]:
        n, w = a.split('=')
        weights[n] = float(w)
    with open(path) as f:
        lines = f.readlines()
    samples = parse_samples(lines)
    span = None
    if traces:
        t0 = mono_t0(lines)
        span = timed_span(traces, t0) if t0 is not None else None
        if not span:
            print('# no time base or trace: every contended window counts')
    rows = shares(samples, weights, span)
    names = list(weights)
    print('# window_ms ' + ' '.join('%s_share %s_want' % (n, n) for n in names))
    for t0, t1, d in rows:
        print('%.0f-%.0f ' % (t0, t1) +
              ' '.join('%.3f %.3f' % d[n] for n in names))
    if span:
        every = shares(samples, weights)
        w_all, ok_all = summary(every)
        print('# every contended window (start-up and ends too): %d, %d within 2 points, '
              'largest distance %.1f points' % (len(every), ok_all, w_all * 100))
        print('# while every loop ran its timed iterations (%.0f-%.0f ms):' % span)
    worst, ok = summary(rows)
    if queued is not None:
        full = backlogged(rows, queued, names)
        w_full, ok_full = summary(full)
        print('# of these, with every tenant\'s chunks queued at both ends: %d windows, %d '
              'within 2 points, largest distance %.1f points' % (len(full), ok_full,
                                                                  w_full * 100))
    print('# %d windows, %d within 2 points; largest distance from the weights\' share: '
          '%.1f%% (target 2%%)' % (len(rows), ok, worst * 100))
    return 0


def cmd_rate(argv):
    path, name, rate, burst = argv[0], argv[1], float(argv[2]), float(argv[3])
    with open(path) as f:
        worst, mean = rate_check(parse_samples(f), name, rate, burst)
    print('# %s: mean %.1f Mbit/s = %.1f%% of the cap %.1f Mbit/s (target >= 95%%); '
          'worst 1 s window %s rate*T + burst by %.0f bytes'
          % (name, mean / 1e6, 100.0 * mean / rate if rate else 0.0, rate / 1e6,
             'over' if worst is not None and worst > 0 else 'within',
             abs(worst) if worst is not None else 0.0))
    return 0


def cmd_pct(argv):
    ts = trace_times(argv)
    print('p50 %.0f us p99 %.0f us (%d operations)' % (percentile(ts, 50),
                                                        percentile(ts, 99), len(ts)))
    return 0


def cmd_throughput(argv):
    vs = argv.index('--vs') if '--vs' in argv else len(argv)
    with open(argv[0]) as f:
        x = throughput(parse_samples(f), argv[1:vs])
    line = 'throughput %.1f MB/s' % (x / 1e6)
    if vs < len(argv):
        with open(argv[vs + 1]) as f:
            y = throughput(parse_samples(f), argv[vs + 2:])
        line += ' = %.1f%% of %.1f MB/s (target >= 95%%)' % (100.0 * x / y if y else 0.0,
                                                              y / 1e6)
    print(line)
    return 0


def json_stream(text):
    """the JSON objects of text, one after another (r2cclctl --follow)"""
    dec, i, out = json.JSONDecoder(), 0, []
    while True:
        while i < len(text) and text[i].isspace():
            i += 1
        if i >= len(text):
            return out
        try:
            obj, i = dec.raw_decode(text, i)
        except ValueError:
            return out  # a last object cut short (the follower stopped)
        out.append(obj)


def snapshots(objs):
    """tenants objects -> sorted [(t_us, {name: bytes_total})]"""
    out = []
    for o in objs:
        ts = o.get('tenants') or []
        if ts and ts[0].get('snapshot_mono_us') is not None:
            out.append((ts[0]['snapshot_mono_us'], {t['name']: t.get('bytes_total', 0) for t in ts}))
    return sorted(out, key=lambda x: x[0])


def at(snaps, t_us, name):
    """name's bytes at the last snapshot at or before t_us (0 before any)"""
    v = 0
    for t, b in snaps:
        if t > t_us:
            break
        v = b.get(name, 0)
    return v


def share_in(snaps, name, names, t0, t1):
    """name's share of names' bytes counted in [t0, t1] (None: none)"""
    d = {n: at(snaps, t1, n) - at(snaps, t0, n) for n in names}
    tot = sum(d.values())
    return d[name] / tot if tot > 0 else None


def contended(snaps, queued, names, t0, t1):
    """[(t, {name: bytes counted since the snapshot before})] of the
    snapshots in (t0, t1] that followed one where every one of names had
    chunks queued (queued: {t: {name: chunks}}; None: every snapshot)"""
    out = []
    for (ta, a), (tb, b) in zip(snaps, snaps[1:]):
        if tb <= t0 or tb > t1:
            continue
        if queued is not None and not all(queued.get(ta, {}).get(n, 0) > 0 for n in names):
            continue
        out.append((tb, {n: b.get(n, 0) - a.get(n, 0) for n in names}))
    return out


def crossing(steps, name, names, mid, up, span):
    """the first step's time at which name's share of the last span bytes
    (of names together, counted in steps) is past mid (above it when up):
    None if never. An upper bound of when the share changed: the bytes
    before it are in the window too."""
    win = []
    for i, (t, d) in enumerate(steps):
        win.append(d)
        while len(win) > 1 and sum(sum(x.values()) for x in win[1:]) >= span:
            win.pop(0)
        tot = sum(sum(x.values()) for x in win)
        if tot >= span:
            x = sum(w[name] for w in win) / float(tot)
            if (x >= mid) == up:
                return t
    return None


def policy(spec):
    return dict(kv.split('=', 1) for kv in spec.split() if '=' in kv)


def react(snaps, cmds, weights, queued=None, span=512 << 10):
    """one result per command: (tenant, spec, kind, ms, detail); a weight's
    is the first time at which the tenant's share of the last span bytes
    counted since the command while every named tenant had chunks queued is
    past the midpoint between its share before and the new weights' share"""
    out = []
    for k, c in enumerate(cmds):
        name, sent = c['tenant'], c['sent_mono_us']
        end = cmds[k + 1]['sent_mono_us'] if k + 1 < len(cmds) else snaps[-1][0]
        pol = policy(c['policy'])
        win = [(t, b.get(name, 0)) for t, b in snaps if sent < t <= end]
        before = at(snaps, sent, name)
        if not win:
            out.append((name, c['policy'], 'none', None, 'no snapshot after the command'))
            continue
        if pol.get('rate') == '0':
            first = next((t for t, v in win if v > before), None)
            out.append((name, c['policy'], 'first byte',
                        None if first is None else (first - sent) / 1000.0, ''))
        elif 'rate' in pol:
            final = win[-1][1]
            stop = next(t for t, v in win if v == final)
            moved = final - before
            out.append((name, c['policy'], 'last byte', (stop - sent) / 1000.0,
                        '%d bytes counted after the command' % moved))
        elif 'weight' in pol:
            names = list(weights)

            def share(steps):
                tot = sum(sum(d.values()) for _, d in steps)
                return sum(d[name] for _, d in steps) / float(tot) if tot else None
            old = share(contended(snaps, queued, names, sent - 1000000, sent))
            new = weights[name] / float(sum(weights.values()))
            steps = contended(snaps, queued, names, sent, end)
            t = None
            if old is not None:
                t = crossing(steps, name, names, (old + new) / 2.0, new > old, span)
            after = share(contended(snaps, queued, names, sent + 10000, sent + 510000))
            out.append((name, c['policy'], 'share past midpoint',
                        None if t is None else max(0.0, (t - sent) / 1000.0),
                        'share while both queued: the second before %s, 10-510 ms after '
                        '%s, target %.3f' % ('-' if old is None else '%.3f' % old,
                                             '-' if after is None else '%.3f' % after, new)))
    return out


def cmd_react(argv):
    if len(argv) < 2:
        raise SystemExit('react FOLLOW CMDS NAME=WEIGHT...')
    with open(argv[0]) as f:
        snaps = snapshots(json_stream(f.read()))
    with open(argv[1]) as f:
        cmds = [c for c in json_stream(f.read()) if 'sent_mono_us' in c]
    weights = {a.split('=')[0]: float(a.split('=')[1]) for a in argv[2:]}
    with open(argv[0]) as f:
        queued = {}
        for o in json_stream(f.read()):
            ts = o.get('tenants') or []
            if ts and ts[0].get('snapshot_mono_us') is not None:
                queued[ts[0]['snapshot_mono_us']] = {t['name']: t.get('queued_chunks', 0)
                                                     for t in ts}
    if not snaps or not cmds:
        print('react: no snapshots or no commands')
        return 1
    gaps = sorted(b[0] - a[0] for a, b in zip(snaps, snaps[1:]))
    print('snapshots: %d, %.1f ms apart at the median, %.1f at p99' % (
        len(snaps), gaps[len(gaps) // 2] / 1000.0, gaps[int(len(gaps) * 0.99)] / 1000.0))
    for c in cmds:
        print('command %s %s: took %.1f ms (sent to reply)' % (
            c['tenant'], c['policy'], (c['reply_mono_us'] - c['sent_mono_us']) / 1000.0))
    for name, spec, kind, ms, detail in react(snaps, cmds, weights, queued):
        print('reaction %s %s: %s %s after the command was sent (target <= 10 ms)%s' % (
            name, spec, kind, '-' if ms is None else '%.1f ms' % ms,
            '; ' + detail if detail else ''))
    return 0


def selftest():
    # two tenants at exactly 3:1, 12.5 MB per 100 ms window, b starts late
    lines, a, b = [], 0, 0
    for k in range(21):
        t = k * 100.0
        lines.append('%.1f a %d' % (t, a))
        lines.append('%.1f b %d' % (t, b))
        if k < 5:
            a += 12500000
        else:
            a += 9375000
            b += 3125000
    s = parse_samples(lines)
    rows = shares(s, {'a': 3, 'b': 1})
    assert len(rows) == 14, len(rows)  # 15 contended windows, the first left out
    for _, _, d in rows:
        assert abs(d['a'][0] - 0.75) < 1e-9 and abs(d['b'][0] - 0.25) < 1e-9
    # b stops inside window 15 (and sends nothing after): that window and
    # the first contended one are left out
    lines = [l for l in lines if l.split()[1] != 'b' or float(l.split()[0]) <= 1500.0]
    lines += ['%.1f b %d' % (k * 100.0, 3125000 * 10 + 100) for k in range(16, 21)]
    rows = shares(parse_samples(lines), {'a': 3, 'b': 1})
    assert [r[0] for r in rows] == [k * 100.0 for k in range(6, 15)], [r[0] for r in rows]
    # only the windows inside the timed iterations' span
    lines.insert(0, '# t0_mono_us 1000000')
    assert mono_t0(lines) == 1000000
    rows = shares(parse_samples(lines), {'a': 3, 'b': 1}, (750.0, 1200.0))
    assert [r[0] for r in rows] == [800.0, 900.0, 1000.0, 1100.0], [r[0] for r in rows]
    q = {t: {'a': 1, 'b': 0 if t == 1000.0 else 5} for t in (800.0, 900.0, 1000.0, 1100.0, 1200.0)}
    assert [r[0] for r in backlogged(rows, q, ['a', 'b'])] == [800.0, 1100.0]
    # a tenant at 300 Mbit/s with a burst at the start
    lines, x = [], 0
    for k in range(31):
        lines.append('%.1f c %d' % (k * 100.0, x))
        x += 3750000 if k else 3750000 + 750000
    worst, mean = rate_check(parse_samples(lines), 'c', 300e6, 750000)
    assert worst is not None and worst <= 0, worst
    assert 0.95 * 300e6 <= mean <= 1.05 * 300e6, mean
    worst, _ = rate_check(parse_samples(lines), 'c', 200e6, 750000)
    assert worst > 0
    # 12.5 MB per 100 ms from 500 ms to 2000 ms: 125 MB/s
    assert abs(throughput(s, ['a', 'b']) - 125e6) < 1, throughput(s, ['a', 'b'])
    assert abs(throughput(s, ['b']) - 31.25e6) < 1
    assert percentile(list(range(1, 101)), 50) == 51
    assert percentile(list(range(1, 101)), 99) == 99
    # react: snapshots every ms; a at 1:1 with b, then 3:1 from 3 ms after
    # the weight command (t 1000 ms); b capped at 1500 ms, its last byte at
    # 1502; uncapped at 1800 ms, its first byte at 1804
    objs, a, b = [], 0, 0
    for ms in range(0, 2200):
        objs.append({'tenants': [{'name': 'a', 'bytes_total': a, 'snapshot_mono_us': ms * 1000},
                                 {'name': 'b', 'bytes_total': b, 'snapshot_mono_us': ms * 1000}]})
        if ms < 1003:
            a, b = a + 100, b + 100
        elif ms < 1502:
            a, b = a + 150, b + 50
        elif ms < 1804:
            a += 150
        else:
            a, b = a + 150, b + 50
    text = ''.join(json.dumps(o, indent=2) + '\n' for o in objs)
    snaps = snapshots(json_stream(text + '{"tenants": [{"na'))
    assert len(snaps) == 2200
    cmds = [{'tenant': 'a', 'policy': 'weight=3', 'sent_mono_us': 1000000},
            {'tenant': 'b', 'policy': 'rate=8K', 'sent_mono_us': 1500000},
            {'tenant': 'b', 'policy': 'rate=0', 'sent_mono_us': 1800000}]
    r = react(snaps, cmds, {'a': 3, 'b': 1}, span=1000)
    assert r[0][2] == 'share past midpoint' and r[0][3] == 6.0, r[0]  # changed at 4: an upper bound
    assert r[1][2] == 'last byte' and r[1][3] == 2.0, r[1]
    assert r[2][2] == 'first byte' and r[2][3] == 5.0, r[2]
    print('selftest: ok')
    return 0


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    cmd, argv = sys.argv[1], sys.argv[2:]
    if cmd == 'selftest':
        return selftest()
    fn = {'sample': cmd_sample, 'shares': cmd_shares, 'rate': cmd_rate, 'pct': cmd_pct,
          'throughput': cmd_throughput, 'react': cmd_react}.get(cmd)
    if not fn:
        print(__doc__)
        return 2
    return fn(argv)


if __name__ == '__main__':
    sys.exit(main())
