// SPDX-License-Identifier: MIT
/*
 * Unit tests of r2cclctl's output engine (tools/ctl/columns.c and the table,
 * JSON and text code under it): one column description prints a section as
 * an aligned table (the table's order by pos, '>' right-aligns, verbose-only
 * columns, units, '-' for none, controls made safe) and as JSON (the
 * description's order, JSON-only columns, types, escaping), and one row as
 * an object.
 */
#include <check.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ctl.h"

struct row {
	char *name;
	int32_t numa;
	uint64_t bytes;
	protobuf_c_boolean on;
	uint32_t mtu;
};

static const char *on_text(const struct col *col, const void *row, size_t idx, char *buf,
			   size_t len)
{
	snprintf(buf, len, "#%zu:%s", idx, col_u64(col, row) ? "on" : "off");
	return buf;
}

#define R(f) offsetof(struct row, f)
static const struct col cols[] = {
	{ "name", "NAME", 1, COL_STR, R(name) },
	{ "numa", ">NUMA", 3, COL_I32, R(numa), txt_numa },
	{ "bytes", ">BYTES", 2, COL_U64, R(bytes), txt_bytes },
	{ "on", NULL, 0, COL_BOOL, R(on) },
	{ NULL, "STATE", 5, COL_BOOL, R(on), on_text },
	{ "mtu", ">MTU", 4, COL_U32, R(mtu), NULL, NULL, COL_VERBOSE, "B" },
};
static const struct section sec = { "rows", COLS(cols) };

static struct row r0 = { "eth0", 0, 1536, 1, 1500 };
static struct row r1 = { "we\x01ird\"", -1, 12, 0, 0 };
static struct row r2 = { NULL, 3, 0, 1, 9000 };
static void *const rows[] = { &r0, &r1, &r2 };

/* Runs fn with stdout in a buffer; returns what it printed (malloc'ed). */
static char *capture(void (*fn)(void))
{
	char path[] = "/tmp/r2ccl-ctlcols-XXXXXX";
	int fd = mkstemp(path), saved = dup(1);
	char *out = calloc(1, 8192);
	ssize_t n;

	ck_assert_int_ge(fd, 0);
	fflush(stdout);
	ck_assert_int_ge(dup2(fd, 1), 0);
	fn();
	fflush(stdout);
	dup2(saved, 1);
	close(saved);
	n = pread(fd, out, 8191, 0);
	ck_assert_int_ge(n, 0);
	close(fd);
	unlink(path);
	return out;
}

static void print_table(void)
{
	section_table(&sec, rows, 3, false);
}

static void print_table_v(void)
{
	section_table(&sec, rows, 3, true);
}

static void print_json(void)
{
	struct jw j;

	jw_begin(&j);
	section_json(&j, &sec, rows, 3);
	section_object(&j, &(struct section){ "one", cols, 2 }, &r0);
	jw_end(&j);
}

START_TEST(table)
{
	char *out = capture(print_table);

	ck_assert_str_eq(out, "NAME       BYTES  NUMA  STATE\n"
			      "eth0     1.5 KiB     0  #0:on\n"
			      "we?ird\"     12 B     -  #1:off\n"
			      "-            0 B     3  #2:on\n");
	free(out);
}
END_TEST

START_TEST(table_verbose)
{
	char *out = capture(print_table_v);

	ck_assert_str_eq(out, "NAME       BYTES  NUMA    MTU  STATE\n"
			      "eth0     1.5 KiB     0  1500B  #0:on\n"
			      "we?ird\"     12 B     -     0B  #1:off\n"
			      "-            0 B     3  9000B  #2:on\n");
	free(out);
}
END_TEST

START_TEST(json)
{
	char *out = capture(print_json);

	ck_assert_str_eq(out, "{\n"
			      "  \"schema_version\": 1,\n"
			      "  \"rows\": [\n"
			      "    {\n"
			      "      \"name\": \"eth0\",\n"
			      "      \"numa\": 0,\n"
			      "      \"bytes\": 1536,\n"
			      "      \"on\": true,\n"
			      "      \"mtu\": 1500\n"
			      "    },\n"
			      "    {\n"
			      "      \"name\": \"we\\u0001ird\\\"\",\n"
			      "      \"numa\": -1,\n"
			      "      \"bytes\": 12,\n"
			      "      \"on\": false,\n"
			      "      \"mtu\": 0\n"
			      "    },\n"
			      "    {\n"
			      "      \"name\": \"\",\n"
			      "      \"numa\": 3,\n"
			      "      \"bytes\": 0,\n"
			      "      \"on\": true,\n"
			      "      \"mtu\": 9000\n"
			      "    }\n"
			      "  ],\n"
			      "  \"one\": {\n"
			      "    \"name\": \"eth0\",\n"
			      "    \"numa\": 0\n"
			      "  }\n"
			      "}\n");
	free(out);
}
END_TEST

static void print_empty(void)
{
	struct jw j;

	section_table(&sec, NULL, 0, false);
	jw_begin(&j);
	section_json(&j, &sec, NULL, 0);
	jw_end(&j);
}

START_TEST(empty)
{
	char *out = capture(print_empty);

	ck_assert_str_eq(out, "NAME  BYTES  NUMA  STATE\n"
			      "{\n"
			      "  \"schema_version\": 1,\n"
			      "  \"rows\": []\n"
			      "}\n");
	free(out);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("ctl-columns");
	TCase *tc = tcase_create("ctl-columns");
	SRunner *sr;
	int failed;

	tcase_add_test(tc, table);
	tcase_add_test(tc, table_verbose);
	tcase_add_test(tc, json);
	tcase_add_test(tc, empty);
	suite_add_tcase(s, tc);
	sr = srunner_create(s);
	srunner_set_fork_status(sr, CK_FORK);
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
