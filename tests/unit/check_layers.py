#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The daemon's layers call one way (docs/architecture.md, "Layers").

    check_layers.py DAEMON_DIR ALLOW_FILE ARCHIVE...
    check_layers.py --selftest


Two checks, each printing every offending use:
  - includes: every '#include "..."' of a file under DAEMON_DIR that names a
    file of the daemon (found beside the file or under DAEMON_DIR) must be
    of the file's own layer or of a lower one;
  - symbols: in the members of the static libraries given (nm), an undefined
    symbol of a member of layer A that a member of layer B defines must have
    B == A or B lower than A.

A file's layer is its folder under DAEMON_DIR (a file directly in it, main.c,
is the top). ALLOW_FILE lists uses to let pass, one a line:
    include FILE HEADER
    symbol FILE SYMBOL
(paths relative to DAEMON_DIR); only files of gpu/ may be listed there (the
GPU path's calls into the engine, fixed after its split). Entries that match
nothing are printed, not failed (a build without CUDA compiles less of gpu.c).

--selftest builds a small tree with one upward include and one upward call
(cc, ar) and fails unless the checks find exactly those, and let pass what
an allow-list names.

Exit 0: no offending use; 1: some; 77: nm (or, for --selftest, cc) missing.
"""
import os
import re
import shutil
import subprocess
import sys

# rank: a layer may use its own and any lower rank; equal ranks of different
# layers (gpu, net) may not use each other
RANK = {
    'base': 1,
    'planner': 2,
    'transport': 3,
    'gpu': 4,
    'net': 4,
    'engine': 5,
    'control': 6,
    'main': 7,
}
ALLOWED_IN_LIST = ('gpu/',)


def allowed(a, b):
    return a == b or RANK[b] < RANK[a]


def layer_of(rel):
    first = rel.split('/', 1)[0]
    if '/' not in rel:
        return 'main'
    if first not in RANK:
        raise SystemExit('check_layers: %s: folder %s is no layer (add it to RANK)' %
                         (rel, first))
    return first


def read_allow(path):
    allow = set()
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.split('#', 1)[0].strip()
            if not line:
                continue
            parts = line.split()
            if len(parts) != 3 or parts[0] not in ('include', 'symbol'):
                raise SystemExit('%s:%d: expected "include FILE HEADER" or '
                                 '"symbol FILE SYMBOL"' % (path, n))
            if not parts[1].startswith(ALLOWED_IN_LIST):
                raise SystemExit('%s:%d: only %s may be listed' %
                                 (path, n, ' '.join(ALLOWED_IN_LIST)))
            allow.add(tuple(parts))
    return allow


INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def check_includes(root, allow, used):
    bad = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for fn in sorted(filenames):
            if not fn.endswith(('.c', '.h', '.cu')):
                continue
            path = os.path.join(dirpath, fn)
            rel = os.path.relpath(path, root)
            a = layer_of(rel)
            with open(path, errors='replace') as f:
                for n, line in enumerate(f, 1):
                    m = INCLUDE.match(line)
                    if not m:
                        continue
                    inc = m.group(1)
                    target = None
                    for cand in (os.path.join(dirpath, inc), os.path.join(root, inc)):
                        if os.path.isfile(cand):
                            target = os.path.normpath(os.path.relpath(cand, root))
                            break
                    if target is None or target.startswith('..'):
                        continue  # common/, proto/, the build's config.h
                    b = layer_of(target)
                    if allowed(a, b):
                        continue
                    key = ('include', rel, target)
                    if key in allow:
                        used.add(key)
                        continue
                    bad.append('%s: %s:%d includes %s: %s' % (a, rel, n, b, target))
    return bad


def member_file(member):
    """meson's object name (engine_exec_rail.c.o) -> engine/exec_rail.c;
    None for generated code (protobuf-c), an error for a member of no layer"""
    base = os.path.basename(member)
    if base.endswith('.o'):
        base = base[:-2]
    if base.startswith('meson-generated_'):
        return None
    for layer in sorted(RANK, key=len, reverse=True):
        if layer != 'main' and base.startswith(layer + '_'):
            return layer + '/' + base[len(layer) + 1:]
    raise SystemExit('check_layers: archive member %s is of no layer (add its folder '
                     'to RANK)' % member)


def check_symbols(archives, allow, used):
    nm = shutil.which('nm')
    if not nm:
        print('check_layers: nm not found: symbol check skipped')
        sys.exit(77)
    defs = {}   # symbol -> file
    undefs = []  # (file, symbol)
    for ar in archives:
        fixed = None
        if os.path.basename(ar) == 'libr2planner.a':
            fixed = 'planner'
        out = subprocess.run([nm, '-A', '-P', ar], check=True, capture_output=True,
                             text=True).stdout
        for line in out.splitlines():
            # archive[member]: symbol type value size
            m = re.match(r'^(.*?)\[(.*?)\]: (\S+) (\S)', line)
            if not m:
                continue
            member, sym, typ = m.group(2), m.group(3), m.group(4)
            if fixed:
                f = 'planner/' + os.path.basename(member).rsplit('.o', 1)[0]
            elif os.path.basename(member) == 'kernels.o':
                f = 'gpu/kernels.cu'
            else:
                f = member_file(member)
            if f is None:
                continue
            if typ == 'U':
                undefs.append((f, sym))
            elif typ.isupper() and typ not in 'UVW':
                defs.setdefault(sym, f)
    bad = {}
    for f, sym in undefs:
        g = defs.get(sym)
        if not g:
            continue
        a, b = layer_of(f), layer_of(g)
        if allowed(a, b):
            continue
        key = ('symbol', f, sym)
        if key in allow:
            used.add(key)
            continue
        bad.setdefault((a, f, b, g), set()).add(sym)
    return ['%s: %s -> %s: %s : %s' % (a, f, b, g, ', '.join(sorted(s)))
            for (a, f, b, g), s in sorted(bad.items())]


def selftest():
    import tempfile
    cc, ar = shutil.which('cc'), shutil.which('ar')
    if not cc or not ar:
        print('check_layers: cc or ar not found: self-test skipped')
        return 77
    with tempfile.TemporaryDirectory() as tmp:
        root = os.path.join(tmp, 'daemon')
        files = {
            'net/rails.h': 'void net_send(void);\n',
            'net/rails.c': '#include "engine/comm.h"\n#include "rails.h"\n'
                           'void engine_deliver(void);\n'
                           'void net_send(void) { engine_deliver(); }\n',
            'engine/comm.h': 'void engine_deliver(void);\n',
            'engine/comm.c': '#include "engine/comm.h"\n#include "net/rails.h"\n'
                             'void engine_deliver(void) { net_send(); }\n',
            'gpu/gpu.c': '#include "engine/comm.h"\n'
                         'void gpu_run(void) { engine_deliver(); }\n',
            'main.c': '#include "engine/comm.h"\n#include "net/rails.h"\n',
        }
        for rel, text in files.items():
            os.makedirs(os.path.dirname(os.path.join(root, rel)), exist_ok=True)
            with open(os.path.join(root, rel), 'w') as f:
                f.write(text)
        objs = []
        for rel in ('net/rails.c', 'engine/comm.c', 'gpu/gpu.c'):
            obj = os.path.join(tmp, rel.replace('/', '_') + '.o')
            subprocess.run([cc, '-c', '-I', root, os.path.join(root, rel), '-o', obj],
                           check=True)
            objs.append(obj)
        lib = os.path.join(tmp, 'libr2daemon.a')
        subprocess.run([ar, 'rcs', lib] + objs, check=True)
        allow = os.path.join(tmp, 'allow.txt')
        with open(allow, 'w') as f:
            f.write('include gpu/gpu.c engine/comm.h\nsymbol gpu/gpu.c engine_deliver\n')
        used = set()
        got = check_includes(root, read_allow(allow), used) + \
            check_symbols([lib], read_allow(allow), used)
        want = ['net: net/rails.c:1 includes engine: engine/comm.h',
                'net: net/rails.c -> engine: engine/comm.c : engine_deliver']
        if got != want or len(used) != 2:
            print('check_layers self-test FAILED:\n  found %r\n  wanted %r\n  allowed %d of 2' %
                  (got, want, len(used)))
            return 1
        print('check_layers self-test: the upward include and call found, the allowed '
              'gpu uses let pass')
        return 0


def main():
    if sys.argv[1:] == ['--selftest']:
        return selftest()
    if len(sys.argv) < 4:
        print(__doc__)
        return 2
    root, allow_file, archives = sys.argv[1], sys.argv[2], sys.argv[3:]
    allow = read_allow(allow_file)
    used = set()
    bad_inc = check_includes(root, allow, used)
    bad_sym = check_symbols(archives, allow, used)
    for line in bad_inc:
        print('upward include: ' + line)
    for line in bad_sym:
        print('upward call: ' + line)
    for key in sorted(allow - used):
        print('note: allow-list entry matched nothing (remove it?): ' + ' '.join(key))
    print('%d upward includes, %d upward calls (file pairs), %d allowed uses of %s' %
          (len(bad_inc), len(bad_sym), len(used), allow_file))
    return 1 if bad_inc or bad_sym else 0


if __name__ == '__main__':
    sys.exit(main())
