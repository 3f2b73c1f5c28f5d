#!/bin/bash
# SPDX-License-Identifier: MIT
# Install and enable under a real systemd (issue 22; docs/operations.md
# "Running under systemd"): `meson install --destdir` into a staging root,
# then a systemd-nspawn container boots this host's own /usr (read-only,
# the staged /usr laid over it; the rest of the root a fresh tmpfs:
# --volatile=yes, nothing downloaded) and, inside it:
#   systemctl enable --now r2ccld     the unit starts (Type=notify: READY=1)
#   systemctl is-active / is-enabled  active, enabled
#   r2cclctl status                   the daemon answers on its socket
#   systemd-analyze security r2ccld   the exposure score, printed
#   systemctl stop / disable          inactive, disabled
# Exits 77 where no container can boot here (not root, no systemd-nspawn
# from Debian's systemd-container, no systemd booted within 60 s).
# Usage: test_install.sh BUILD_ROOT
set -euo pipefail
build=$1
skip() { echo "skipped: $*"; exit 77; }
fail() {
	echo "FAIL: $*"
	[ -n "${cpid:-}" ] && ct journalctl -u r2ccld --no-pager 2>/dev/null | tail -30
	exit 1
}
[ "$(id -u)" = 0 ] || skip "needs root (systemd-nspawn)"
command -v systemd-nspawn >/dev/null || skip "no systemd-nspawn (apt install systemd-container)"
command -v nsenter >/dev/null || skip "no nsenter"
[ -x /usr/lib/systemd/systemd ] || skip "no systemd on this host to boot"
[ -L /lib ] || skip "the container boots this host's /usr: needs a merged /usr"

tmp=$(mktemp -d /tmp/r2ccl-install.XXXXXX)
npid="" cpid=""
cleanup() {
	if [ -n "$npid" ] && kill -0 "$npid" 2>/dev/null; then
		kill -TERM "$npid" 2>/dev/null || true # nspawn halts the container
		for _ in $(seq 75); do kill -0 "$npid" 2>/dev/null || break; sleep 0.2; done
		kill -KILL "$npid" 2>/dev/null || true
		wait "$npid" 2>/dev/null || true
	fi
	# a container nspawn left behind: its PID 1 takes the whole namespace
	if [ -n "$cpid" ] && kill -0 "$cpid" 2>/dev/null &&
		[ "$(readlink "/proc/$cpid/ns/pid")" != "$(readlink /proc/self/ns/pid)" ]; then
		kill -KILL "$cpid" 2>/dev/null || true
	fi
	rm -rf "$tmp"
}
trap cleanup EXIT
t0=$(date +%s)

# 1. the staging root
stage=$tmp/stage
meson install -C "$build" --destdir "$stage" --no-rebuild --quiet >"$tmp/install.log" 2>&1 ||
	{ cat "$tmp/install.log"; fail "meson install"; }
# systemd.pc's unit directory is /lib/systemd/system: on a merged /usr that
# is /usr/lib, where the container sees it
for d in bin sbin lib lib64; do
	if [ -d "$stage/$d" ] && [ ! -L "$stage/$d" ]; then
		mkdir -p "$stage/usr/$d"
		cp -a "$stage/$d/." "$stage/usr/$d/"
		rm -rf "${stage:?}/$d"
	fi
done
unit=$(find "$stage/usr" -name r2ccld.service -path '*/systemd/system/*' | head -1)
[ -n "$unit" ] || skip "this build installs no unit (-Dsystemd=disabled, or no systemd.pc)"
exe=$(sed -n 's/^ExecStart=\([^ ]*\).*/\1/p' "$unit")
[ -x "$stage$exe" ] || fail "the unit's ExecStart $exe is not installed ($stage$exe)"
ctl=$(find "$stage/usr" -name r2cclctl -type f | head -1)
[ -n "$ctl" ] || fail "r2cclctl is not installed"
ctl=${ctl#"$stage"}
case $exe in /usr/*) ;; *) skip "prefix outside /usr ($exe): the container only gets /usr" ;; esac
echo "installed: $exe, ${unit#"$stage"}, $ctl"

# 2. boot
systemd-nspawn --quiet --directory=/ --volatile=yes --register=no --keep-unit \
	--machine="r2ccl-install-$$" --overlay-ro="/usr:$stage/usr:/usr" \
	--boot --console=pipe >"$tmp/nspawn.log" 2>&1 </dev/null &
npid=$!
for _ in $(seq 100); do
	# the container's PID 1 (nspawn's first child only sets it up)
	cpid=$(ps -o pid=,comm= --ppid "$npid" 2>/dev/null | awk '$2 == "systemd" { print $1; exit }') ||
		true
	[ -n "$cpid" ] && break
	kill -0 "$npid" 2>/dev/null || break
	sleep 0.2
done
[ -n "$cpid" ] || { cat "$tmp/nspawn.log"; skip "systemd-nspawn did not start a container here"; }
ct() { nsenter -t "$cpid" -a -- "$@"; }
state=""
for _ in $(seq 120); do
	state=$(ct systemctl is-system-running 2>"$tmp/ct.err") || true
	case $state in running | degraded) break ;; esac
	sleep 0.5
done
case $state in
running | degraded) echo "container booted in $(($(date +%s) - t0)) s ($state)" ;;
*)
	tail -n 20 "$tmp/nspawn.log" "$tmp/ct.err"; ps -o pid,ppid,comm --ppid "$npid"
	skip "the container's systemd did not finish booting in 60 s (state '$state')"
	;;
esac

# 3. enable, check, stop, disable
ct systemctl daemon-reload
ct systemctl enable --now r2ccld.service || fail "systemctl enable --now r2ccld"
[ "$(ct systemctl is-active r2ccld.service)" = active ] || fail "r2ccld is not active"
[ "$(ct systemctl is-enabled r2ccld.service)" = enabled ] || fail "r2ccld is not enabled"
ct test -e /etc/systemd/system/multi-user.target.wants/r2ccld.service ||
	fail "enable made no multi-user.target.wants link"
ct "$ctl" status >"$tmp/status" 2>&1 || { cat "$tmp/status"; fail "r2cclctl status"; }
head -5 "$tmp/status"
ct systemctl show -p MainPID -p NRestarts -p StatusText r2ccld.service
ct systemd-analyze security --no-pager r2ccld.service >"$tmp/security" 2>&1 ||
	true # exits nonzero when the exposure is above its threshold
score=$(grep -o 'Overall exposure level for r2ccld.service: .*' "$tmp/security") ||
	{ cat "$tmp/security"; fail "no score from systemd-analyze security"; }
echo "systemd-analyze security: $score"
ct systemctl stop r2ccld.service || fail "systemctl stop r2ccld"
st=$(ct systemctl is-active r2ccld.service || true)
[ "$st" = inactive ] || fail "after stop r2ccld is '$st', not inactive (a clean stop)"
ct systemctl disable r2ccld.service || fail "systemctl disable r2ccld"
st=$(ct systemctl is-enabled r2ccld.service || true)
[ "$st" = disabled ] || fail "after disable r2ccld is '$st'"
echo "install, enable --now, status, stop, disable under systemd: ok in $(($(date +%s) - t0)) s"
ct systemctl poweroff --no-block >/dev/null 2>&1 || true
for _ in $(seq 75); do kill -0 "$npid" 2>/dev/null || break; sleep 0.2; done
