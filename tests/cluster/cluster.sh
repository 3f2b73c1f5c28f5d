#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# cluster.sh: a simulated R2CCL cluster on one Linux machine (root only).
#
#   host i (0..H-1)   network namespace ${prefix}h${i}
#   rail r (0..R-1)   Linux bridge ${prefix}br${r}, inside a "switch" namespace
#                     ${prefix}sw (the root namespace is left untouched)
#   NIC (i, r)        veth pair: "rail${r}" in ${prefix}h${i}, address
#                     198.18.${r}.$((i+1))/24, peer "h${i}r${r}" in ${prefix}sw,
#                     enslaved to ${prefix}br${r}
#
# Rate caps (--rate, `rate`): a tbf qdisc on the egress of BOTH ends of the
# NIC's veth pair: on rail${r} (what the host sends) and on h${i}r${r} in the
# switch namespace (what the host receives). So each NIC is a full-duplex link
# of RATE in each direction, like a real NIC. No ifb needed.
#
# Only addresses of 198.18.0.0/15 are configured; IPv6 is disabled in every
# namespace of the cluster (no link-local addresses). Dependencies: bash,
# iproute2 (ip, tc), coreutils (timeout, sleep...), procps (nothing else).
#
# State lives in /tmp/${prefix}/ (state file, per-host dirs h${i}/ with the
# daemon's socket, log, pid and exit code, and `run` outputs). Run
# `cluster.sh help` for the commands.

set -u -o pipefail

PROG=${0##*/}
SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd "$SCRIPT_DIR/../.." && pwd)

PREFIX=${R2C_PREFIX:-r2c}
TBF_LATENCY=${R2C_TBF_LATENCY:-50ms}	# queue depth of a tbf, as time at RATE
TBF_QDISC=${R2C_TBF_QDISC:-}		# the tbf's queue: its own FIFO, or this qdisc (pfifo_fast)
DAEMON_WAIT=${R2C_DAEMON_WAIT:-20}	# seconds to wait for each daemon socket
STOP_WAIT=${R2C_STOP_WAIT:-15}		# seconds to wait for daemons to exit
MAX_HOSTS=64
MAX_RAILS=16

usage() {
	cat <<EOF
Usage: $PROG [--prefix NAME] COMMAND [ARGS...]

Simulated cluster: hosts are network namespaces, rails are bridges, one veth
NIC per host per rail (198.18.RAIL.(HOST+1)/24). Root only.

Commands:
  up -H HOSTS -R RAILS [--rate RATE] [--burst BYTES] [--latency TIME] [--mtu N]
        create the cluster (tears down leftovers of the same prefix first);
        --mtu: the NICs' MTU (default 1500; 9000: jumbo frames)
  down  delete everything of the prefix: processes in its namespaces,
        namespaces, bridges, /tmp/PREFIX; idempotent
  status
        print hosts, addresses, qdiscs and daemons
  addr HOST RAIL
        print the address of a NIC (198.18.RAIL.(HOST+1))
  rate HOST RAIL RATE|off|blackhole [tx|rx|both]
        cap one NIC (default both directions). RATE in tc units (100mbit,
        1gbit, 8kbit). 'blackhole' drops every packet silently (a tbf
        whose bucket is smaller than any frame); 'off' removes the cap.
  link HOST RAIL up|down
        set a NIC's link state (the host end of the veth)
  exec HOST CMD...
        run CMD in the host's namespace (same environment as 'run')
  daemons start [--hosts I,J,...] [R2CCLD-ARGS...]
        start one r2ccld per host (R2CCLD, default build/daemon/r2ccld) with
        --socket /tmp/PREFIX/hI/r2ccld.sock --config /dev/null --rails rail
        --cluster-key-file /tmp/PREFIX/hI/cluster.key (each host's copy of
        the cluster's key, /tmp/PREFIX/cluster.key, made at the first start;
        later ARGS override these); log in
        /tmp/PREFIX/hI/r2ccld.log; waits until every socket exists
  daemons stop [--hosts I,J,...]
        SIGTERM every daemon, wait (then SIGKILL), report exit codes;
        non-zero if any daemon did not exit 0
  warmups
        the TCP warm-ups (r2ccld's rails.c: each new connection gets
        tcp_warmup bytes, one connection at a time per rail) not yet done:
        prints "hI rail R: K of H-1" for every daemon's rail whose log has
        fewer than H-1 peers warmed up; exit 0 when none is left, 1 if any
  run [--timeout SECONDS] [--hosts I,J,...] [--quiet] -- CMD...
        run CMD in every host namespace at once with R2CCL_SOCKET,
        R2CCL_HOST_INDEX, R2CCL_NHOSTS, R2CCL_NRAILS, R2CCL_CLUSTER_DIR set;
        output in /tmp/PREFIX/hI/out.log, printed prefixed with [hI];
        bounded by --timeout (default 300); non-zero if any host failed

HOST is an index (0), h0, or the namespace name. --prefix (or env
R2C_PREFIX; default r2c) names the cluster: lowercase letter then up to 7
letters/digits. Env: R2CCLD, R2C_TBF_LATENCY (50ms), R2C_TBF_QDISC (the tbf's
queue, e.g. pfifo_fast: by priority; default its FIFO), R2C_DAEMON_WAIT (20),
R2C_STOP_WAIT (15).
EOF
}

die() { echo "$PROG: $*" >&2; exit 1; }
warn() { echo "$PROG: $*" >&2; }

check_prefix() {
	[[ $PREFIX =~ ^[a-z][a-z0-9]{0,7}$ ]] ||
		die "bad prefix '$PREFIX' (a lowercase letter then up to 7 lowercase letters/digits)"
	DIR=/tmp/$PREFIX
	STATE=$DIR/state
	SWNS=${PREFIX}sw
}

need_root() {
	[[ $(id -u) == 0 ]] || die "must run as root"
	command -v ip >/dev/null || die "'ip' (iproute2) not found"
	command -v tc >/dev/null || die "'tc' (iproute2) not found"
}

hns() { echo "${PREFIX}h$1"; }

# True while process $1 exists and is not a zombie.
alive() {
	local st
	kill -0 "$1" 2>/dev/null || return 1
	st=$(cut -d' ' -f3 "/proc/$1/stat" 2>/dev/null) || return 1
	[[ $st != Z ]]
}
addr_of() { echo "198.18.$2.$(($1 + 1))"; }

load_state() {
	[[ -r $STATE ]] || die "no cluster '$PREFIX' (no $STATE): run '$PROG up' first"
	local k v
	H='' R=''
	while IFS='=' read -r k v; do
		case $k in
		hosts) H=$v ;;
		rails) R=$v ;;
		mtu) MTU=$v ;;
		esac
	done <"$STATE"
	[[ $H =~ ^[0-9]+$ && $R =~ ^[0-9]+$ ]] || die "corrupt state file $STATE"
}

# HOST argument -> index
host_index() {
	local h=$1
	h=${h#"$PREFIX"}
	h=${h#h}
	[[ $h =~ ^[0-9]+$ ]] && ((10#$h < H)) || die "bad host '$1' (0..$((H - 1)))"
	echo $((10#$h))
}

rail_index() {
	[[ $1 =~ ^[0-9]+$ ]] && ((10#$1 < R)) || die "bad rail '$1' (0..$((R - 1)))"
	echo $((10#$1))
}

# Rate in tc units -> bytes per second (integers only).
rate_bytes() {
	local s=${1,,} n u
	[[ $s =~ ^([0-9]+)([a-z]*)$ ]] || return 1
	n=${BASH_REMATCH[1]} u=${BASH_REMATCH[2]}
	case $u in
	'' | bit) echo $((n / 8)) ;;
	kbit) echo $((n * 1000 / 8)) ;;
	mbit) echo $((n * 1000000 / 8)) ;;
	gbit) echo $((n * 1000000000 / 8)) ;;
	bps) echo "$n" ;;
	kbps) echo $((n * 1000)) ;;
	mbps) echo $((n * 1000000)) ;;
	gbps) echo $((n * 1000000000)) ;;
	*) return 1 ;;
	esac
}

# tbf bucket: 4 ms at RATE, at least two full frames (3200 bytes at the
# default MTU), unless BURST is given.
BURST=''
MTU=1500
tbf_args() {
	local rate=$1 b
	b=$(rate_bytes "$rate") || die "bad rate '$rate' (e.g. 100mbit, 1gbit, 8kbit)"
	((b > 0)) || die "rate '$rate' is zero"
	local burst=$((b / 250)) frames=$((2 * (MTU + 100)))
	((burst < frames)) && burst=$frames
	[[ -n $BURST ]] && burst=$BURST
	echo "rate $rate burst $burst latency $TBF_LATENCY"
}

# set_cap NS DEV RATE|off|blackhole
set_cap() {
	local ns=$1 dev=$2 rate=$3
	case $rate in
	off | none)
		tc -n "$ns" qdisc del dev "$dev" root 2>/dev/null
		return 0
		;;
	blackhole)
		# A bucket of 40 bytes: every frame (>= 42 bytes) is larger and dropped.
		tc -n "$ns" qdisc replace dev "$dev" root handle 1: tbf rate 8kbit burst 40 latency 1ms
		;;
	*)
		# shellcheck disable=SC2046
		tc -n "$ns" qdisc replace dev "$dev" root handle 1: tbf $(tbf_args "$rate")
		# R2C_TBF_QDISC=pfifo_fast: the queue behind the bucket serves
		# packets by priority (3 bands: a NIC or switch port with QoS
		# queues) instead of the tbf's single FIFO of TBF_LATENCY
		[[ -z $TBF_QDISC ]] ||
			tc -n "$ns" qdisc replace dev "$dev" parent 1:1 handle 10: $TBF_QDISC
		;;
	esac
}

# nic_cap I R RATE [tx|rx|both]
nic_cap() {
	local i=$1 r=$2 rate=$3 dir=${4:-both}
	case $dir in
	tx) set_cap "$(hns "$i")" "rail$r" "$rate" ;;
	rx) set_cap "$SWNS" "h${i}r$r" "$rate" ;;
	both) set_cap "$(hns "$i")" "rail$r" "$rate" && set_cap "$SWNS" "h${i}r$r" "$rate" ;;
	*) die "bad direction '$dir' (tx, rx or both)" ;;
	esac
}

# Namespaces of this prefix that exist now.
our_netns() {
	ip netns list 2>/dev/null | awk '{print $1}' |
		grep -E "^${PREFIX}(h[0-9]+|sw)\$" || true
}

ns_sysctl_setup() {
	# IPv6 off (no link-local addresses; only 198.18/15 on the cluster).
	# TCP keeps its congestion window over idle periods
	# (net.ipv4.tcp_slow_start_after_idle 0, what docs/operations.md asks of
	# r2ccl hosts; R2C_SLOW_START_AFTER_IDLE=1 keeps the kernel's default).
	ip netns exec "$1" env SSAI="${R2C_SLOW_START_AFTER_IDLE:-0}" bash -c '
		f=/proc/sys/net/ipv4/tcp_slow_start_after_idle
		[ -w "$f" ] && echo "$SSAI" >"$f"
		for f in /proc/sys/net/ipv6/conf/default/disable_ipv6 \
			 /proc/sys/net/ipv6/conf/all/disable_ipv6; do
			[ -w "$f" ] && echo 1 >"$f"
		done
		for f in /proc/sys/net/bridge/bridge-nf-call-iptables \
			 /proc/sys/net/bridge/bridge-nf-call-ip6tables \
			 /proc/sys/net/bridge/bridge-nf-call-arptables; do
			[ -w "$f" ] && echo 0 >"$f"
		done
		exit 0' 2>/dev/null
}

cmd_down() {
	check_prefix
	need_root
	local nss ns pids p t
	nss=$(our_netns)
	# Processes in our namespaces: SIGTERM, wait up to 5 s, then SIGKILL.
	local all=()
	for ns in $nss; do
		pids=$(ip netns pids "$ns" 2>/dev/null) || true
		for p in $pids; do all+=("$p"); done
	done
	if ((${#all[@]})); then
		kill -TERM "${all[@]}" 2>/dev/null
		for ((t = 0; t < 50; t++)); do
			local left=()
			for p in "${all[@]}"; do alive "$p" && left+=("$p"); done
			((${#left[@]})) || break
			sleep 0.1
		done
		for p in "${all[@]}"; do alive "$p" && kill -KILL "$p" 2>/dev/null; done
	fi
	local rc=0
	for ns in $nss; do
		# Processes started since (by a racing 'run'): kill, bounded retries.
		for ((t = 0; t < 10; t++)); do
			pids=$(ip netns pids "$ns" 2>/dev/null) || true
			[[ -z $pids ]] && break
			# shellcheck disable=SC2086
			kill -KILL $pids 2>/dev/null
			sleep 0.1
		done
		ip netns del "$ns" 2>/dev/null || { warn "cannot delete namespace $ns"; rc=1; }
	done
	# Bridges are in the switch namespace; an older root-namespace layout
	# (${PREFIX}br*) is removed too if present.
	local l
	for l in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | sed 's/@.*//' |
		grep -E "^${PREFIX}br[0-9]+\$"); do
		ip link del "$l" 2>/dev/null
	done
	[[ -n $DIR && $DIR == /tmp/"$PREFIX" ]] && rm -rf -- "$DIR"
	return $rc
}

cmd_up() {
	local H='' R='' RATE=''
	while (($#)); do
		case $1 in
		-H | --hosts) H=${2:-}; shift 2 || die "$1 needs a value" ;;
		-R | --rails) R=${2:-}; shift 2 || die "$1 needs a value" ;;
		--rate) RATE=${2:-}; shift 2 || die "$1 needs a value" ;;
		--burst) BURST=${2:-}; shift 2 || die "$1 needs a value" ;;
		--latency) TBF_LATENCY=${2:-}; shift 2 || die "$1 needs a value" ;;
		--mtu) MTU=${2:-}; shift 2 || die "$1 needs a value" ;;
		--prefix) PREFIX=${2:-}; shift 2 || die "$1 needs a value" ;;
		-h | --help) usage; exit 0 ;;
		*) die "up: unknown argument '$1'" ;;
		esac
	done
	check_prefix
	need_root
	[[ $H =~ ^[0-9]+$ ]] && ((H >= 1 && H <= MAX_HOSTS)) || die "up: -H 1..$MAX_HOSTS required"
	[[ $R =~ ^[0-9]+$ ]] && ((R >= 1 && R <= MAX_RAILS)) || die "up: -R 1..$MAX_RAILS required"
	H=$((10#$H)) R=$((10#$R))
	[[ -z $BURST || $BURST =~ ^[0-9]+$ ]] || die "up: bad --burst '$BURST' (bytes)"
	[[ $MTU =~ ^[0-9]+$ ]] && ((MTU >= 1280 && MTU <= 65535)) || die "up: bad --mtu '$MTU' (1280..65535)"
	[[ -z $RATE ]] || tbf_args "$RATE" >/dev/null

	if [[ -e $DIR || -n $(our_netns) ]]; then
		warn "removing leftovers of cluster '$PREFIX'"
		cmd_down || die "up: cannot remove leftovers of '$PREFIX'"
	fi
	mkdir -p "$DIR" || die "cannot create $DIR"
	printf 'prefix=%s\nhosts=%s\nrails=%s\nrate=%s\nmtu=%s\n' "$PREFIX" "$H" "$R" "$RATE" "$MTU" \
		>"$STATE"

	# Any failure from here on: undo everything. (Not "if ! ( ... )":
	# set -e is ignored in a condition.)
	(
		set -e
		ip netns add "$SWNS"
		ns_sysctl_setup "$SWNS"
		ip -n "$SWNS" link set lo up
		for ((r = 0; r < R; r++)); do
			ip -n "$SWNS" link add "${PREFIX}br$r" type bridge stp_state 0 mcast_snooping 0
			ip -n "$SWNS" link set "${PREFIX}br$r" up
		done
		for ((i = 0; i < H; i++)); do
			ns=$(hns "$i")
			mkdir -p "$DIR/h$i"
			ip netns add "$ns"
			ns_sysctl_setup "$ns"
			ip -n "$ns" link set lo up
			for ((r = 0; r < R; r++)); do
				ip -n "$ns" link add "rail$r" type veth peer name "h${i}r$r" netns "$SWNS"
				ip -n "$ns" addr add "$(addr_of "$i" "$r")/24" dev "rail$r"
				ip -n "$ns" link set "rail$r" mtu "$MTU"
				ip -n "$SWNS" link set "h${i}r$r" mtu "$MTU"
				ip -n "$SWNS" link set "h${i}r$r" master "${PREFIX}br$r"
				ip -n "$SWNS" link set "h${i}r$r" up
				ip -n "$ns" link set "rail$r" up
				if [[ -n $RATE ]]; then nic_cap "$i" "$r" "$RATE" both; fi
			done
		done
	)
	if (($?)); then
		warn "up failed; tearing down"
		cmd_down
		exit 1
	fi
	echo "cluster '$PREFIX' up: $H hosts x $R rails${RATE:+, every NIC capped at $RATE each way}"
}

cmd_status() {
	check_prefix
	need_root
	load_state
	echo "cluster '$PREFIX': $H hosts x $R rails (switch namespace $SWNS, dir $DIR)"
	local i r ns st pid
	for ((i = 0; i < H; i++)); do
		ns=$(hns "$i")
		st="no daemon"
		if [[ -r $DIR/h$i/r2ccld.pid ]]; then
			pid=$(<"$DIR/h$i/r2ccld.pid")
			if [[ -r $DIR/h$i/r2ccld.rc ]]; then
				st="daemon exited $(<"$DIR/h$i/r2ccld.rc")"
			elif kill -0 "$pid" 2>/dev/null; then
				st="daemon pid $pid"
			fi
		fi
		echo "h$i ($ns): $st"
		for ((r = 0; r < R; r++)); do
			local state tx rx
			state=$(ip -n "$ns" -o link show dev "rail$r" 2>/dev/null |
				grep -o 'state [A-Z]*' | cut -d' ' -f2)
			tx=$(tc -n "$ns" qdisc show dev "rail$r" root 2>/dev/null | grep -o 'rate [^ ]*' | head -1)
			rx=$(tc -n "$SWNS" qdisc show dev "h${i}r$r" root 2>/dev/null | grep -o 'rate [^ ]*' | head -1)
			echo "  rail$r $(addr_of "$i" "$r")/24 ${state:-?} tx ${tx:-uncapped} rx ${rx:-uncapped}"
		done
	done
}

cmd_rate() {
	check_prefix
	need_root
	load_state
	(($# >= 3 && $# <= 4)) || die "usage: rate HOST RAIL RATE|off|blackhole [tx|rx|both]"
	local i r
	i=$(host_index "$1") || exit 1
	r=$(rail_index "$2") || exit 1
	nic_cap "$i" "$r" "$3" "${4:-both}"
}

cmd_link() {
	check_prefix
	need_root
	load_state
	(($# == 3)) || die "usage: link HOST RAIL up|down"
	local i r
	i=$(host_index "$1") || exit 1
	r=$(rail_index "$2") || exit 1
	[[ $3 == up || $3 == down ]] || die "link: state must be up or down"
	ip -n "$(hns "$i")" link set "rail$r" "$3"
}

cmd_addr() {
	check_prefix
	load_state
	(($# == 2)) || die "usage: addr HOST RAIL"
	local i r
	i=$(host_index "$1") || exit 1
	r=$(rail_index "$2") || exit 1
	addr_of "$i" "$r"
}

host_env() {
	local i=$1
	echo "R2CCL_SOCKET=$DIR/h$i/r2ccld.sock" "R2CCL_HOST_INDEX=$i" "R2CCL_NHOSTS=$H" \
		"R2CCL_NRAILS=$R" "R2CCL_CLUSTER_DIR=$DIR" "R2C_PREFIX=$PREFIX"
}

cmd_exec() {
	check_prefix
	need_root
	load_state
	(($# >= 2)) || die "usage: exec HOST CMD..."
	local i
	i=$(host_index "$1") || exit 1
	shift
	# shellcheck disable=SC2046
	exec ip netns exec "$(hns "$i")" env $(host_env "$i") "$@"
}

r2ccld_path() {
	local p=${R2CCLD:-}
	if [[ -z $p ]]; then
		p=$REPO_ROOT/build/daemon/r2ccld
		[[ -x $p ]] || p=build/daemon/r2ccld
	fi
	[[ -x $p ]] || die "r2ccld not found at '$p' (set R2CCLD)"
	echo "$(cd "$(dirname "$p")" && pwd)/$(basename "$p")"
}

cmd_daemons() {
	check_prefix
	need_root
	load_state
	local sub=${1:-}
	shift || true
	# --hosts I,J,...: only those hosts' daemons (a daemon restarted
	# under running clients); default every host
	local h
	DHOSTS=()
	if [[ ${1:-} == --hosts ]]; then
		IFS=, read -r -a DHOSTS <<<"${2:-}"
		shift 2 || die "daemons $sub --hosts: a list of hosts"
		for h in "${!DHOSTS[@]}"; do DHOSTS[h]=$(host_index "${DHOSTS[h]}") || exit 1; done
	else
		for ((h = 0; h < H; h++)); do DHOSTS+=("$h"); done
	fi
	case $sub in
	start) daemons_start "$@" ;;
	stop) daemons_stop ;;
	*) die "usage: daemons start [--hosts I,J,...] [R2CCLD-ARGS...] | daemons stop [--hosts I,J,...]" ;;
	esac
}

# The cluster's key (peer_auth, docs/security.md): 32 random bytes in
# base64, made once per cluster; every host gets its own copy, mode 0600, as
# an operator would install it on each host.
cluster_key() {
	[[ -s $DIR/cluster.key ]] && return 0
	(umask 077 && head -c 32 /dev/urandom | base64 >"$DIR/cluster.key.tmp" &&
		mv "$DIR/cluster.key.tmp" "$DIR/cluster.key") || die "cannot write $DIR/cluster.key"
}

daemons_start() {
	local bin i hd pid t
	bin=$(r2ccld_path) || exit 1
	mkdir -p "$DIR"
	cluster_key
	for i in "${DHOSTS[@]}"; do
		hd=$DIR/h$i
		mkdir -p "$hd"
		install -m 600 "$DIR/cluster.key" "$hd/cluster.key" || die "cannot write $hd/cluster.key"
		if [[ -r $hd/r2ccld.pid && ! -e $hd/r2ccld.rc ]] &&
			kill -0 "$(<"$hd/r2ccld.pid")" 2>/dev/null; then
			die "daemon of h$i already running (pid $(<"$hd/r2ccld.pid"))"
		fi
		rm -f "$hd/r2ccld.pid" "$hd/r2ccld.rc" "$hd/r2ccld.sock"
		# A wrapper in the namespace runs the daemon in its own process
		# group (set -m: SIGINT not ignored), records its pid and, when it
		# ends, its exit status.
		(
			set -m
			cd "$hd" || exit 1
			exec ip netns exec "$(hns "$i")" bash -c '
				set -m
				hd=$1; shift
				"$@" &
				p=$!
				set +m
				echo "$p" >"$hd/r2ccld.pid.tmp" && mv "$hd/r2ccld.pid.tmp" "$hd/r2ccld.pid"
				wait "$p"
				echo $? >"$hd/r2ccld.rc"' _ "$hd" \
				"$bin" --socket "$hd/r2ccld.sock" --config /dev/null --rails rail \
				--cluster-key-file "$hd/cluster.key" "$@"
		) </dev/null >"$hd/r2ccld.log" 2>&1 &
	done
	# Wait (bounded) for every socket.
	local rc=0
	for i in "${DHOSTS[@]}"; do
		hd=$DIR/h$i
		for ((t = 0; t < DAEMON_WAIT * 10; t++)); do
			[[ -S $hd/r2ccld.sock || -e $hd/r2ccld.rc ]] && break
			sleep 0.1
		done
		if [[ -S $hd/r2ccld.sock && ! -e $hd/r2ccld.rc ]]; then
			echo "h$i: r2ccld pid $(<"$hd/r2ccld.pid") socket $hd/r2ccld.sock"
		else
			if [[ -e $hd/r2ccld.rc ]]; then
				warn "h$i: r2ccld exited with $(<"$hd/r2ccld.rc") before its socket appeared"
			else
				warn "h$i: r2ccld socket did not appear within ${DAEMON_WAIT}s"
			fi
			tail -n 20 "$hd/r2ccld.log" 2>/dev/null | sed "s/^/[h$i] /" >&2
			rc=1
		fi
	done
	return $rc
}

daemons_stop() {
	local i hd pid t rc=0 any=0
	local pids=()
	for i in "${DHOSTS[@]}"; do
		hd=$DIR/h$i
		pids[i]=''
		[[ -r $hd/r2ccld.pid ]] || continue
		pid=$(<"$hd/r2ccld.pid")
		pids[i]=$pid
		any=1
		[[ -e $hd/r2ccld.rc ]] || kill -TERM "$pid" 2>/dev/null
	done
	((any)) || { echo "no daemons"; return 0; }
	for ((t = 0; t < STOP_WAIT * 10; t++)); do
		local pending=0
		for i in "${DHOSTS[@]}"; do
			[[ -n ${pids[i]} && ! -e $DIR/h$i/r2ccld.rc ]] && pending=1
		done
		((pending)) || break
		sleep 0.1
	done
	for i in "${DHOSTS[@]}"; do
		[[ -n ${pids[i]} ]] || continue
		hd=$DIR/h$i
		if [[ ! -e $hd/r2ccld.rc ]]; then
			warn "h$i: r2ccld (pid ${pids[i]}) still running after ${STOP_WAIT}s: SIGKILL"
			kill -KILL "${pids[i]}" 2>/dev/null
			for ((t = 0; t < 50; t++)); do [[ -e $hd/r2ccld.rc ]] && break; sleep 0.1; done
			rc=1
		fi
		local code
		code=$(cat "$hd/r2ccld.rc" 2>/dev/null || echo '?')
		if [[ $code == 0 ]]; then
			echo "h$i: r2ccld exited 0"
		else
			local why=''
			[[ $code =~ ^[0-9]+$ ]] && ((code > 128)) && why=" (signal $((code - 128)))"
			echo "h$i: r2ccld exited $code$why"
			rc=1
		fi
		rm -f "$hd/r2ccld.pid"
	done
	return $rc
}

cmd_run() {
	local timeout=300 hosts='' quiet=0
	while (($#)); do
		case $1 in
		--timeout) timeout=${2:-}; shift 2 || die "$1 needs a value" ;;
		--hosts) hosts=${2:-}; shift 2 || die "$1 needs a value" ;;
		--quiet) quiet=1; shift ;;
		--) shift; break ;;
		*) break ;;
		esac
	done
	check_prefix
	need_root
	load_state
	(($#)) || die "usage: run [--timeout S] [--hosts I,J] -- CMD..."
	[[ $timeout =~ ^[0-9]+$ ]] && ((timeout > 0)) || die "run: bad --timeout '$timeout'"
	local list=() i
	if [[ -n $hosts ]]; then
		local h
		IFS=',' read -ra hl <<<"$hosts"
		for h in "${hl[@]}"; do
			i=$(host_index "$h") || exit 1
			list+=("$i")
		done
	else
		for ((i = 0; i < H; i++)); do list+=("$i"); done
	fi
	local -A pid=()
	# shellcheck disable=SC2317
	run_abort() {
		local p
		for p in "${pid[@]}"; do kill -TERM "$p" 2>/dev/null; done
		sleep 1
		for p in "${pid[@]}"; do kill -KILL "$p" 2>/dev/null; done
		exit 130
	}
	trap run_abort INT TERM
	for i in "${list[@]}"; do
		mkdir -p "$DIR/h$i"
		# shellcheck disable=SC2046
		ip netns exec "$(hns "$i")" env $(host_env "$i") \
			timeout -k 5 "$timeout" "$@" </dev/null >"$DIR/h$i/out.log" 2>&1 &
		pid[$i]=$!
	done
	local rc=0 code
	local -A codes=()
	for i in "${list[@]}"; do
		wait "${pid[$i]}"
		code=$?
		codes[$i]=$code
		((code)) && rc=1
	done
	trap - INT TERM
	for i in "${list[@]}"; do
		if ((!quiet)) || ((codes[$i])); then
			sed "s/^/[h$i] /" "$DIR/h$i/out.log"
		fi
	done
	for i in "${list[@]}"; do
		code=${codes[$i]}
		case $code in
		0) ((quiet)) || echo "h$i: ok" ;;
		124 | 137) echo "h$i: timed out after ${timeout}s (exit $code)" ;;
		*) echo "h$i: failed (exit $code)" ;;
		esac
	done
	return $rc
}

# Every daemon's rails whose TCP warm-ups of its H - 1 peers are not all
# logged done ("rail N (...): TCP warm-up of K connections done").
cmd_warmups() {
	check_prefix
	load_state
	local h r n left=0
	for ((h = 0; h < H; h++)); do
		for ((r = 0; r < R; r++)); do
			n=$(sed -n "s/.*rail $r ([^)]*): TCP warm-up of \([0-9]*\) connections\{0,1\} done.*/\1/p" \
				"$DIR/h$h/r2ccld.log" 2>/dev/null | awk '{ s += $1 } END { print s + 0 }')
			((n >= H - 1)) && continue
			echo "h$h rail $r: $n of $((H - 1))"
			left=1
		done
	done
	return $left
}

# Global options before the command.
while (($#)); do
	case $1 in
	--prefix) PREFIX=${2:-}; shift 2 || die "--prefix needs a value" ;;
	--prefix=*) PREFIX=${1#--prefix=}; shift ;;
	*) break ;;
	esac
done
CMD=${1:-help}
shift || true
# --prefix also accepted right after the command.
if [[ $CMD != up && ${1:-} == --prefix ]]; then
	PREFIX=${2:-}
	shift 2 || die "--prefix needs a value"
fi

case $CMD in
up) cmd_up "$@" ;;
down) cmd_down ;;
status) cmd_status ;;
addr) cmd_addr "$@" ;;
rate) cmd_rate "$@" ;;
link) cmd_link "$@" ;;
exec) cmd_exec "$@" ;;
daemons) cmd_daemons "$@" ;;
warmups) cmd_warmups ;;
run) cmd_run "$@" ;;
help | -h | --help) usage ;;
*) usage >&2; exit 2 ;;
esac
