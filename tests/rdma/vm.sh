#!/bin/bash
# tests/rdma: two virtual hosts (after ../shared/rdma-vm/pair.sh) with real RDMA verbs (soft-RoCE, rdma_rxe) joined by two rails, for testing code
# that uses libibverbs where no RDMA NIC exists. Each host is a qemu guest (software emulation: slow,
# about 45 ms for a 4 KB RC round trip here, so keep tests small) booting Debian 12's kernel.
#
#   pair.sh build                 build (once, cached) the guest kernel and root image; needs root
#   pair.sh run DIR SCRIPT [SECS] copy DIR into both guests at /work, run `bash /work/SCRIPT` in each
#                                 with ROLE=a|b, ME=1|2, PEER=2|1 and rails rxe0/rxe1 on 198.18.0.ME
#                                 and 198.18.1.ME; prints both outputs prefixed [a]/[b]; exits 0 when
#                                 both scripts exited 0 within SECS (default 600)
# Inside a guest: `ip link set "$RAIL1_NETDEV" down` fails rail 1 for real (the rxe port goes down).
set -euo pipefail
cache=${R2_RDMA_VM_CACHE:?set R2_RDMA_VM_CACHE}
cmd=${1:-}
packages="linux-image-amd64 rdma-core ibverbs-utils ibverbs-providers iproute2 kmod udev procps
          libuv1 libprotobuf-c1 libhwloc15 libnuma1 libsystemd0 libcjson1 python3-minimal"

# the image's key: this script's build recipe (packages, init); a cache built
# from another recipe is rebuilt
key() { { echo "$packages"; declare -f build; } | sha256sum | cut -c1-16; }

build() {
  [ -f "$cache/root.img" ] && [ "$(cat "$cache/key" 2>/dev/null)" = "$(key)" ] &&
    { echo "cached: $cache"; return; }
  rm -f "$cache/root.img" "$cache/key"
  command -v debootstrap >/dev/null && command -v qemu-system-x86_64 >/dev/null ||
    apt-get install -y -qq debootstrap qemu-system-x86 e2fsprogs >/dev/null
  local mirror root=$cache/root
  mirror=$(awk '/^URIs:/{print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
  mkdir -p "$cache"; rm -rf "$root"
  debootstrap --variant=minbase bookworm "$root" ${mirror:+"$mirror"} >"$cache/debootstrap.log" 2>&1
  cp /etc/resolv.conf "$root/etc/resolv.conf"
  chroot "$root" /bin/bash -c "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $(echo $packages)" >"$cache/packages.log" 2>&1
  cp "$root"/boot/vmlinuz-* "$cache/vmlinuz"; cp "$root"/boot/initrd.img-* "$cache/initrd"
  cat >"$root/r2-init" <<'INIT'
#!/bin/bash
# init of a test guest: rails up with soft-RoCE, then the test script from the second disk.
mount -t proc proc /proc 2>/dev/null; mount -t sysfs sys /sys 2>/dev/null; mount -t devtmpfs dev /dev 2>/dev/null
mkdir -p /dev/pts /work; mount -t devpts devpts /dev/pts 2>/dev/null; mount /dev/vdb /work
export ROLE=$(sed -n 's/.* role=\([ab]\).*/\1/p' /proc/cmdline) SCRIPT=$(sed -n 's/.* script=\([^ ]*\).*/\1/p' /proc/cmdline)
export ME=1 PEER=2; [ "$ROLE" = b ] && ME=2 PEER=1
ip link set lo up; modprobe rdma_rxe
k=0; for n in $(ls /sys/class/net | grep -v '^lo$' | sort); do
  ip addr add 198.18.$k.$ME/24 dev $n; ip link set $n up; rdma link add rxe$k type rxe netdev $n
  export RAIL${k}_NETDEV=$n RAIL${k}_ADDR=198.18.$k.$ME RAIL${k}_PEER=198.18.$k.$PEER; k=$((k+1))
done
sleep 1; cd /work; bash "/work/$SCRIPT" > /tmp/out 2>&1; rc=$?
sed "s/^/[$ROLE] /" /tmp/out; echo "[$ROLE] exit $rc"; sync; echo o > /proc/sysrq-trigger; sleep 30
INIT
  chmod +x "$root/r2-init"; rm -f "$root/etc/resolv.conf"
  mkfs.ext4 -q -d "$root" "$cache/root.img" 2G
  rm -rf "$root"; key >"$cache/key"; echo "built: $cache"
}

vm() {  # vm ROLE WORKIMG NETARGS...
  local role=$1 img=$2; shift 2
  qemu-system-x86_64 -cpu max -m 1024 -smp 1 -nographic -no-reboot \
    -kernel "$cache/vmlinuz" -initrd "$cache/initrd" \
    -append "root=/dev/vda rw console=ttyS0 quiet panic=1 init=/r2-init role=$role script=$script" \
    -drive file="$cache/root.img",format=raw,if=virtio,snapshot=on -drive file="$img",format=raw,if=virtio "$@"
}

run() {
  local dir=$1 secs=${3:-600} tmp; script=$2
  [ -f "$cache/root.img" ] || build
  tmp=$(mktemp -d); [ -n "${R2_RDMA_VM_KEEP:-}" ] || trap 'rm -rf "$tmp"' RETURN; echo "logs: $tmp" >&2
  local size=$(( $(du -sm "$dir" | cut -f1) * 2 + 64 ))M
  mkfs.ext4 -q -d "$dir" "$tmp/a.img" "$size"; cp "$tmp/a.img" "$tmp/b.img"
  local p=$((20000 + RANDOM % 20000))
  timeout "$secs" bash -c "$(declare -f vm); cache=$cache script=$script
    vm b $tmp/b.img -netdev socket,id=r0,listen=127.0.0.1:$p -device virtio-net-pci,netdev=r0,mac=52:54:00:00:0b:00 \
      -netdev socket,id=r1,listen=127.0.0.1:$((p+1)) -device virtio-net-pci,netdev=r1,mac=52:54:00:00:0b:01 >$tmp/b.log 2>&1 &
    sleep 1
    vm a $tmp/a.img -netdev socket,id=r0,connect=127.0.0.1:$p -device virtio-net-pci,netdev=r0,mac=52:54:00:00:0a:00 \
      -netdev socket,id=r1,connect=127.0.0.1:$((p+1)) -device virtio-net-pci,netdev=r1,mac=52:54:00:00:0a:01 >$tmp/a.log 2>&1
    wait" &
  local tpid=$! stalled=0
  # an emulated NIC that stopped sending (below) does not come back: the
  # run ends a minute after the first watchdog line, not at its limit
  while kill -0 "$tpid" 2>/dev/null; do
    if grep -qaE 'NETDEV WATCHDOG|TX timeout' "$tmp/a.log" "$tmp/b.log" 2>/dev/null; then
      stalled=$((stalled + 1))
      [ "$stalled" -lt 30 ] || { echo "vm.sh: a guest's NIC stalled 60 s ago: ending the run" >&2; kill "$tpid"; }
    fi
    sleep 2
  done
  wait "$tpid" || true
  # (each display below may find nothing, a guest stopped early: under
  # set -e and pipefail that must not end the script before its verdict)
  grep -haE '^\[(a|b)\] ' "$tmp/a.log" "$tmp/b.log" | tr -d '\r' || true
  if grep -qa '^\[a\] exit 0' "$tmp/a.log" && grep -qa '^\[b\] exit 0' "$tmp/b.log"; then
    return 0
  fi
  # a guest that ran out of time printed nothing above: what it wrote to its
  # console as it went ("live:" lines)
  grep -qa '^\[a\] exit' "$tmp/a.log" ||
    { grep -ha '^live: ' "$tmp/a.log" | tr -d '\r' | sed 's/^/[a, timed out] /' || true; }
  grep -qa '^\[b\] exit' "$tmp/b.log" ||
    { grep -ha '^live: ' "$tmp/b.log" | tr -d '\r' | sed 's/^/[b, timed out] /' || true; }
  # an emulated NIC that stopped sending (tests/rdma/README.md, Known
  # problem): qemu's fault, not the code under test's; the run could not
  # say anything, so it is a skip (77) with the guests' output above, not a
  # pass and not a failure of the code
  if grep -qaE 'NETDEV WATCHDOG|TX timeout' "$tmp/a.log" "$tmp/b.log"; then
    grep -haE 'NETDEV WATCHDOG|TX timeout' "$tmp/a.log" "$tmp/b.log" | tr -d '\r' | head -n 4 | sed 's/^/[guest NIC] /'
    echo "skip: a guest's emulated NIC stopped sending (NETDEV WATCHDOG above), so this run tells nothing of the code; tests/rdma/README.md, Known problem"
    return 77
  fi
  return 1
}

case $cmd in
  build) build ;;
  key) key ;;     # the recipe's key (what build writes to $cache/key)
  run) shift; run "$@" ;;
  *) sed -n '2,12p' "$0"; exit 2 ;;
esac
