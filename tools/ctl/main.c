// SPDX-License-Identifier: MIT
/*
 * r2cclctl - the operator CLI of r2ccld.
 *
 *   r2cclctl [--socket PATH] [--json] [--timeout MS] [-v] COMMAND [ARG]
 *
 * Talks to the daemon's control socket (proto/r2ccl.proto, framed by
 * common/framing.h): HELLO with control_only set, then one request and its
 * reply. Human output is aligned tables; --json prints one JSON object with
 * "schema_version": 1 (the stable contract, docs/operations.md). Each
 * section's columns are described once (columns.c) for both.
 *
 * Exit status: 0 ok, 1 failure (the daemon answered an error, protocol error,
 * timeout), 2 usage, 3 daemon not running, 4 permission denied.
 *
 * Strings from the daemon may come from other users (client names, tenants):
 * they are printed with control characters replaced (tables) or escaped
 * (JSON), never raw.
 *
 * This file: the arguments and the commands' table.
 */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctl.h"
#include "r2ccl.h"

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: r2cclctl [OPTION...] COMMAND [ARG]\n"
		"Query and control r2ccld, the R2CCL daemon of this host.\n"
		"\n"
		"Commands:\n"
		"  status            daemon, NICs, GPUs, sessions, communicators\n"
		"                    (-v: parameters and their sources)\n"
		"  sessions          client sessions\n"
		"  comms             communicators\n"
		"  nics              network interfaces and which are rails\n"
		"  tenants [-f]      tenants: policy, bytes, operations, queues, throttling,\n"
		"                    quota use (docs/tenancy.md); -f: again every --interval\n"
		"  tenants set NAME key=value...\n"
		"                    change a tenant's weight=, rate= (bit/s), class=\n"
		"                    (bulk|latency), burst=, max_*= now (root)\n"
		"  rails             rail health: state, measured bandwidth, errors\n"
		"  peers             peer hosts per rail: heartbeats\n"
		"  events [-f]       recent events: rail state changes, re-plans\n"
		"  top [COUNT]       live view every second: rails, communicators\n"
		"  rebalance [COMM]  re-plan communicator COMM now (every one if omitted)\n"
		"  drain NIC         move traffic off NIC (maintenance)\n"
		"  undrain NIC       use NIC again\n"
		"  version           versions of r2cclctl and r2ccld\n"
		"  help              this text\n"
		"\n"
		"Options:\n"
		"  -s, --socket PATH   daemon socket (default: $R2CCL_SOCKET, else %s)\n"
		"  -j, --json          print one JSON object (\"schema_version\": %d)\n"
		"  -t, --timeout MS    give up after MS milliseconds (default %d)\n"
		"  -v, --verbose       more detail\n"
		"  -f, --follow        events: go on printing new events; tenants: the table\n"
		"                      (--json: objects one after another) every --interval\n"
		"  -i, --interval MS   tenants --follow: milliseconds between queries (1000)\n"
		"  -n, --count N       tenants --follow: stop after N queries\n"
		"  -h, --help          this text\n"
		"\n"
		"Exit status: 0 ok, 1 failure, 2 usage, 3 daemon not running, "
		"4 permission denied.\n",
		R2CCL_DEFAULT_SOCKET, CTL_SCHEMA_VERSION, CTL_DEFAULT_TIMEOUT_MS);
}

static int cmd_help(struct ctl *c, int argc, char **argv)
{
	usage(stdout);
	return EXIT_OK;
}

struct command {
	const char *name;
	int min_args, max_args;
	bool connect;
	int (*fn)(struct ctl *c, int argc, char **argv);
};

static const struct command commands[] = {
	{ "status", 0, 0, true, cmd_status },
	{ "sessions", 0, 0, true, cmd_section },
	{ "comms", 0, 0, true, cmd_section },
	{ "nics", 0, 0, true, cmd_section },
	{ "tenants", 0, 32, true, cmd_tenants },
	{ "rails", 0, 0, true, cmd_rails },
	{ "peers", 0, 0, true, cmd_peers },
	{ "events", 0, 0, true, cmd_events },
	{ "top", 0, 1, true, cmd_top },
	{ "rebalance", 0, 1, true, cmd_rebalance },
	{ "drain", 1, 1, true, cmd_nic_admin },
	{ "undrain", 1, 1, true, cmd_nic_admin },
	{ "version", 0, 0, false, cmd_version },
	{ "help", 0, 0, false, cmd_help },
};

static int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int usage_error(const char *fmt, ...)
{
	va_list ap;

	fputs("r2cclctl: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputs("\nTry 'r2cclctl help'.\n", stderr);
	return EXIT_USAGE;
}

/* Parses the options into c. -1 to go on (optind at the command), else the
 * exit code. */
static int parse_options(struct ctl *c, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "socket", required_argument, NULL, 's' },
		{ "json", no_argument, NULL, 'j' },
		{ "timeout", required_argument, NULL, 't' },
		{ "verbose", no_argument, NULL, 'v' },
		{ "follow", no_argument, NULL, 'f' },
		{ "interval", required_argument, NULL, 'i' },
		{ "count", required_argument, NULL, 'n' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int o;

	opterr = 0;
	while ((o = getopt_long(argc, argv, "s:jt:vfi:n:h", opts, NULL)) != -1) {
		uint32_t ms;

		switch (o) {
		case 's':
			if (!optarg[0])
				return usage_error("--socket needs a path");
			c->socket = optarg;
			break;
		case 'j':
			c->json = true;
			break;
		case 't':
			if (parse_u32(optarg, &ms) < 0 || ms == 0 || ms > 3600000)
				return usage_error("--timeout takes milliseconds, 1 to 3600000: '%s'",
						   optarg);
			c->timeout_ms = (int)ms;
			break;
		case 'v':
			c->verbose = true;
			break;
		case 'f':
			c->follow = true;
			break;
		case 'i':
			if (parse_u32(optarg, &ms) < 0 || ms == 0 || ms > 3600000)
				return usage_error("--interval takes milliseconds, 1 to 3600000: '%s'",
						   optarg);
			c->interval_ms = (int)ms;
			break;
		case 'n':
			if (parse_u32(optarg, &ms) < 0 || ms == 0)
				return usage_error("--count takes a number of queries, 1 or more: '%s'",
						   optarg);
			c->count = (long)ms;
			break;
		case 'h':
			usage(stdout);
			return EXIT_OK;
		default:
			if (optopt && strchr("stin", optopt))
				return usage_error("option '-%c' needs a value", optopt);
			if (optopt)
				return usage_error("unknown option '-%c'", optopt);
			return usage_error("unknown option '%s'", argv[optind - 1]);
		}
	}
	return -1;
}

/* Checks the command's arguments before connecting: 0 or EXIT_USAGE. */
static int check_args(const struct command *cmd, int nargs, char **args, const struct ctl *c)
{
	if (c->follow && cmd->fn != cmd_events && (cmd->fn != cmd_tenants || nargs > 0))
		return usage_error("--follow is for events and tenants only");
	if ((c->interval_ms || c->count) && (!c->follow || cmd->fn != cmd_tenants))
		return usage_error("--interval and --count go with tenants --follow");
	if (nargs < cmd->min_args)
		return usage_error("%s needs %s", cmd->name,
				   cmd->fn == cmd_nic_admin ? "a NIC name" : "an argument");
	if (nargs > cmd->max_args)
		return usage_error("too many arguments for %s", cmd->name);
	if (cmd->fn == cmd_rebalance && nargs == 1) {
		uint32_t id;

		if (parse_u32(args[0], &id) < 0 || id == 0)
			return usage_error("rebalance: COMM is a communicator id (see 'r2cclctl "
					   "comms'): '%s'",
					   args[0]);
	}
	if (cmd->fn == cmd_tenants && nargs > 0 && (strcmp(args[0], "set") || nargs < 3))
		return usage_error("tenants set NAME key=value... (weight=W rate=R "
				   "class=bulk|latency)");
	if (cmd->fn == cmd_nic_admin && !args[0][0])
		return usage_error("%s: empty NIC name", cmd->name);
	return 0;
}

int main(int argc, char **argv)
{
	struct ctl c = { .timeout_ms = CTL_DEFAULT_TIMEOUT_MS, .rpc = { .fd = -1 } };
	const struct command *cmd = NULL;
	int r, nargs;
	char **args;

	signal(SIGPIPE, SIG_IGN);
	r = parse_options(&c, argc, argv);
	if (r >= 0)
		return r;
	if (optind >= argc)
		return usage_error("no command given");
	c.cmd = argv[optind];
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
		if (!strcmp(commands[i].name, c.cmd))
			cmd = &commands[i];
	if (!cmd)
		return usage_error("unknown command '%s'", c.cmd);
	args = argv + optind + 1;
	nargs = argc - optind - 1;
	r = check_args(cmd, nargs, args, &c);
	if (r)
		return r;

	if (!c.socket) {
		const char *env = getenv("R2CCL_SOCKET");

		c.socket = env && env[0] ? env : R2CCL_DEFAULT_SOCKET;
	}
	if (cmd->connect) {
		r = ctl_connect(&c);
		if (r) {
			ctl_close(&c);
			return r;
		}
	}
	r = cmd->fn(&c, nargs, args);
	ctl_close(&c);
	if (fflush(stdout) != 0 || ferror(stdout)) {
		fprintf(stderr, "r2cclctl: write error: %s\n", strerror(errno));
		return EXIT_FAIL;
	}
	return r;
}
