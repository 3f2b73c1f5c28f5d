#!/bin/bash
# The parts of tools/bench/tenant-bench.sh that run without root or a
# cluster: its figures' arithmetic (tenant-shares.py selftest), its syntax,
# its dry run (every command it would run), and the daemons' configuration
# it writes, checked by the real r2ccld (--check-config).
# Usage: tenant_bench_dry.sh SOURCE_ROOT BUILD_DIR
set -euo pipefail
src=$1 build=$2
python3 "$src/tools/bench/tenant-shares.py" selftest
bash -n "$src/tools/bench/tenant-bench.sh"
export R2C_PREFIX=r2tdry$$ BUILD=$build
out=$("$src/tools/bench/tenant-bench.sh" --dry-run -n 2)
trap 'rm -rf /tmp/$R2C_PREFIX-bench' EXIT
for want in "weighted share" "a=3 b=1" "a=1 b=1 c=2" "rate /tmp/$R2C_PREFIX-bench/samples cap 300000000 750000" \
	"--sched=0" "throughput /tmp/$R2C_PREFIX-bench/samples a b c --vs" "--trace /tmp/$R2C_PREFIX-bench/lat-off.csv" "--chunk-size 512K"; do
	grep -qF -- "$want" <<<"$out" || { echo "dry run lacks: $want"; echo "$out"; exit 1; }
done
# one unique-id file per run, the same on every host
n=$(grep -o 'uid-[a-z]*-[0-9]*-[0-9]*' <<<"$out" | sort | uniq -d | wc -l)
[ "$n" = 0 ] || { echo "a unique-id file used by two runs"; exit 1; }
"$build/daemon/r2ccld" --config "/tmp/$R2C_PREFIX-bench/r2ccld.conf" --check-config >/dev/null 2>&1
"$build/daemon/r2ccld" --config "/tmp/$R2C_PREFIX-bench/r2ccld.conf" --check-config 2>&1 >/dev/null |
	grep -q "tenants: 6 from" || { echo "r2ccld did not read the 6 tenants"; exit 1; }
echo "tenant-bench dry run: ok"
