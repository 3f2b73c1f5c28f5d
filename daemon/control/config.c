/* SPDX-License-Identifier: MIT */
/*
 * r2ccld's parameters: three sources (command line > R2CCL_* environment >
 * configuration file > default) over one typed table (config_params.c),
 * the caps they size, the [tenants] section, the parameter text (--help,
 * the example configuration, operations.md) and reloads.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <pthread.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "control/control.h"
#include "config.h"
#include "base/daemon.h"
#include "net/health.h"
#include "net/rails.h"
#include "net/tenants.h"
#include "log.h"
#include "util.h"

/* The caps in force: the parameters with "0" sized to this host. */
void r2d_caps_update(struct r2d *d)
{
	struct r2d_caps *k = &d->caps;
	const struct r2_params *p = &d->params;
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	uint64_t ram = (uint64_t)sysconf(_SC_PHYS_PAGES) * (uint64_t)sysconf(_SC_PAGESIZE);
	struct rlimit rl;
	uint64_t nofile = 1024;

	if (ncpu < 1)
		ncpu = 1;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
		nofile = rl.rlim_cur;
	else if (rl.rlim_cur == RLIM_INFINITY)
		nofile = 1 << 20;
#define AUTO(P, v) (r2_param_int(p, P) ? (uint64_t)r2_param_int(p, P) : (uint64_t)(v))
	pthread_mutex_lock(&d->lock);
	k->sessions = (uint32_t)r2_param_int(p, P_MAX_SESSIONS);
	k->sessions_per_uid = (uint32_t)R2_MIN(AUTO(P_MAX_SESSIONS_PER_UID,
						    R2_MAX(64, 16 * ncpu)), k->sessions);
	k->prehello = (uint32_t)r2_param_int(p, P_MAX_PREHELLO);
	k->prehello_root = R2_MAX(1, k->prehello / 8);
	k->prehello_per_uid = (uint32_t)r2_param_int(p, P_MAX_PREHELLO_PER_UID);
	k->hello_timeout_ms = (uint32_t)r2_param_int(p, P_HELLO_TIMEOUT_MS);
	k->prehello_frame = (uint32_t)r2_param_int(p, P_MAX_FRAME_PREHELLO);
	k->comms = (uint32_t)AUTO(P_MAX_COMMS, R2_MIN(4096, R2_MAX(256, 32 * ncpu)));
	k->comms_per_uid = (uint32_t)R2_MIN(AUTO(P_MAX_COMMS_PER_UID, R2_MAX(64, 8 * ncpu)),
					    k->comms);
	k->pending_ops = (uint32_t)r2_param_int(p, P_MAX_PENDING_OPS);
	k->regs = (uint32_t)AUTO(P_MAX_REGS, nofile / 2);
	k->regs_per_uid = (uint32_t)R2_MIN(AUTO(P_MAX_REGS_PER_UID, R2_MAX(64, nofile / 8)),
					   k->regs);
	k->mem = AUTO(P_MAX_MEM, ram / 4 * 3);
	k->mem_per_uid = R2_MIN(AUTO(P_MAX_MEM_PER_UID, ram / 2), k->mem);
	k->req_rate = (uint32_t)r2_param_int(p, P_MAX_REQ_RATE);
	pthread_mutex_unlock(&d->lock);
#undef AUTO
}

/* ---- tenants: the [tenants] section of the configuration file ----
 * After the parameters, the file may hold a section
 *   [tenants]
 *   NAME = cgroup=/PATH weight=W rate=R class=bulk|latency [burst=B]
 *          [max_sessions=N max_comms=N max_regs=N max_mem=SIZE]
 * one tenant per line (docs/tenancy.md); NAME "default" sets the policy of
 * the cgroups no entry matches. Read at start-up and on SIGHUP (the file's
 * entries replace what `r2cclctl tenants set` changed; entries no longer in
 * the file stay as they are until a restart). */

static void tenants_configure(struct r2d *d)
{
	r2d_tenants_configure(d, r2_param_bool(&d->params, P_SCHED),
			      (uint32_t)r2_param_int(&d->params, P_SCHED_QUANTUM),
			      (uint64_t)r2_param_int(&d->params, P_SCHED_PRIO_RUN),
			      (uint64_t)r2_param_int(&d->params, P_SCHED_WINDOW),
			      r2_param_bool(&d->params, P_SCHED_MOVE));
}

/* Parses the [tenants] section of path into pols (check only), then sets
 * them when apply. -EINVAL with "path:line: reason". */
static int tenants_load(struct r2d *d, const char *path, bool apply, char *err, size_t errlen)
{
	struct r2_tenant_policy *pols = NULL;
	size_t cap = 0, npol = 0, lcap = 0;
	char *line = NULL;
	bool in = false;
	unsigned lineno = 0;
	int r = 0;
	FILE *f = fopen(path, "re");

	if (!f)
		return errno == ENOENT ? 0 : -errno;
	while (getline(&line, &lcap, f) >= 0) {
		char *s = line, *e, *eq, msg[256];
		lineno++;
		if ((e = strchr(s, '#')))
			*e = 0;
		while (*s == ' ' || *s == '\t')
			s++;
		e = s + strlen(s);
		while (e > s && (e[-1] == '\n' || e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\r'))
			*--e = 0;
		if (!*s)
			continue;
		if (*s == '[') {
			in = !strcmp(s, "[tenants]");
			if (!in) {
				snprintf(err, errlen, "%s:%u: unknown section %.64s", path, lineno, s);
				r = -EINVAL;
				break;
			}
			continue;
		}
		if (!in)
			continue;
		if (!(eq = strchr(s, '='))) {
			snprintf(err, errlen, "%s:%u: expected \"NAME = cgroup=/path weight=...\"",
				 path, lineno);
			r = -EINVAL;
			break;
		}
		*eq = 0;
		for (e = eq; e > s && (e[-1] == ' ' || e[-1] == '\t');)
			*--e = 0;
		if (!*s || strlen(s) >= sizeof(pols->name) || strchr(s, ' ')) {
			snprintf(err, errlen, "%s:%u: a tenant needs a name (1-63 characters, no "
					      "spaces)",
				 path, lineno);
			r = -EINVAL;
			break;
		}
		if (R2_GROW(pols, cap, npol, 8) < 0) {
			r = -ENOMEM;
			break;
		}
		r2_tenant_policy_default(&pols[npol], s);
		if (r2_tenant_policy_parse(&pols[npol], eq + 1, msg, sizeof(msg)) < 0) {
			snprintf(err, errlen, "%s:%u: tenant %s: %s", path, lineno, s, msg);
			r = -EINVAL;
			break;
		}
		if (strcmp(s, "default") && !pols[npol].cgroup[0]) {
			snprintf(err, errlen, "%s:%u: tenant %s: cgroup=/path missing", path, lineno,
				 s);
			r = -EINVAL;
			break;
		}
		npol++;
	}
	fclose(f);
	free(line);
	for (size_t i = 0; r == 0 && apply && i < npol; i++) {
		if (!strcmp(pols[i].name, "default"))
			pols[i].cgroup[0] = 0;
		if (r2d_tenants_policy_set(d, &pols[i]) < 0) {
			snprintf(err, errlen, "%s: more than %d tenants", path,
				 R2_SCHED_MAX_TENANTS - 2);
			r = -ENOSPC;
		}
	}
	if (r == 0 && apply && npol)
		log_info("tenants: %zu from %s", npol, path);
	free(pols);
	return r;
}

/* The example configuration's [tenants] section (commented out). */
static void tenants_print_conf(FILE *f)
{
	fputs("\n"
	      "# Tenants (docs/tenancy.md): after the parameters, one line per tenant,\n"
	      "#   NAME = cgroup=/PATH weight=W rate=R class=bulk|latency [burst=BYTES]\n"
	      "#          [max_sessions=N] [max_comms=N] [max_regs=N] [max_mem=SIZE]\n"
	      "#          [max_req_rate=N] [max_pending_ops=N] [max_proxy=SIZE]\n"
	      "# A client's tenant is the entry whose cgroup v2 path is the longest prefix\n"
	      "# of its own (whole path components); \"default\" is the policy of every\n"
	      "# cgroup no entry matches (each such cgroup is a tenant of its own).\n"
	      "# weight: share of the rails under contention (1-10000, default 1); rate:\n"
	      "# bits/s leaving this host, all rails together (K, M, G, T are decimal:\n"
	      "# 300M = 300,000,000 bit/s; 0: no cap), burst 2% of one second's bytes\n"
	      "# unless set; class: latency chunks go ahead of bulk ones (sched_prio_run\n"
	      "# bounds the wait of bulk). max_*: quotas of the tenant, all its uids\n"
	      "# together (0: only the per-uid caps); max_req_rate (control requests per\n"
	      "# second, its sessions are read more slowly past it), max_pending_ops\n"
	      "# (operations submitted, not completed) and max_proxy (proxy buffer bytes\n"
	      "# its chunks hold; they wait for their own past it) are the tenant's\n"
	      "# own (0: none). Changed at run time with\n"
	      "# \"r2cclctl tenants set NAME weight=W rate=R class=C\" (root); SIGHUP\n"
	      "# reads this section again.\n"
	      "#\n"
	      "# [tenants]\n"
	      "# default = weight=1 class=bulk\n"
	      "# training = cgroup=/system.slice/train.service weight=3 class=bulk\n"
	      "# decode = cgroup=/kubepods/burstable weight=1 rate=2G class=latency max_comms=64\n"
	      "# loader = cgroup=/user.slice/loader.slice weight=1 rate=300M max_mem=16G\n"
	      "# batch = cgroup=/user.slice/batch.slice max_req_rate=200 max_pending_ops=256 "
	      "max_proxy=64M\n",
	      f);
}

/* Start-up: the table, the parameters, the file's section. */
static int tenants_start(struct r2d *d, const char *cfg, char *err, size_t errlen)
{
	int r = r2d_tenants_init(d);

	if (r < 0)
		return r;
	tenants_configure(d);
	return cfg && cfg[0] ? tenants_load(d, cfg, true, err, errlen) : 0;
}

/* ---- parameter text: --help, the example configuration, operations.md ----
 * One source for all three (r2ccld --print-params=help|conf|markdown;
 * `ninja -C build regen-params` rewrites the committed files, a unit test
 * fails when they drift). */

static void print_help_lines(FILE *f)
{
	for (int i = 0; i < P_COUNT; i++) {
		const struct r2_param_def *p = &r2d_param_defs[i];
		char opt[64];
		snprintf(opt, sizeof(opt), "%s%s", p->cli,
			 p->type == R2_PT_BOOL ? "" : " VALUE");
		fprintf(f, "  %-30s %s [%s, default %s%s%s]\n", opt, p->help, p->env,
			p->defval[0] ? p->defval : "\"\"", p->unit ? " " : "",
			p->unit ? p->unit : "");
	}
}

/* text as "# " comment lines of at most 78 columns */
static void print_comment(FILE *f, const char *text)
{
	const char *p = text;

	while (*p) {
		size_t n = strlen(p), cut = n;
		if (n > 76) {
			cut = 76;
			while (cut > 0 && p[cut] != ' ')
				cut--;
			if (cut == 0)
				cut = 76;
		}
		fprintf(f, "# %.*s\n", (int)cut, p);
		p += cut;
		while (*p == ' ')
			p++;
	}
}

static void print_conf(FILE *f)
{
	fputs("# SPDX-License-Identifier: MIT\n"
	      "#\n"
	      "# Example configuration of r2ccld: every parameter, commented out, with its\n"
	      "# default. Copy it to /etc/r2ccl/r2ccld.conf and uncomment what you change.\n"
	      "# Format: \"key = value\" per line, '#' starts a comment. A key may also be\n"
	      "# written as its environment name (R2CCL_RAILS). Unknown keys and malformed\n"
	      "# values are errors: r2ccld refuses to start rather than run with a default\n"
	      "# you did not mean.\n"
	      "#\n"
	      "# Precedence: command line > R2CCL_* environment > this file > default.\n"
	      "# \"r2ccld --check-config\" prints every value with its source; so does\n"
	      "# \"r2cclctl -v status\" for the running daemon. Keys marked (reload) take a\n"
	      "# new value on \"systemctl reload r2ccld\" (SIGHUP); a change to the others\n"
	      "# is reported (log, r2cclctl events) and applied at the next restart.\n"
	      "# Sizes accept K, M, G, T (binary) suffixes. docs/operations.md explains\n"
	      "# each parameter further.\n"
	      "#\n"
	      "# Generated by \"r2ccld --print-params=conf\" (ninja -C build regen-params);\n"
	      "# edit the help text in daemon/control/config_params.c, not here.\n",
	      f);
	for (int i = 0; i < P_COUNT; i++) {
		const struct r2_param_def *p = &r2d_param_defs[i];
		char text[1024];

		if (i == P_CONFIG)
			continue; /* command line or environment only */
		snprintf(text, sizeof(text), "%s%s%s%s%s%s%s", p->help,
			 p->enum_values ? "; one of " : "", p->enum_values ? p->enum_values : "",
			 p->unit || p->reloadable ? " (" : "", p->unit ? p->unit : "",
			 p->unit && p->reloadable ? ", " : "",
			 p->reloadable ? "reload)" : p->unit ? ")" : "");
		fputs("\n", f);
		print_comment(f, text);
		fprintf(f, "# %s =%s%s\n", p->name, p->defval[0] ? " " : "", p->defval);
	}
	tenants_print_conf(f);
}

/* s with '|' escaped for a markdown table cell */
static void md_cell(FILE *f, const char *s)
{
	for (; *s; s++) {
		if (*s == '|')
			fputc('\\', f);
		fputc(*s, f);
	}
}

static void print_markdown(FILE *f)
{
	fputs("<!-- generated by r2ccld --print-params=markdown (ninja -C build regen-params) -->\n"
	      "| Key | Environment | Option | Default | Reload | Meaning |\n"
	      "|---|---|---|---|---|---|\n",
	      f);
	for (int i = 0; i < P_COUNT; i++) {
		const struct r2_param_def *p = &r2d_param_defs[i];

		fprintf(f, "| `%s` | `%s` | `%s` | ", p->name, p->env, p->cli);
		if (p->defval[0])
			fprintf(f, "`%s`%s%s", p->defval, p->unit ? " " : "",
				p->unit ? p->unit : "");
		else
			fputs("(empty)", f);
		fprintf(f, " | %s | ", p->reloadable ? "yes" : "no");
		md_cell(f, p->help);
		if (p->enum_values) {
			fputs("; one of `", f);
			md_cell(f, p->enum_values);
			fputc('`', f);
		}
		fputs(" |\n", f);
	}
}

int r2d_print_params(FILE *f, const char *format)
{
	if (!strcmp(format, "help"))
		print_help_lines(f);
	else if (!strcmp(format, "conf"))
		print_conf(f);
	else if (!strcmp(format, "markdown"))
		print_markdown(f);
	else
		return -EINVAL;
	return 0;
}

void r2d_usage(FILE *f)
{
	fprintf(f, "Usage: r2ccld [OPTION...]\n"
		   "R2CCL daemon: runs collectives for the processes of this host.\n\n"
		   "  -h, --help          this text\n"
		   "  -V, --version       print the version\n"
		   "      --check-config  print the configuration (to stdout) and exit\n"
		   "      --print-params=help|conf|markdown\n"
		   "                      print the parameters as in this text, as an example\n"
		   "                      configuration file, or as docs/operations.md's table\n");
	print_help_lines(f);
}

static void unknown_env(const char *name, void *arg)
{
	/* Clients share the prefix (R2CCL_UID_FILE...): not an error here. */
	(void)arg;
	log_debug("environment variable %s is not a daemon parameter; ignored", name);
}

/* Applies the command line. Returns 0, 1 for --help/--version handled, or -EINVAL. */
static int apply_cli(struct r2d *d, int argc, char **argv, bool apply, char *err,
		     size_t errlen)
{
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		char key[128];
		const char *val = NULL;
		int idx, r;

		if (!strncmp(a, "--", 2) && strchr(a, '=')) {
			size_t kl = (size_t)(strchr(a, '=') - a);
			if (kl >= sizeof(key)) {
				snprintf(err, errlen, "option too long: %s", a);
				return -EINVAL;
			}
			memcpy(key, a, kl);
			key[kl] = 0;
			val = strchr(a, '=') + 1;
		} else if (!strncmp(a, "--", 2) && strlen(a) < sizeof(key)) {
			strcpy(key, a);
		} else {
			snprintf(err, errlen, "unexpected argument '%s' (see --help)", a);
			return -EINVAL;
		}
		idx = r2_params_find(&d->params, key);
		if (idx < 0) {
			snprintf(err, errlen, "unknown option '%s' (see --help)", key);
			return -EINVAL;
		}
		if (!val) {
			if (d->params.defs[idx].type == R2_PT_BOOL) {
				val = "1";
			} else if (i + 1 < argc) {
				val = argv[++i];
			} else {
				snprintf(err, errlen, "option '%s' needs a value", key);
				return -EINVAL;
			}
		}
		if (!apply && idx != P_CONFIG)
			continue;
		r = r2_params_set(&d->params, key, val, R2_PS_CLI, err, errlen);
		if (r < 0)
			return r;
	}
	return 0;
}

int r2d_config_load(struct r2d *d, int argc, char **argv, char *err, size_t errlen)
{
	extern char **environ;
	const char *cfg;
	int r, lvl;
	bool explicit_cfg;

	r = r2_params_init(&d->params, r2d_param_defs, P_COUNT, err, errlen);
	if (r < 0)
		return r;
	/* Where is the file? --config wins, then R2CCL_CONFIG, then the default. */
	r = apply_cli(d, argc, argv, false, err, errlen);
	if (r < 0)
		return r;
	explicit_cfg = d->params.v[P_CONFIG].src == R2_PS_CLI;
	if (!explicit_cfg && getenv("R2CCL_CONFIG")) {
		r = r2_params_set(&d->params, "R2CCL_CONFIG", getenv("R2CCL_CONFIG"), R2_PS_ENV,
				  err, errlen);
		if (r < 0)
			return r;
		explicit_cfg = true;
	}
	cfg = r2_param_str(&d->params, P_CONFIG);
	if (cfg && cfg[0]) {
		r = r2_params_load_file(&d->params, cfg, err, errlen);
		if (r == -ENOENT && !explicit_cfg) {
			r = 0; /* the default file is optional */
		} else if (r == -ENOENT) {
			snprintf(err, errlen, "configuration file %s: %s", cfg, strerror(ENOENT));
			return r;
		} else if (r < 0) {
			return r;
		}
	}
	r = r2_params_load_env(&d->params, environ, unknown_env, NULL, err, errlen);
	if (r < 0)
		return r;
	r = apply_cli(d, argc, argv, true, err, errlen);
	if (r < 0)
		return r;
	if (r2_log_level_parse(r2_param_str(&d->params, P_LOG_LEVEL), &lvl) == 0)
		r2_log_set_level(lvl);
	d->systemd = r2_param_bool(&d->params, P_SYSTEMD);
	{
		const char *mode = r2_param_str(&d->params, P_SOCKET_MODE);
		char *end;
		long v = strtol(mode, &end, 8);
		if (!mode[0] || *end || v < 0 || v > 0777) {
			snprintf(err, errlen, "socket_mode: \"%s\" is not an octal mode (0000-0777)",
				 mode);
			return -EINVAL;
		}
		d->socket_mode = (unsigned)v;
	}
	r = r2d_peer_auth_check(d, err, errlen); /* a bad key file: refuse to start */
	if (r < 0)
		return r;
	r2d_caps_update(d);
	/* (the file's name again: loading the file replaced the parameters' strings) */
	return tenants_start(d, r2_param_str(&d->params, P_CONFIG), err, errlen);
}

static void log_line(const char *line, void *arg)
{
	(void)arg;
	log_info("  %s", line);
}

static void print_line(const char *line, void *arg)
{
	fprintf(arg, "%s\n", line);
}

void r2d_config_print(const struct r2d *d, FILE *f)
{
	fprintf(f, "configuration (file %s):\n", d->params.file ? d->params.file : "none");
	r2_params_dump(&d->params, print_line, f);
}

void r2d_config_log(const struct r2d *d)
{
	log_info("configuration (file %s):", d->params.file ? d->params.file : "none");
	r2_params_dump(&d->params, log_line, NULL);
}

/* Changes in the file to parameters SIGHUP cannot change: kept until a
 * restart, said in the log and in `r2cclctl events` (not silently). */
static void reload_report_kept(struct r2d *d, const struct r2_params *fresh)
{
	for (int i = 0; i < P_COUNT; i++) {
		char now[256], want[256];
		enum r2_param_source src = d->params.v[i].src;

		if (r2d_param_defs[i].reloadable || i == P_CONFIG || src == R2_PS_CLI ||
		    src == R2_PS_ENV)
			continue; /* the command line and environment keep precedence */
		r2_param_format(&d->params, i, now, sizeof(now));
		r2_param_format(fresh, i, want, sizeof(want));
		if (!strcmp(now, want))
			continue;
		r2d_health_event(d, 2, "config_kept", r2d_param_defs[i].name,
				 "the file's value %s is not applied until a restart "
				 "(not reloadable); running with %s",
				 want, now);
	}
}

int r2d_config_reload(struct r2d *d)
{
	struct r2_params fresh;
	char err[512];
	const char *cfg = r2_param_str(&d->params, P_CONFIG);
	int r, lvl;

	r = r2_params_init(&fresh, r2d_param_defs, P_COUNT, err, sizeof(err));
	if (r < 0)
		goto fail;
	if (cfg && cfg[0]) {
		r = r2_params_load_file(&fresh, cfg, err, sizeof(err));
		if (r < 0 && r != -ENOENT)
			goto fail_free;
	}
	/* Take reloadable values that came from the file; CLI/env keep precedence. */
	for (int i = 0; i < P_COUNT; i++) {
		char val[512];
		if (!r2d_param_defs[i].reloadable || fresh.v[i].src != R2_PS_FILE)
			continue;
		if (d->params.v[i].src == R2_PS_CLI || d->params.v[i].src == R2_PS_ENV)
			continue;
		r2_param_format(&fresh, i, val, sizeof(val));
		if (r2_params_set(&d->params, r2d_param_defs[i].name, val, R2_PS_RELOAD, err,
				  sizeof(err)) == 0)
			log_info("reload: %s = %s", r2d_param_defs[i].name, val);
	}
	reload_report_kept(d, &fresh);
	r2_params_free(&fresh);
	r2d_caps_update(d);
	tenants_configure(d);
	cfg = r2_param_str(&d->params, P_CONFIG);
	if (cfg && cfg[0] && tenants_load(d, cfg, true, err, sizeof(err)) < 0)
		log_err("reload: tenants: %s (the tenants are kept as they were)", err);
	if (r2_log_level_parse(r2_param_str(&d->params, P_LOG_LEVEL), &lvl) == 0)
		r2_log_set_level(lvl);
	return 0;
fail_free:
	r2_params_free(&fresh);
fail:
	log_err("reload failed, keeping the running configuration: %s", err);
	return r;
}
