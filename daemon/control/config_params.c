/* SPDX-License-Identifier: MIT */
/*
 * r2ccld's parameter registry: one typed table (name, R2CCL_* variable,
 * option, type, default, bounds, unit, reloadable, help) that config.c
 * loads from its three sources and prints as --help, the example
 * configuration and the table of docs/operations.md.
 */
#include <stdint.h>

#include "config.h"
#include "base/daemon.h"

#define I64MAX INT64_MAX

const struct r2_param_def r2d_param_defs[P_COUNT] = {
	[P_SOCKET] = { "socket", "R2CCL_SOCKET", "--socket", R2_PT_STRING, R2CCL_DEFAULT_SOCKET,
		       0, 0, NULL, NULL, false, "Unix socket clients and r2cclctl connect to" },
	[P_SOCKET_MODE] = { "socket_mode", "R2CCL_SOCKET_MODE", "--socket-mode", R2_PT_STRING,
			    "0666", 0, 0, NULL, "octal", false,
			    "permission bits of the socket (tenants are isolated by the daemon)" },
	[P_SOCKET_OWNER] = { "socket_owner", "R2CCL_SOCKET_OWNER", "--socket-owner",
			     R2_PT_STRING, "", 0, 0, NULL, NULL, false,
			     "user owning the socket (empty: the daemon's)" },
	[P_SOCKET_GROUP] = { "socket_group", "R2CCL_SOCKET_GROUP", "--socket-group",
			     R2_PT_STRING, "", 0, 0, NULL, NULL, false,
			     "group owning the socket (empty: the daemon's)" },
	[P_CONFIG] = { "config", "R2CCL_CONFIG", "--config", R2_PT_STRING,
		       R2CCL_SYSCONFDIR "/r2ccl/r2ccld.conf", 0, 0, NULL, NULL, false,
		       "configuration file (a missing default file is not an error)" },
	[P_RAILS] = { "rails", "R2CCL_RAILS", "--rails", R2_PT_STRING, "", 0, 0, NULL, NULL,
		      false, "NICs to use as rails, NCCL filter syntax (eth, ^eth2, =eth0)" },
	[P_TOPOLOGY_XML] = { "topology_xml", "R2CCL_TOPOLOGY_XML", "--topology-xml",
			     R2_PT_STRING, "", 0, 0, NULL, NULL, false,
			     "replay this lstopo XML instead of discovering the host" },
	[P_LOG_LEVEL] = { "log_level", "R2CCL_LOG_LEVEL", "--log-level", R2_PT_ENUM, "info", 0, 0,
			  "err|warn|info|debug", NULL, true, "log verbosity" },
	[P_OP_TIMEOUT_MS] = { "op_timeout_ms", "R2CCL_OP_TIMEOUT_MS", "--op-timeout-ms",
			      R2_PT_INT, "30000", 10, 86400000, NULL, "ms", true,
			      "an operation whose ranks do not all arrive fails after this" },
	[P_BOOTSTRAP_TIMEOUT_MS] = { "bootstrap_timeout_ms", "R2CCL_BOOTSTRAP_TIMEOUT_MS",
				     "--bootstrap-timeout-ms", R2_PT_INT, "30000", 10, 86400000,
				     NULL, "ms", true,
				     "a communicator not complete after this fails on every rank" },
	[P_MAX_FRAME] = { "max_frame", "R2CCL_MAX_FRAME", "--max-frame", R2_PT_INT, "1M", 4096,
			  64 << 20, NULL, "bytes", false, "largest control frame accepted" },
	[P_MAX_SESSIONS] = { "max_sessions", "R2CCL_MAX_SESSIONS", "--max-sessions", R2_PT_INT,
			     "4096", 1, 1 << 20, NULL, NULL, true, "concurrent client sessions" },
	[P_MAX_OUTQ] = { "max_outq", "R2CCL_MAX_OUTQ", "--max-outq", R2_PT_INT, "4M", 4096,
			 1 << 30, NULL, "bytes", true,
			 "replies queued for a client that does not read before it is dropped" },
	[P_MAX_MEM_PER_SESSION] = { "max_mem_per_session", "R2CCL_MAX_MEM_PER_SESSION",
				    "--max-mem-per-session", R2_PT_INT, "1T", 4096, I64MAX, NULL,
				    "bytes", true, "shared memory one session may register" },
	[P_REDUCE_THREADS] = { "reduce_threads", "R2CCL_REDUCE_THREADS", "--reduce-threads",
			       R2_PT_INT, "0", 0, 256, NULL, NULL, false,
			       "threads that share a large reduction (0: one per CPU)" },
	/* on 16 cores the executor spent 250 of a 1 GB AllReduce's 300 ms
	 * applying received chunks one after the other (docs/benchmarks.md) */
	[P_APPLY_THREADS] = { "apply_threads", "R2CCL_APPLY_THREADS", "--apply-threads", R2_PT_INT,
			      "-1", -1, 64, NULL, NULL, false,
			      "threads that apply received chunks of the rail phase (reduce or "
			      "copy them into the working buffer) while the executor goes on "
			      "(0: the executor applies them itself; -1: by the cores, 0 below 8, "
			      "else one per 4 cores, at most 8)" },
	[P_INLINE_MAX] = { "inline_max", "R2CCL_INLINE_MAX", "--inline-max", R2_PT_INT, "64K", 0,
			   1 << 30, NULL, "bytes", true,
			   "operations up to this size run on the dispatcher thread" },
	[P_SYSTEMD] = { "systemd", "R2CCL_SYSTEMD", "--systemd", R2_PT_BOOL, "0", 0, 0, NULL,
			NULL, false, "notify systemd (READY, STATUS, WATCHDOG, STOPPING)" },
	[P_HB_INTERVAL] = { "hb_interval", "R2CCL_HB_INTERVAL", "--hb-interval", R2_PT_INT,
			    "200000", 1000, 60000000, NULL, "us", true,
			    "heartbeat interval per peer per rail" },
	[P_MAX_RETRIES] = { "max_retries", "R2CCL_MAX_RETRIES", "--max-retries", R2_PT_INT, "5",
			    0, 1000, NULL, NULL, true,
			    "re-posts of one chunk on other rails before the operation fails "
			    "with R2CCL_E_NO_PATH" },
	[P_RECURSION_THRESH] = { "recursion_thresh", "R2CCL_RECURSION_THRESH",
				 "--recursion-thresh", R2_PT_DOUBLE, "0.3", 0, 0, NULL, NULL, true,
				 "bandwidth variance that triggers recursive sub-rings" },
	[P_ROUTING_ALGO] = { "routing_algo", "R2CCL_ROUTING_ALGO", "--routing-algo", R2_PT_INT,
			     "3", 0, 3, NULL, NULL, true,
			     "broadcast/reduce shapes: 0 auto (cheapest by the cost model), 1 chain, "
			     "2 binary tree, 3 Steiner tree avoiding degraded hosts (still "
			     "compared with the chain)" },
	/* the log-step plans run on the namespace cluster since 2026-12-04
	 * (every collective exact, tests/cluster/test_collectives.sh and
	 * test_faults.sh); the planner, docs/planner.md */
	[P_LOGSTEP] = { "logstep", "R2CCL_LOGSTEP", "--logstep", R2_PT_ENUM, "rd", 0, 0,
			"off|hd|rd|bruck", NULL, true,
			"log-step schedules in the planner's choice: off (rings, shards, trees), "
			"hd (also recursive halving/doubling, and Bruck's schedule for any "
			"number of hosts, for AllReduce, ReduceScatter and AllGather where the "
			"cost model prefers it), rd (hd, and recursive doubling by pairs for "
			"AllReduce), bruck (of those, Bruck's alone); the same on every host" },
	/* 4: on 8 hosts recursive doubling at 4 MB, 6% ahead in the model,
	 * ran 28-47% behind the ring (docs/planner.md, "8 and 16 hosts") */
	[P_LOGSTEP_HOSTS] = { "logstep_hosts", "R2CCL_LOGSTEP_HOSTS", "--logstep-hosts", R2_PT_INT,
			      "4", 0, 1 << 20, NULL, NULL, true,
			      "the log-step schedules (logstep) where the cost model puts them 5% "
			      "ahead on up to this many hosts, 15% beyond (0: 5% on any number); "
			      "the same on every host" },
	[P_PROXY_BUF_SIZE] = { "proxy_buf_size", "R2CCL_PROXY_BUF_SIZE", "--proxy-buf-size",
			       R2_PT_INT, "4M", 4096, 1 << 30, NULL, "bytes", false,
			       "proxy buffer chunk (registration unit)" },
	[P_PROXY_POOL_MAX] = { "proxy_pool_max", "R2CCL_PROXY_POOL_MAX", "--proxy-pool-max",
			       R2_PT_INT, "256M", 4096, I64MAX, NULL, "bytes", false,
			       "cap on the proxy buffer pools' memory (all rails together)" },
	[P_MODE] = { "mode", "R2CCL_MODE", "--mode", R2_PT_ENUM, "balance", 0, 0,
		     "balance|hotrepair", NULL, true,
		     "failover mode of communicators that set none: balance re-plans with shares "
		     "proportional to each path's bandwidth, hotrepair moves a failed rail's "
		     "traffic to a backup NIC" },
	[P_PORT] = { "port", "R2CCL_PORT", "--port", R2_PT_INT, "0", 0, 65535, NULL, NULL, false,
		     "TCP port the rails listen on (0: any; unique ids carry it)" },
	[P_TCP_STREAMS] = { "tcp_streams", "R2CCL_TCP_STREAMS", "--tcp-streams", R2_PT_INT, "0",
			    0, 64, NULL, NULL, false,
			    "TCP streams per peer per rail (0: 2 per progress thread, 1 with one thread)" },
	[P_TCP_THREADS] = { "tcp_threads", "R2CCL_TCP_THREADS", "--tcp-threads", R2_PT_INT, "0",
			    0, 16, NULL, NULL, false,
			    "progress threads per TCP rail, the streams spread over them (0: one per "
			    "4 cores, 1 to 4)" },
	[P_TCP_SNDBUF] = { "tcp_sndbuf", "R2CCL_TCP_SNDBUF", "--tcp-sndbuf", R2_PT_INT, "0", 0,
			   1 << 30, NULL, "bytes", false, "SO_SNDBUF of rail sockets (0: kernel)" },
	[P_TCP_RCVBUF] = { "tcp_rcvbuf", "R2CCL_TCP_RCVBUF", "--tcp-rcvbuf", R2_PT_INT, "0", 0,
			   1 << 30, NULL, "bytes", false, "SO_RCVBUF of rail sockets (0: kernel)" },
	[P_TCP_NODELAY] = { "tcp_nodelay", "R2CCL_TCP_NODELAY", "--tcp-nodelay", R2_PT_BOOL, "1",
			    0, 0, NULL, NULL, false, "TCP_NODELAY on rail sockets" },
	[P_TCP_LATENCY_LANE] = { "tcp_latency_lane", "R2CCL_TCP_LATENCY_LANE",
				 "--tcp-latency-lane", R2_PT_ENUM, "auto", 0, 0, "auto|on|off", NULL,
				 false,
				 "one TCP stream more per peer per rail, for latency-class tenants' "
				 "chunks alone (auto: on when the configuration has a latency-class "
				 "tenant at start)" },
	/* cubic, not the kernel's default: with bbr (this VM's default) one
	 * rail's socket now and then took 40-60 ms to deliver a 128 KiB chunk
	 * without any loss (its pacing), and a 4 MB AllReduce then took 2x
	 * (docs/resilience.md, "2026-12-01 (night)") */
	[P_TCP_CONGESTION] = { "tcp_congestion", "R2CCL_TCP_CONGESTION", "--tcp-congestion",
			       R2_PT_STRING, "cubic", 0, 0, NULL, NULL, false,
			       "TCP congestion control of rail sockets (TCP_CONGESTION: cubic, "
			       "reno, bbr...; empty: the kernel's default)" },
	/* a connection that never carried a burst has TCP's initial window
	 * (10 segments): the first collective that uses it after a re-plan (a
	 * shard plan uses every pair, a ring only its neighbours) waited 35-55
	 * ms more per step on 4 x 2 at 1 Gbit/s (docs/resilience.md) */
	[P_TCP_WARMUP] = { "tcp_warmup", "R2CCL_TCP_WARMUP", "--tcp-warmup", R2_PT_INT, "2M", 0,
			   64ll << 20, NULL, "bytes", false,
			   "bytes sent (and dropped by the peer) per stream of a new TCP rail "
			   "connection, so that its congestion window has grown before a "
			   "collective needs it (0: off)" },
	/* on: a thread hand-off less per small chunk (the rails thread's
	 * wake-up); docs/benchmarks.md, "Received chunks to the mailbox" */
	[P_TCP_RX_DIRECT] = { "tcp_rx_direct", "R2CCL_TCP_RX_DIRECT", "--tcp-rx-direct",
			      R2_PT_BOOL, "1", 0, 0, NULL, NULL, false,
			      "a TCP progress thread hands an acknowledgement or a data chunk of "
			      "up to 256 KiB (or an eager AllReduce's) it read to its communicator "
			      "itself, not through the rails thread (0: through it)" },
	[P_TCP_ZERO_COPY] = { "tcp_zero_copy", "R2CCL_TCP_ZERO_COPY", "--tcp-zero-copy",
			      R2_PT_BOOL, "1", 0, 0, NULL, NULL, true,
			      "TCP rails send chunks from the working buffer itself, not from a "
			      "proxy-buffer copy (a chunk is copied only if the buffer is about "
			      "to change before its acknowledgement)" },
	[P_CHUNK_SIZE] = { "chunk_size", "R2CCL_CHUNK_SIZE", "--chunk-size", R2_PT_INT, "1M",
			   4096, 64 << 20, NULL, "bytes", true,
			   "largest chunk of the rail phase (each is acknowledged)" },
	/* 64 KiB and below always; up to this on 2 hosts (exec_rail_eager.c):
	 * on 2 namespace hosts of the
	 * 2-core VM 128 KB from 254-282 us (the planner's rd plan) to
	 * 161-234, 256 KB from 319-399 to 235-288; at 1 Gbit/s per NIC the
	 * same times as rd (both wire-bound); on the 16-core machine 1 MB
	 * eager was slower (480-560 us against 461-502), hence 512K;
	 * docs/benchmarks.md, "Eager AllReduce above 64 KiB" */
	/* at most 8 MiB: a host stages GPU buffers of 16 MiB and more
	 * piecewise (gpu/staging.c), which the eager path does not take, and
	 * that is the host's own state, not the operation's: hosts would
	 * choose differently */
	[P_EAGER_MAX] = { "eager_max", "R2CCL_EAGER_MAX", "--eager-max", R2_PT_INT, "512K", 0,
			  8 << 20, NULL, "bytes", true,
			  "AllReduce across hosts by the eager path (each host's buffer to "
			  "every other in one step, no acknowledgement awaited) up to this size: "
			  "on 2-8 hosts up to 64 KiB at most, on 2 hosts beyond, in a piece per "
			  "rail of at most chunk_size (0: never; 65536: not beyond); the same "
			  "on every host" },
	/* above 64 KiB on more than 2 hosts eager sends (n - 1) x size: it
	 * wins only where a step costs much more than the bytes (fast rails,
	 * thread hand-offs dominating), which the cost model must be told
	 * (cost_alpha_us, cost_nic_bw); its defaults (1 Gbit/s) describe the
	 * rate-limited test clusters, where 3 hosts measured eager slower
	 * (exec_rail_eager.c), hence 2 */
	[P_EAGER_HOSTS] = { "eager_hosts", "R2CCL_EAGER_HOSTS", "--eager-hosts", R2_PT_INT, "2", 2,
			    8, NULL, NULL, true,
			    "above 64 KiB (up to eager_max), the eager path on up to this many "
			    "hosts: on 3 or more only where the cost model (cost_alpha_us a "
			    "step, cost_nic_bw per NIC) puts its one step of (n - 1) x size "
			    "under the log-step plans' steps; the same on every host" },
	/* on: an operation by the planner's plan no longer waits the last
	 * ACKs' way back (exec_rail_loop.c end_sends) */
	[P_ACK_LINGER] = { "ack_linger", "R2CCL_ACK_LINGER", "--ack-linger", R2_PT_BOOL, "1", 0, 0,
			   NULL, NULL, true,
			   "an AllReduce (or other collective) across hosts ends without waiting "
			   "for its last chunks' acknowledgements: each unacknowledged chunk keeps "
			   "its own copy until its ACK comes and is sent again if its connection "
			   "fails, as the eager path's messages are (0: it waits for them)" },
	/* a log-step plan of this many steps or more: its chunks of a step
	 * wait on a rail while that rail still carries the step before's to
	 * another peer (exec_rail_send.c rl_send_ready). 4: 8 hosts and more
	 * (rd and HD take 3 steps on 4 hosts, where the wait for an ACK cost
	 * 5-10% uncapped and there is little lateness to undo; docs/planner.md) */
	[P_STEP_ORDER] = { "step_order", "R2CCL_STEP_ORDER", "--step-order", R2_PT_INT, "4", 0, 64,
			   NULL, "steps", true,
			   "in a log-step plan (recursive halving/doubling) of at least this many "
			   "steps, a step's chunks wait on a rail while it still carries "
			   "unacknowledged chunks of an earlier step to another host (at most "
			   "about their time at cost_nic_bw), so that the host waiting for those "
			   "gets them first rather than sharing the NIC with the next step's (0: "
			   "never; every chunk goes as soon as its bytes are final)" },
	/* on: the control thread's wake-ups (a client's request, a tick) do not
	 * preempt the dispatcher or an executor mid-operation (a neighbour
	 * tenant's refused requests moved a victim's p99 some 3 points less);
	 * off by default: on a loaded 2-core host `tenants set` then took 3-4
	 * ms instead of under 1 and its effect came after 12-14 ms in 2 of 6
	 * tries, and view agreements run on that thread too (docs/tenancy.md) */
	[P_CONTROL_BATCH] = { "control_batch", "R2CCL_CONTROL_BATCH", "--control-batch",
			      R2_PT_BOOL, "0", 0, 0, NULL, NULL, false,
			      "the control thread (client requests, health, r2cclctl) runs "
			      "SCHED_BATCH: the same CPU share, but its wake-ups do not preempt "
			      "the data path's threads, and on a busy host it answers later" },
	[P_SPIN_US] = { "spin_us", "R2CCL_SPIN_US", "--spin-us", R2_PT_INT, "50", 0, 1000000, NULL,
			"us", true,
			"the dispatcher busy-polls the rings this long after activity (0: never)" },
	[P_EXEC_SPIN_US] = { "exec_spin_us", "R2CCL_EXEC_SPIN_US", "--exec-spin-us", R2_PT_INT,
			     "-1", -1, 1000000, NULL, "us", false,
			     "a cross-host communicator's executor busy-polls its mailbox and queue "
			     "this long before it sleeps (for its peers, after each operation), a "
			     "TCP progress thread its sockets after an eager AllReduce's message, "
			     "the rails thread its completions where messages come in through it "
			     "(verbs) (-1: 250 us with 8+ CPUs, 0 below; 0: never)" },
	/* 200 us: with it the step model predicts the measured steady-state
	 * times of the failure plans on 1 Gbit/s TCP rails here within 1-7%
	 * (1 ms overestimated them by 6-9% and picked fewer, longer steps;
	 * docs/planner.md, "With alpha set to what a step costs"); RDMA rails
	 * want less */
	/* the speed the model gives a healthy NIC; the health view's degraded
	 * bandwidths are fractions of it (health.h: R2_PLAN_NOMINAL_BPS) */
	[P_COST_NIC_BW] = { "cost_nic_bw", "R2CCL_COST_NIC_BW", "--cost-nic-bw", R2_PT_INT,
			    "125000000", 1000000, 100000000000000LL, NULL, "bytes/s", true,
			    "cost model: a healthy NIC's bandwidth per direction (125000000 = "
			    "1 Gbit/s); the same on every host" },
	[P_COST_ALPHA_US] = { "cost_alpha_us", "R2CCL_COST_ALPHA_US", "--cost-alpha-us", R2_PT_INT,
			      "200", 0, 100000000, NULL, "us", true,
			      "cost model: time per message on a rail (alpha), for the planner; "
			      "the same on every host" },
	[P_INJECT_DUP] = { "inject_dup", "R2CCL_INJECT_DUP", "--inject-dup", R2_PT_INT, "0", 0,
			   1000000, NULL, NULL, true,
			   "testing: send every Nth chunk twice and each transfer's chunks in "
			   "reverse order (0: off)" },
	[P_INJECT_APPLY_DELAY_US] = { "inject_apply_delay_us", "R2CCL_INJECT_APPLY_DELAY_US",
				      "--inject-apply-delay-us", R2_PT_INT, "0", 0, 1000000, NULL,
				      "us", true,
				      "testing: the apply queue (apply_threads) holds each chunk "
				      "this long between reading the bytes it reduces into and "
				      "writing them, so that what overlaps it arrives meanwhile, "
				      "and a chunk applied beside it is lost (0: off)" },
	[P_INJECT_REFUSE] = { "inject_refuse", "R2CCL_INJECT_REFUSE", "--inject-refuse", R2_PT_INT,
			      "0", 0, 1000000, NULL, NULL, true,
			      "testing: refuse every Nth data chunk received (NACK, busy), as "
			      "a host does that cannot keep a chunk of a communicator not "
			      "ready there; its sender sends it again (0: off)" },
	[P_HB_MISSES] = { "hb_misses", "R2CCL_HB_MISSES", "--hb-misses", R2_PT_INT, "3", 1, 1000,
			  NULL, NULL, true,
			  "a rail to a peer silent (no traffic, no heartbeat) for this many "
			  "intervals is failed for that peer" },
	[P_HB_STALL_MISSES] = { "hb_stall_misses", "R2CCL_HB_STALL_MISSES", "--hb-stall-misses",
				R2_PT_INT, "2", 0, 1000, NULL, NULL, true,
				"a rail to a peer with data outstanding and nothing heard back "
				"(no acknowledgement, no heartbeat) for this many intervals, while "
				"the peer is heard on another rail, is failed for that peer: a "
				"send stall (0: off; only hb_misses)" },
	[P_RECOVER_STABLE_MS] = { "recover_stable_ms", "R2CCL_RECOVER_STABLE_MS",
				  "--recover-stable-ms", R2_PT_INT, "2000", 0, 86400000, NULL,
				  "ms", true,
				  "a failed rail rejoins after being up and healthy this long" },
	[P_PEER_TIMEOUT_MS] = { "peer_timeout_ms", "R2CCL_PEER_TIMEOUT_MS", "--peer-timeout-ms",
				R2_PT_INT, "5000", 10, 86400000, NULL, "ms", true,
				"a peer daemon with no usable rail this long breaks its "
				"communicators (every rank gets an error)" },
	[P_DEGRADED_PCT] = { "degraded_pct", "R2CCL_DEGRADED_PCT", "--degraded-pct", R2_PT_INT,
			     "40", 0, 95, NULL, "%", true,
			     "throughput monitor: a path delivering less than this percentage "
			     "of the best path while it has work queued is slow; its NIC is "
			     "planned degraded (0: off)" },
	/* transports per rail (docs/transports.md) */
	[P_TRANSPORT] = { "transport", "R2CCL_TRANSPORT", "--transport", R2_PT_ENUM, "auto", 0, 0,
			  "auto|tcp", NULL, false,
			  "rail transport: auto (verbs where the NIC has an RDMA port, else "
			  "tcp) or tcp on every rail" },
	[P_IB_HCA] = { "ib_hca", "R2CCL_IB_HCA", "--ib-hca", R2_PT_STRING, "", 0, 0, NULL, NULL,
		       false, "RDMA devices the verbs transport may use, NCCL filter syntax "
		       "(mlx5_0:1, ^mlx5_2; empty: any)" },
	[P_IB_TIMEOUT] = { "ib_timeout", "R2CCL_IB_TIMEOUT", "--ib-timeout", R2_PT_INT, "14", 1,
			   31, NULL, NULL, false,
			   "verbs: local ACK timeout exponent (4.096 us << N per try)" },
	[P_IB_RETRY_CNT] = { "ib_retry_cnt", "R2CCL_IB_RETRY_CNT", "--ib-retry-cnt", R2_PT_INT,
			     "7", 1, 7, NULL, NULL, false,
			     "verbs: transport retries before a send fails its connection" },
	[P_IB_QPS_PER_CONN] = { "ib_qps_per_conn", "R2CCL_IB_QPS_PER_CONN", "--ib-qps-per-conn",
				R2_PT_INT, "0", 0, 16, NULL, NULL, false,
				"verbs: RC queue pairs per peer per rail (0: tcp_streams)" },
	[P_IB_TC] = { "ib_tc", "R2CCL_IB_TC", "--ib-tc", R2_PT_INT, "0", 0, 255, NULL, NULL, false,
		      "verbs: traffic class of every QP (set by the daemon, never by a client)" },
	[P_IB_SL] = { "ib_sl", "R2CCL_IB_SL", "--ib-sl", R2_PT_INT, "0", 0, 15, NULL, NULL, false,
		      "verbs: service level of every QP" },
	[P_IB_GID_INDEX] = { "ib_gid_index", "R2CCL_IB_GID_INDEX", "--ib-gid-index", R2_PT_INT,
			     "-1", -1, 65535, NULL, NULL, false,
			     "verbs: GID table index of every QP (-1: RoCE v2 with the rail's "
			     "IPv4 address, IB: 0)" },
	[P_IB_SLOT_SIZE] = { "ib_slot_size", "R2CCL_IB_SLOT_SIZE", "--ib-slot-size", R2_PT_INT,
			     "64K", 4096, 16 << 20, NULL, "bytes", false,
			     "verbs: receive/send slot size (a larger message is sent in "
			     "fragments of it; rounded up to 64 bytes)" },
	[P_IB_SRQ_DEPTH] = { "ib_srq_depth", "R2CCL_IB_SRQ_DEPTH", "--ib-srq-depth", R2_PT_INT,
			     "256", 16, 65536, NULL, NULL, false,
			     "verbs: receive slots of the shared receive queue per rail" },
	[P_IB_SQ_DEPTH] = { "ib_sq_depth", "R2CCL_IB_SQ_DEPTH", "--ib-sq-depth", R2_PT_INT,
			    "64", 4, 16384, NULL, NULL, false,
			    "verbs: send work requests per QP" },
	/* the GPU path (daemon/gpu/README.md); read at the first GPU registration
	 * (copy, blocks, split) or the first staged operation (stage_*) */
	[P_GPU_COPY] = { "gpu_copy", "R2CCL_GPU_COPY", "--gpu-copy", R2_PT_ENUM, "ce", 0, 0,
			 "ce|kernel", NULL, false,
			 "GPU copies of local collectives: ce (copy engines, cudaMemcpyAsync) "
			 "or kernel (a copy kernel, several outputs per launch)" },
	[P_GPU_BLOCKS] = { "gpu_blocks", "R2CCL_GPU_BLOCKS", "--gpu-blocks", R2_PT_INT, "0", 0,
			   65535, NULL, NULL, false,
			   "thread blocks per reduction/copy kernel launch (0: 2 per SM)" },
	[P_GPU_SPLIT_MIN] = { "gpu_split_min", "R2CCL_GPU_SPLIT_MIN", "--gpu-split-min",
			      R2_PT_INT, "256K", 0, I64MAX, NULL, "bytes", false,
			      "a local reduction from this size is spread over every GPU "
			      "holding an output, in contiguous slices" },
	[P_GPU_STAGE_CACHE] = { "gpu_stage_cache", "R2CCL_GPU_STAGE_CACHE", "--gpu-stage-cache",
				R2_PT_INT, "8G", 0, I64MAX, NULL, "bytes", false,
				"pinned host staging buffers (GPU buffers across hosts) kept "
				"for reuse, at most this many bytes" },
	[P_GPU_STAGE_PIECES] = { "gpu_stage_pieces", "R2CCL_GPU_STAGE_PIECES",
				 "--gpu-stage-pieces", R2_PT_BOOL, "1", 0, 0, NULL, NULL, false,
				 "stage a large AllReduce of one local rank in 4 MiB slices, the "
				 "rail phase overlapping the copies (0: one copy each way)" },
	[P_GPU_LEGACY_IPC] = { "gpu_legacy_ipc", "R2CCL_GPU_LEGACY_IPC", "--gpu-legacy-ipc",
			       R2_PT_ENUM, "gpu-access", 0, 0, "allow|same-pid|gpu-access|deny",
			       NULL, true,
			       "legacy CUDA IPC handles (cudaMalloc memory) a client registers: "
			       "gpu-access (a handle from a client that passed the GPU's device "
			       "file with it, on a GPU only the client's user has processes on; "
			       "or one same-pid opens), same-pid (only a handle its own process "
			       "exported), deny (cuMem fds only; libnccl stages the rest) or allow "
			       "(any; docs/security.md)" },
	/* caps (docs/security.md); "0" is sized to the host at start-up */
	[P_MAX_SESSIONS_PER_UID] = { "max_sessions_per_uid", "R2CCL_MAX_SESSIONS_PER_UID",
				     "--max-sessions-per-uid", R2_PT_INT, "0", 0, 1 << 20, NULL,
				     NULL, true,
				     "sessions of one uid (0: 16 per CPU, at least 64; root "
				     "is not capped)" },
	[P_MAX_PREHELLO] = { "max_prehello", "R2CCL_MAX_PREHELLO", "--max-prehello", R2_PT_INT,
			     "64", 2, 1 << 16, NULL, NULL, true,
			     "connections that have not said hello, all uids (1/8 of them "
			     "kept for root)" },
	[P_MAX_PREHELLO_PER_UID] = { "max_prehello_per_uid", "R2CCL_MAX_PREHELLO_PER_UID",
				     "--max-prehello-per-uid", R2_PT_INT, "8", 1, 1 << 16, NULL,
				     NULL, true, "connections of one uid that have not said hello" },
	[P_HELLO_TIMEOUT_MS] = { "hello_timeout_ms", "R2CCL_HELLO_TIMEOUT_MS",
				 "--hello-timeout-ms", R2_PT_INT, "3000", 100, 600000, NULL, "ms",
				 true, "a connection that has not said hello by then is closed" },
	[P_MAX_FRAME_PREHELLO] = { "max_frame_prehello", "R2CCL_MAX_FRAME_PREHELLO",
				   "--max-frame-prehello", R2_PT_INT, "4K", 512, 1 << 20, NULL,
				   "bytes", false, "largest control frame accepted before hello" },
	[P_MAX_COMMS] = { "max_comms", "R2CCL_MAX_COMMS", "--max-comms", R2_PT_INT, "0", 0,
			  65535, NULL, NULL, true,
			  "communicators of all uids, each with an executor thread (0: 32 per "
			  "CPU, 256 to 4096)" },
	[P_MAX_COMMS_PER_UID] = { "max_comms_per_uid", "R2CCL_MAX_COMMS_PER_UID",
				  "--max-comms-per-uid", R2_PT_INT, "0", 0, 65535, NULL, NULL,
				  true, "communicators one uid owns (0: 8 per CPU, at least 64)" },
	[P_MAX_PENDING_OPS] = { "max_pending_ops", "R2CCL_MAX_PENDING_OPS",
				"--max-pending-ops", R2_PT_INT, "1024", 16, 1 << 20, NULL, NULL,
				true,
				"operations one rank may queue that its peers have not matched "
				"yet" },
	[P_MAX_REGS] = { "max_regs", "R2CCL_MAX_REGS", "--max-regs", R2_PT_INT, "0", 0, 1 << 24,
			 NULL, NULL, true,
			 "memory registrations of all uids, each an open fd (0: half of the "
			 "fd limit)" },
	[P_MAX_REGS_PER_UID] = { "max_regs_per_uid", "R2CCL_MAX_REGS_PER_UID",
				 "--max-regs-per-uid", R2_PT_INT, "0", 0, 1 << 24, NULL, NULL, true,
				 "memory registrations of one uid (0: an eighth of the fd limit)" },
	[P_MAX_MEM] = { "max_mem", "R2CCL_MAX_MEM", "--max-mem", R2_PT_INT, "0", 0, I64MAX, NULL,
			"bytes", true,
			"host memory registered by all uids (0: 3/4 of the RAM); sparse "
			"memfds are refused" },
	[P_MAX_MEM_PER_UID] = { "max_mem_per_uid", "R2CCL_MAX_MEM_PER_UID", "--max-mem-per-uid",
				R2_PT_INT, "0", 0, I64MAX, NULL, "bytes", true,
				"host memory registered by one uid (0: half of the RAM)" },
	[P_MAX_REQ_RATE] = { "max_req_rate", "R2CCL_MAX_REQ_RATE", "--max-req-rate", R2_PT_INT,
			     "2000", 10, 1 << 24, NULL, "1/s", true,
			     "control requests per second of one session; past it the daemon "
			     "reads that session more slowly" },
	[P_METRICS_LISTEN] = { "metrics_listen", "R2CCL_METRICS_LISTEN", "--metrics-listen",
			       R2_PT_STRING, "", 0, 0, NULL, NULL, false,
			       "serve Prometheus metrics at http://ADDR:PORT/metrics (IPv4; PORT "
			       "alone: 127.0.0.1:PORT; empty: off)" },
	[P_METRICS_TEXTFILE] = { "metrics_textfile", "R2CCL_METRICS_TEXTFILE",
				 "--metrics-textfile", R2_PT_STRING, "", 0, 0, NULL, NULL, false,
				 "write the metrics to this file every 5 s, atomically (for "
				 "node_exporter's textfile collector, *.prom; empty: off)" },
	/* the peer port: daemons of one cluster prove a shared key to each
	 * other (docs/security.md); the caps bound what strangers on a rail
	 * network can make a daemon hold */
	[P_PEER_AUTH] = { "peer_auth", "R2CCL_PEER_AUTH", "--peer-auth", R2_PT_ENUM, "on", 0, 0,
			  "on|off", NULL, false,
			  "daemons authenticate each other's rail connections with the cluster "
			  "key (HMAC-SHA256 challenge-response both ways); off: no "
			  "authentication, any host on a rail network may connect (a warning at "
			  "start)" },
	[P_CLUSTER_KEY_FILE] = { "cluster_key_file", "R2CCL_CLUSTER_KEY_FILE",
				 "--cluster-key-file", R2_PT_STRING,
				 R2CCL_SYSCONFDIR "/r2ccl/cluster.key", 0, 0, NULL, NULL, false,
				 "the cluster key, the same file on every host (16 to 4096 bytes, "
				 "e.g. 32 random bytes in base64; mode 0600: a file group or "
				 "others may read is refused); missing with peer_auth = on: the "
				 "TCP rails refuse every peer daemon, one-host communicators "
				 "still work" },
	[P_PEER_MAX_PREHELLO] = { "peer_max_prehello", "R2CCL_PEER_MAX_PREHELLO",
				  "--peer-max-prehello", R2_PT_INT, "256", 8, 65536, NULL, NULL,
				  false,
				  "connections per rail that have not finished their hello (more "
				  "are closed at once)" },
	[P_PEER_MAX_PREHELLO_PER_ADDR] = { "peer_max_prehello_per_addr",
					   "R2CCL_PEER_MAX_PREHELLO_PER_ADDR",
					   "--peer-max-prehello-per-addr", R2_PT_INT, "16", 1, 4096,
					   NULL, NULL, false,
					   "the same from one source address" },
	[P_PEER_HELLO_TIMEOUT_MS] = { "peer_hello_timeout_ms", "R2CCL_PEER_HELLO_TIMEOUT_MS",
				      "--peer-hello-timeout-ms", R2_PT_INT, "3000", 100, 60000,
				      NULL, "ms", false,
				      "an accepted rail connection whose hello is not done by then "
				      "is closed" },
	/* tenants (docs/tenancy.md): the scheduler of the rails' send path */
	[P_SCHED] = { "sched", "R2CCL_SCHED", "--sched", R2_PT_BOOL, "1", 0, 0, NULL, NULL, true,
		      "schedule the tenants' chunks on every rail (weights, rates, the latency "
		      "class); 0: chunks go to the rails in the order posted" },
	[P_SCHED_WINDOW] = { "sched_window", "R2CCL_SCHED_WINDOW", "--sched-window", R2_PT_INT,
			     "4M", 64 << 10, 1ll << 32, NULL, "bytes", true,
			     "bytes per rail and peer handed to the transport and not yet "
			     "written; the rest waits in the tenants' queues (smaller: a latency "
			     "chunk waits less, larger: more in flight)" },
	[P_SCHED_MOVE] = { "sched_move", "R2CCL_SCHED_MOVE", "--sched-move", R2_PT_BOOL, "1", 0, 0,
			   NULL, NULL, true,
			   "a rail with nothing owed queued takes a waiting chunk to the same "
			   "peer from another healthy rail of the same transport (tcp), so a "
			   "tenant whose chunks for one rail ran out keeps its weight's share "
			   "(0: every chunk leaves on the rail its plan gave it)" },
	[P_SCHED_QUANTUM] = { "sched_quantum", "R2CCL_SCHED_QUANTUM", "--sched-quantum",
			      R2_PT_INT, "1M", 4096, 1ll << 30, NULL, "bytes", true,
			      "the fair queueing's grain: a tenant behind its weight's share "
			      "catches up at most 16 x this many bytes per unit of weight" },
	[P_SCHED_PRIO_RUN] = { "sched_prio_run", "R2CCL_SCHED_PRIO_RUN", "--sched-prio-run",
			       R2_PT_INT, "4M", 4096, 1ll << 34, NULL, "bytes", true,
			       "latency-class bytes sent in a row on a rail while bulk chunks "
			       "wait, before one bulk chunk goes (bulk is never starved)" },
};
