// SPDX-License-Identifier: MIT
/* Unit tests of the parameter registry (common/params.c). */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "params.h"

enum { P_HB, P_CHUNK, P_OFFSET, P_DEBUG, P_RATIO, P_SOCKET, P_TRANSPORT, P_COUNT, P_N };

static const struct r2_param_def defs[P_N] = {
	[P_HB] = { "hb_interval", "R2CCL_HB_INTERVAL", "--hb-interval", R2_PT_INT, "100", 10, 10000,
		   NULL, "ms", true, "heartbeat interval" },
	[P_CHUNK] = { "chunk_size", "R2CCL_CHUNK_SIZE", "--chunk-size", R2_PT_INT, "512K", 4096,
		      1ll << 40, NULL, "bytes", false, "chunk size" },
	[P_OFFSET] = { "clock_offset", "R2CCL_CLOCK_OFFSET", NULL, R2_PT_INT, "-5", -100, 100,
		       NULL, "us", false, "may be negative" },
	[P_DEBUG] = { "debug", "R2CCL_DEBUG", "--debug", R2_PT_BOOL, "no", 0, -1, NULL, NULL,
		      true, "debug" },
	[P_RATIO] = { "ratio", "R2CCL_RATIO", NULL, R2_PT_DOUBLE, "0.5", 0, -1, NULL, NULL, false,
		      "a ratio" },
	[P_SOCKET] = { "socket", "R2CCL_SOCKET_PATH", "--socket", R2_PT_STRING,
		       "/run/r2ccl/r2ccld.sock", 0, -1, NULL, NULL, false, "socket" },
	[P_TRANSPORT] = { "transport", "R2CCL_TRANSPORT", "--transport", R2_PT_ENUM, "auto", 0, -1,
			  "auto|tcp|verbs", NULL, false, "transport" },
	[P_COUNT] = { "count", "R2CCL_COUNT", NULL, R2_PT_INT, "0", 1, 0, NULL, NULL, false,
		      "no bounds (min > max)" },
};

static struct r2_params p;
static char err[512];

static void setup(void)
{
	err[0] = '\0';
	ck_assert_int_eq(r2_params_init(&p, defs, P_N, err, sizeof(err)), 0);
}

static void teardown(void)
{
	r2_params_free(&p);
}

static int set(const char *key, const char *value, enum r2_param_source src)
{
	err[0] = '\0';
	return r2_params_set(&p, key, value, src, err, sizeof(err));
}

/* Writes text to a temporary file; the path is in a static buffer. */
static const char *write_file(const char *text)
{
	static char path[64];
	int fd;

	strcpy(path, "/tmp/r2params-XXXXXX");
	fd = mkstemp(path);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
	return path;
}

static int load(const char *text)
{
	const char *path = write_file(text);
	int ret;

	err[0] = '\0';
	ret = r2_params_load_file(&p, path, err, sizeof(err));
	unlink(path);
	return ret;
}

START_TEST(test_defaults)
{
	ck_assert_int_eq(r2_param_int(&p, P_HB), 100);
	ck_assert_int_eq(r2_param_int(&p, P_CHUNK), 512 * 1024);
	ck_assert_int_eq(r2_param_int(&p, P_OFFSET), -5);
	ck_assert(!r2_param_bool(&p, P_DEBUG));
	ck_assert_double_eq(r2_param_double(&p, P_RATIO), 0.5);
	ck_assert_str_eq(r2_param_str(&p, P_SOCKET), "/run/r2ccl/r2ccld.sock");
	ck_assert_str_eq(r2_param_str(&p, P_TRANSPORT), "auto");
	for (int i = 0; i < P_N; i++)
		ck_assert_int_eq(p.v[i].src, R2_PS_DEFAULT);
	ck_assert_ptr_null(p.file);
	/* out-of-range indexes give neutral values */
	ck_assert_int_eq(r2_param_int(&p, P_N), 0);
	ck_assert_str_eq(r2_param_str(&p, -1), "");
}
END_TEST

START_TEST(test_bad_default)
{
	struct r2_param_def bad[2] = { defs[P_HB], defs[P_DEBUG] };
	struct r2_params q;

	bad[1].defval = "maybe";
	ck_assert_int_eq(r2_params_init(&q, bad, 2, err, sizeof(err)), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "debug"));
	ck_assert_ptr_nonnull(strstr(err, "\"maybe\""));
	r2_params_free(&q);
	bad[1] = defs[P_HB];
	bad[1].defval = "5"; /* below min */
	ck_assert_int_eq(r2_params_init(&q, bad, 2, err, sizeof(err)), -EINVAL);
	r2_params_free(&q);
	ck_assert_int_eq(r2_params_init(&q, defs, R2_PARAM_MAX + 1, err, sizeof(err)), -EINVAL);
	r2_params_free(&q);
	r2_params_free(NULL);
}
END_TEST

START_TEST(test_find)
{
	ck_assert_int_eq(r2_params_find(&p, "hb_interval"), P_HB);
	ck_assert_int_eq(r2_params_find(&p, "R2CCL_HB_INTERVAL"), P_HB);
	ck_assert_int_eq(r2_params_find(&p, "--hb-interval"), P_HB);
	ck_assert_int_eq(r2_params_find(&p, "hb-interval"), P_HB);
	ck_assert_int_eq(r2_params_find(&p, "HB_INTERVAL"), -ENOENT);
	ck_assert_int_eq(r2_params_find(&p, ""), -ENOENT);
	ck_assert_int_eq(r2_params_find(&p, "--"), -ENOENT);
	ck_assert_int_eq(r2_params_find(&p, NULL), -ENOENT);
}
END_TEST

START_TEST(test_int)
{
	ck_assert_int_eq(set("hb_interval", "  250 \t", R2_PS_CLI), 0);
	ck_assert_int_eq(r2_param_int(&p, P_HB), 250);
	ck_assert_int_eq(p.v[P_HB].src, R2_PS_CLI);
	ck_assert_int_eq(set("hb_interval", "0x40", R2_PS_CLI), 0);
	ck_assert_int_eq(r2_param_int(&p, P_HB), 64);
	ck_assert_int_eq(set("hb_interval", "010", R2_PS_CLI), 0); /* decimal, not octal */
	ck_assert_int_eq(r2_param_int(&p, P_HB), 10);
	ck_assert_int_eq(set("clock_offset", "-100", R2_PS_CLI), 0);
	ck_assert_int_eq(r2_param_int(&p, P_OFFSET), -100);
	ck_assert_int_eq(set("clock_offset", "+7", R2_PS_CLI), 0);
	ck_assert_int_eq(r2_param_int(&p, P_OFFSET), 7);
	/* no bounds (min > max): large values pass, negative ones do not */
	ck_assert_int_eq(set("count", "9223372036854775807", R2_PS_CLI), 0);
	ck_assert_int_eq(r2_param_int(&p, P_COUNT), INT64_MAX);
	ck_assert_int_eq(set("count", "-1", R2_PS_CLI), -ERANGE);
	ck_assert_str_eq(err, "count: \"-1\" must not be negative");
	ck_assert_int_eq(set("count", "9223372036854775808", R2_PS_CLI), -ERANGE);
	ck_assert_str_eq(err, "count: \"9223372036854775808\" is too large");
	ck_assert_int_eq(r2_param_int(&p, P_COUNT), INT64_MAX); /* unchanged */
}
END_TEST

START_TEST(test_int_bad)
{
	static const char *const bad[] = { "abc", "", "12abc", "1.5", "0x", "1 2", "--5", "5K",
					   " - 5", "0xg" };

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char want[128];
		char trimmed[16];

		ck_assert_int_eq(set("R2CCL_HB_INTERVAL", bad[i], R2_PS_ENV), -EINVAL);
		sscanf(bad[i], " %15[^\n]", trimmed);
		if (!*bad[i])
			trimmed[0] = '\0';
		snprintf(want, sizeof(want), "R2CCL_HB_INTERVAL: \"%s\" is not an integer",
			 trimmed);
		ck_assert_str_eq(err, want);
		ck_assert_int_eq(r2_param_int(&p, P_HB), 100);
		ck_assert_int_eq(p.v[P_HB].src, R2_PS_DEFAULT);
	}
}
END_TEST

START_TEST(test_int_bounds)
{
	ck_assert_int_eq(set("hb_interval", "10", R2_PS_CLI), 0);
	ck_assert_int_eq(set("hb_interval", "10000", R2_PS_CLI), 0);
	ck_assert_int_eq(set("hb_interval", "9", R2_PS_CLI), -ERANGE);
	ck_assert_str_eq(err,
			 "hb_interval: \"9\" is out of range (must be between 10 and 10000 ms)");
	ck_assert_int_eq(set("--hb-interval", "10001", R2_PS_CLI), -ERANGE);
	ck_assert_ptr_nonnull(strstr(err, "--hb-interval: \"10001\""));
	ck_assert_int_eq(set("hb_interval", "-20", R2_PS_CLI), -ERANGE);
	ck_assert_int_eq(r2_param_int(&p, P_HB), 10000);
	ck_assert_int_eq(set("clock_offset", "-101", R2_PS_CLI), -ERANGE);
	ck_assert_str_eq(err, "clock_offset: \"-101\" is out of range "
			      "(must be between -100 and 100 us)");
}
END_TEST

START_TEST(test_size_suffixes)
{
	static const struct {
		const char *s;
		int64_t v;
	} ok[] = {
		{ "4096", 4096 },	  { "4K", 4096 },	      { "4k", 4096 },
		{ "4KB", 4096 },	  { "4KiB", 4096 },	      { "4 kib", 4096 },
		{ "1M", 1 << 20 },	  { "2MiB", 2 << 20 },	      { "1G", 1ll << 30 },
		{ "3gb", 3ll << 30 },	  { "1T", 1ll << 40 },	      { "0x1000", 4096 },
		{ "0x10K", 16 << 10 },	  { "8192B", 8192 },
	};

	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		ck_assert_msg(set("chunk_size", ok[i].s, R2_PS_CLI) == 0, "%s: %s", ok[i].s, err);
		ck_assert_int_eq(r2_param_int(&p, P_CHUNK), ok[i].v);
	}
	ck_assert_int_eq(set("chunk_size", "2T", R2_PS_CLI), -ERANGE);
	ck_assert_int_eq(set("chunk_size", "4X", R2_PS_CLI), -EINVAL);
	ck_assert_str_eq(err, "chunk_size: \"4X\" is not a size (an integer with an optional K, "
			      "M, G or T suffix)");
	ck_assert_int_eq(set("chunk_size", "4KK", R2_PS_CLI), -EINVAL);
	ck_assert_int_eq(set("chunk_size", "4Mb2", R2_PS_CLI), -EINVAL);
	ck_assert_int_eq(set("chunk_size", "K", R2_PS_CLI), -EINVAL);
	ck_assert_int_eq(set("chunk_size", "99999999999T", R2_PS_CLI), -ERANGE);
	ck_assert_str_eq(err, "chunk_size: \"99999999999T\" is too large");
}
END_TEST

START_TEST(test_parse_size)
{
	int64_t v = -1;

	ck_assert_int_eq(r2_parse_size("4M", &v), 0);
	ck_assert_int_eq(v, 4 << 20);
	ck_assert_int_eq(r2_parse_size(" 512K ", &v), 0);
	ck_assert_int_eq(v, 512 << 10);
	ck_assert_int_eq(r2_parse_size("1G", &v), 0);
	ck_assert_int_eq(v, 1 << 30);
	ck_assert_int_eq(r2_parse_size("123", &v), 0);
	ck_assert_int_eq(v, 123);
	ck_assert_int_eq(r2_parse_size("0", &v), 0);
	ck_assert_int_eq(v, 0);
	ck_assert_int_eq(r2_parse_size("-4M", &v), -EINVAL);
	ck_assert_int_eq(r2_parse_size("", &v), -EINVAL);
	ck_assert_int_eq(r2_parse_size("4Q", &v), -EINVAL);
	ck_assert_int_eq(r2_parse_size("8388608T", &v), -ERANGE);
	ck_assert_int_eq(r2_parse_size("8388607T", &v), 0);
	ck_assert_int_eq(v, 8388607ll << 40);
	ck_assert_int_eq(r2_parse_size(NULL, &v), -EINVAL);
}
END_TEST

START_TEST(test_bool)
{
	static const char *const t[] = { "1", "true", "TRUE", "yes", "On", " yes " };
	static const char *const f[] = { "0", "false", "no", "off", "OFF" };

	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		ck_assert_int_eq(set("debug", t[i], R2_PS_CLI), 0);
		ck_assert(r2_param_bool(&p, P_DEBUG));
	}
	for (size_t i = 0; i < sizeof(f) / sizeof(f[0]); i++) {
		ck_assert_int_eq(set("debug", f[i], R2_PS_CLI), 0);
		ck_assert(!r2_param_bool(&p, P_DEBUG));
	}
	ck_assert_int_eq(set("R2CCL_DEBUG", "2", R2_PS_ENV), -EINVAL);
	ck_assert_str_eq(err, "R2CCL_DEBUG: \"2\" is not a boolean "
			      "(use 1/0, true/false, yes/no or on/off)");
	ck_assert_int_eq(set("debug", "", R2_PS_CLI), -EINVAL);
}
END_TEST

START_TEST(test_double)
{
	ck_assert_int_eq(set("ratio", "0.25", R2_PS_CLI), 0);
	ck_assert_double_eq(r2_param_double(&p, P_RATIO), 0.25);
	ck_assert_int_eq(set("ratio", "-1e3", R2_PS_CLI), 0);
	ck_assert_double_eq(r2_param_double(&p, P_RATIO), -1000.0);
	ck_assert_int_eq(set("ratio", "nan", R2_PS_CLI), -EINVAL);
	ck_assert_str_eq(err, "ratio: \"nan\" is not a finite number");
	ck_assert_int_eq(set("ratio", "inf", R2_PS_CLI), -EINVAL);
	ck_assert_int_eq(set("ratio", "1e999", R2_PS_CLI), -ERANGE);
	ck_assert_int_eq(set("ratio", "0.5x", R2_PS_CLI), -EINVAL);
	ck_assert_str_eq(err, "ratio: \"0.5x\" is not a number");
	ck_assert_int_eq(set("ratio", "", R2_PS_CLI), -EINVAL);
	ck_assert_double_eq(r2_param_double(&p, P_RATIO), -1000.0);
}
END_TEST

START_TEST(test_string_enum)
{
	ck_assert_int_eq(set("socket", "  /tmp/x.sock  ", R2_PS_CLI), 0);
	ck_assert_str_eq(r2_param_str(&p, P_SOCKET), "/tmp/x.sock");
	ck_assert_int_eq(set("socket", "", R2_PS_CLI), 0);
	ck_assert_str_eq(r2_param_str(&p, P_SOCKET), "");
	ck_assert_int_eq(set("transport", "verbs", R2_PS_CLI), 0);
	ck_assert_str_eq(r2_param_str(&p, P_TRANSPORT), "verbs");
	ck_assert_int_eq(set("transport", "TCP", R2_PS_CLI), 0);
	ck_assert_str_eq(r2_param_str(&p, P_TRANSPORT), "tcp"); /* canonical spelling */
	ck_assert_int_eq(set("transport", "ucx", R2_PS_CLI), -EINVAL);
	ck_assert_str_eq(err, "transport: \"ucx\" is not one of auto|tcp|verbs");
	ck_assert_int_eq(set("transport", "tc", R2_PS_CLI), -EINVAL);
	ck_assert_int_eq(set("transport", "", R2_PS_CLI), -EINVAL);
	ck_assert_str_eq(r2_param_str(&p, P_TRANSPORT), "tcp");
}
END_TEST

START_TEST(test_unknown_key)
{
	ck_assert_int_eq(set("no_such_thing", "1", R2_PS_CLI), -ENOENT);
	ck_assert_str_eq(err, "unknown parameter \"no_such_thing\"");
}
END_TEST

static int unknown_seen;
static char unknown_name[64];

static void on_unknown(const char *name, void *arg)
{
	ck_assert_ptr_eq(arg, &unknown_seen);
	unknown_seen++;
	snprintf(unknown_name, sizeof(unknown_name), "%s", name);
}

START_TEST(test_precedence)
{
	char *envp[] = { "R2CCL_HB_INTERVAL=300", "R2CCL_CHUNK_SIZE=1M", "PATH=/bin",
			 "R2CCL_SOCKET=/x", "hb_interval=999", NULL };

	/* file < env < cli, whatever the order of loading: cli first */
	ck_assert_int_eq(set("--hb-interval", "400", R2_PS_CLI), 0);
	unknown_seen = 0;
	ck_assert_int_eq(r2_params_load_env(&p, envp, on_unknown, &unknown_seen, err,
					    sizeof(err)), 0);
	ck_assert_int_eq(unknown_seen, 1);
	ck_assert_str_eq(unknown_name, "R2CCL_SOCKET");
	ck_assert_int_eq(load("hb_interval = 200\nchunk_size = 2M\ndebug = yes\n"), 0);
	ck_assert_int_eq(r2_param_int(&p, P_HB), 400);
	ck_assert_int_eq(p.v[P_HB].src, R2_PS_CLI);
	ck_assert_int_eq(r2_param_int(&p, P_CHUNK), 1 << 20);
	ck_assert_int_eq(p.v[P_CHUNK].src, R2_PS_ENV);
	ck_assert(r2_param_bool(&p, P_DEBUG));
	ck_assert_int_eq(p.v[P_DEBUG].src, R2_PS_FILE);
	ck_assert_int_eq(p.v[P_RATIO].src, R2_PS_DEFAULT);
	ck_assert_ptr_nonnull(p.file);
}
END_TEST

START_TEST(test_precedence_natural_order)
{
	char *envp[] = { "R2CCL_HB_INTERVAL=300", "R2CCL_CHUNK_SIZE=1M", NULL };

	ck_assert_int_eq(load("hb_interval = 200\nR2CCL_CHUNK_SIZE = 2M\ndebug = on\n"), 0);
	ck_assert_int_eq(r2_param_int(&p, P_HB), 200);
	ck_assert_int_eq(r2_params_load_env(&p, envp, NULL, NULL, err, sizeof(err)), 0);
	ck_assert_int_eq(set("hb_interval", "400", R2_PS_CLI), 0);
	ck_assert_int_eq(r2_param_int(&p, P_HB), 400);
	ck_assert_int_eq(r2_param_int(&p, P_CHUNK), 1 << 20);
	ck_assert(r2_param_bool(&p, P_DEBUG));
	/* a reload changes what the file set, not what env or cli set */
	ck_assert_int_eq(set("debug", "off", R2_PS_RELOAD), 0);
	ck_assert(!r2_param_bool(&p, P_DEBUG));
	ck_assert_int_eq(p.v[P_DEBUG].src, R2_PS_RELOAD);
	ck_assert_int_eq(set("chunk_size", "8K", R2_PS_RELOAD), 0);
	ck_assert_int_eq(r2_param_int(&p, P_CHUNK), 1 << 20);
	/* an ignored lower source is still validated */
	ck_assert_int_eq(set("hb_interval", "abc", R2_PS_FILE), -EINVAL);
}
END_TEST

START_TEST(test_env_bad_is_atomic)
{
	char *envp[] = { "R2CCL_HB_INTERVAL=300", "R2CCL_DEBUG=perhaps", NULL };

	ck_assert_int_eq(r2_params_load_env(&p, envp, NULL, NULL, err, sizeof(err)), -EINVAL);
	ck_assert_str_eq(err, "R2CCL_DEBUG: \"perhaps\" is not a boolean (use 1/0, true/false, "
			      "yes/no or on/off)");
	ck_assert_int_eq(r2_param_int(&p, P_HB), 100);
	ck_assert_int_eq(p.v[P_HB].src, R2_PS_DEFAULT);
}
END_TEST

START_TEST(test_file_comments)
{
	static const char text[] = "# r2ccld.conf\n"
				   "\n"
				   "   # indented comment\n"
				   "hb_interval=50   # trailing comment\n"
				   "\tR2CCL_CHUNK_SIZE =  64K\n"
				   "socket = /tmp/a b.sock\n"
				   "transport = verbs\n"
				   "ratio = 1.5\n"
				   "debug = true"; /* no final newline */

	ck_assert_int_eq(load(text), 0);
	ck_assert_int_eq(r2_param_int(&p, P_HB), 50);
	ck_assert_int_eq(r2_param_int(&p, P_CHUNK), 64 << 10);
	ck_assert_str_eq(r2_param_str(&p, P_SOCKET), "/tmp/a b.sock");
	ck_assert_str_eq(r2_param_str(&p, P_TRANSPORT), "verbs");
	ck_assert_double_eq(r2_param_double(&p, P_RATIO), 1.5);
	ck_assert(r2_param_bool(&p, P_DEBUG));
	for (int i = 0; i < P_N; i++)
		if (i != P_OFFSET && i != P_COUNT)
			ck_assert_int_eq(p.v[i].src, R2_PS_FILE);
	ck_assert_ptr_nonnull(p.file);
	ck_assert_ptr_nonnull(strstr(p.file, "/tmp/r2params-"));
}
END_TEST

static void assert_file_error(const char *text, int line, const char *reason)
{
	char want[512];
	const char *path = write_file(text);

	err[0] = '\0';
	ck_assert_int_eq(r2_params_load_file(&p, path, err, sizeof(err)), -EINVAL);
	snprintf(want, sizeof(want), "%s:%d: %s", path, line, reason);
	ck_assert_str_eq(err, want);
	unlink(path);
	/* all or nothing: the good lines before the bad one were not applied */
	ck_assert_int_eq(r2_param_int(&p, P_HB), 100);
	ck_assert_int_eq(p.v[P_HB].src, R2_PS_DEFAULT);
	ck_assert_ptr_null(p.file);
}

START_TEST(test_file_errors)
{
	assert_file_error("hb_interval = 20\n# ok\nbogus = 1\n", 3, "unknown parameter \"bogus\"");
	assert_file_error("hb_interval = 20\n\nR2CCL_HB_INTERVAL = abc\n", 3,
			  "R2CCL_HB_INTERVAL: \"abc\" is not an integer");
	assert_file_error("hb_interval = 20\nhb_interval = 5\n", 2,
			  "hb_interval: \"5\" is out of range (must be between 10 and 10000 ms)");
	assert_file_error("hb_interval = 20\njust words\n", 2,
			  "expected \"key = value\", got \"just words\"");
	assert_file_error("hb_interval = 20\n = 4\n", 2, "a key is missing before \"=\"");
	/* command-line spellings are not file keys */
	assert_file_error("hb_interval = 20\n--hb-interval = 30\n", 2,
			  "unknown parameter \"--hb-interval\"");
}
END_TEST

START_TEST(test_file_missing)
{
	ck_assert_int_eq(r2_params_load_file(&p, "/nonexistent/r2ccld.conf", err, sizeof(err)),
			 -ENOENT);
	ck_assert_ptr_nonnull(strstr(err, "/nonexistent/r2ccld.conf"));
}
END_TEST

struct dump_ctx {
	int n;
	char lines[P_N][256];
};

static void dump_cb(const char *line, void *arg)
{
	struct dump_ctx *c = arg;

	ck_assert_int_lt(c->n, P_N);
	snprintf(c->lines[c->n++], sizeof(c->lines[0]), "%s", line);
}

START_TEST(test_dump)
{
	struct dump_ctx c = { 0 };
	char buf[64];

	ck_assert_int_eq(set("chunk_size", "1M", R2_PS_CLI), 0);
	ck_assert_int_eq(set("socket", "", R2_PS_ENV), 0);
	ck_assert_int_eq(set("debug", "1", R2_PS_FILE), 0);
	r2_params_dump(&p, dump_cb, &c);
	ck_assert_int_eq(c.n, P_N);
	ck_assert_str_eq(c.lines[P_HB], "hb_interval = 100 ms [default]");
	ck_assert_str_eq(c.lines[P_CHUNK], "chunk_size = 1048576 bytes [cli]");
	ck_assert_str_eq(c.lines[P_OFFSET], "clock_offset = -5 us [default]");
	ck_assert_str_eq(c.lines[P_DEBUG], "debug = true [file]");
	ck_assert_str_eq(c.lines[P_RATIO], "ratio = 0.5 [default]");
	ck_assert_str_eq(c.lines[P_SOCKET], "socket = \"\" [env]");
	ck_assert_str_eq(c.lines[P_TRANSPORT], "transport = auto [default]");
	r2_param_format(&p, P_RATIO, buf, sizeof(buf));
	ck_assert_str_eq(buf, "0.5");
	ck_assert_int_eq(set("ratio", "0.1", R2_PS_CLI), 0);
	r2_param_format(&p, P_RATIO, buf, sizeof(buf));
	ck_assert_str_eq(buf, "0.1");
	ck_assert_str_eq(r2_param_source_name(R2_PS_RELOAD), "reload");
}
END_TEST

static Suite *params_suite(void)
{
	Suite *s = suite_create("params");
	TCase *tc = tcase_create("core");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_defaults);
	tcase_add_test(tc, test_bad_default);
	tcase_add_test(tc, test_find);
	tcase_add_test(tc, test_int);
	tcase_add_test(tc, test_int_bad);
	tcase_add_test(tc, test_int_bounds);
	tcase_add_test(tc, test_size_suffixes);
	tcase_add_test(tc, test_parse_size);
	tcase_add_test(tc, test_bool);
	tcase_add_test(tc, test_double);
	tcase_add_test(tc, test_string_enum);
	tcase_add_test(tc, test_unknown_key);
	tcase_add_test(tc, test_precedence);
	tcase_add_test(tc, test_precedence_natural_order);
	tcase_add_test(tc, test_env_bad_is_atomic);
	tcase_add_test(tc, test_file_comments);
	tcase_add_test(tc, test_file_errors);
	tcase_add_test(tc, test_file_missing);
	tcase_add_test(tc, test_dump);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(params_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
