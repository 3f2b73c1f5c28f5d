/* SPDX-License-Identifier: MIT */
/* r2ccld: the R2CCL daemon, one per host. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "control/control.h"
#include "engine/comm.h"
#include "config.h"
#include "base/daemon.h"
#include "log.h"
#include "net/rails.h"
#include "net/tenants.h"
#include "gpu/gpu.h"
#include "util.h"

static int discover(struct r2d *d)
{
	char err[512] = "";
	const char *xml = r2_param_str(&d->params, P_TOPOLOGY_XML);
	const char *rails = r2_param_str(&d->params, P_RAILS);
	int r, nsel;

	r = r2_topology_discover(&d->topo, xml && xml[0] ? xml : NULL, err, sizeof(err));
	if (r < 0) {
		log_err("topology discovery failed: %s", err[0] ? err : strerror(-r));
		return r;
	}
	nsel = r2_topology_select(&d->topo, rails);
	if (nsel < 0) {
		log_err("rails filter '%s' is not valid (NCCL syntax: eth, ^eth2, =eth0)", rails);
		return nsel;
	}
	log_info("topology%s: %d CPUs, %d cores, %d sockets, %d NUMA nodes, %d GPUs, %d NICs",
		 d->topo.from_xml ? " (from XML)" : "", d->topo.ncpus, d->topo.ncores,
		 d->topo.nsockets, d->topo.nnuma, d->topo.ngpus, d->topo.nnics);
	for (int i = 0; i < d->topo.nnics; i++) {
		const struct r2_topo_nic *n = &d->topo.nics[i];
		log_info("  nic %-16s %-8s %-4s numa %-2d %6llu Mb/s %s%s (%s)", n->name,
			 r2_nic_kind_name(n->kind), n->up ? "up" : "down", n->numa_node,
			 (unsigned long long)n->speed_mbps, n->addr, n->selected ? " [rail]" : "",
			 n->why ? n->why : "");
	}
	if (nsel == 0)
		log_warn("no NIC selected as a rail (filter '%s'): this daemon serves local "
			 "communicators only", rails);
	return 0;
}

/* What r2d_config_load made: the parameters and the tenants' queue (which
 * r2d_rails_stop frees too, when the rails ran). */
static void config_free(struct r2d *d)
{
	r2d_tenants_free(d);
	r2_params_free(&d->params);
}

int main(int argc, char **argv)
{
	struct r2d d;
	char err[512] = "";
	int r;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
			r2d_usage(stdout);
			return 0;
		}
		if (!strncmp(argv[i], "--print-params=", 15)) {
			if (r2d_print_params(stdout, argv[i] + 15) == 0)
				return 0;
			fprintf(stderr, "r2ccld: --print-params=help|conf|markdown\n");
			return 2;
		}
		if (!strcmp(argv[i], "-V") || !strcmp(argv[i], "--version")) {
			printf("r2ccld %s\n", R2CCL_VERSION);
			return 0;
		}
	}
	bool check_only = false;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--check-config")) {
			check_only = true;
			memmove(&argv[i], &argv[i + 1], sizeof(char *) * (size_t)(argc - i));
			argc--;
			i--;
		}
	}

	memset(&d, 0, sizeof(d));
	d.listen_fd = -1;
	pthread_mutex_init(&d.lock, NULL);
	signal(SIGPIPE, SIG_IGN);
	r2d_fatal_signals_install();

	r = r2d_config_load(&d, argc, argv, err, sizeof(err));
	if (r < 0) {
		log_err("configuration error: %s", err);
		config_free(&d);
		return 2;
	}
	if (check_only) { /* to stdout, without log prefixes: `| grep socket` */
		r2d_config_print(&d, stdout);
		config_free(&d);
		return 0;
	}
	log_info("r2ccld %s starting (pid %d)", R2CCL_VERSION, (int)getpid());
	r2d_config_log(&d);
	gethostname(d.hostname, sizeof(d.hostname) - 1);
	if (getrandom(&d.host_id, sizeof(d.host_id), 0) != sizeof(d.host_id))
		d.host_id = ((uint64_t)getpid() << 32) ^ r2_now_ns();
	d.next_session_id = 1;
	d.next_comm_id = 1;
	d.start_us = r2_now_us();
	d.exit_code = 0;

	r = discover(&d);
	if (r < 0)
		goto out_params;

	r = r2d_engine_start(&d);
	if (r < 0) {
		log_err("cannot start the engine: %s", strerror(-r));
		goto out_params;
	}
	r = r2d_server_start(&d);
	if (r < 0)
		goto out_engine;
	r = r2d_rails_start(&d);
	if (r < 0)
		log_warn("rails: %s; serving local communicators only", strerror(-r));

	/* after every start-up thread: they keep SCHED_OTHER; the ones this
	 * thread starts later are made with r2_thread_create */
	if (r2_param_bool(&d.params, P_CONTROL_BATCH) && (r = r2_sched_batch()) < 0)
		log_warn("control thread: SCHED_BATCH: %s", strerror(-r));
	uv_run(d.loop, UV_RUN_DEFAULT);

	/* every session is closed (or a second signal came): the GPU worker
	 * ends first (its jobs hold communicators the engine's stop frees),
	 * then the dispatcher; then free the rest */
	r2_gpu_quiesce();
	r2d_engine_stop(&d);
	r2d_server_stop(&d);
	r2d_rails_stop(&d);
	r2d_orphans_free(&d);
	r2_gpu_shutdown();
	r = d.exit_code;
	goto out_params;
out_engine:
	r2d_engine_stop(&d);
out_params:
	config_free(&d);
	pthread_mutex_destroy(&d.lock);
	if (r < 0)
		return 1;
	log_info("r2ccld stopped");
	return r;
}
