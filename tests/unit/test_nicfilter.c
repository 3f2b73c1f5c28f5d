// SPDX-License-Identifier: MIT
/* Unit tests of the NCCL-style NIC filter (common/nicfilter.c). */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nicfilter.h"

static struct r2_nicfilter f;

static bool m(const char *spec, const char *name, int port)
{
	ck_assert_msg(r2_nicfilter_parse(spec, &f) == 0, "parse \"%s\"", spec ? spec : "(null)");
	return r2_nicfilter_match(&f, name, port);
}

START_TEST(test_empty_matches_all)
{
	ck_assert(m(NULL, "eth0", -1));
	ck_assert(m("", "ib0", 1));
	ck_assert(m("   ", "anything", -1));
	ck_assert_int_eq(f.n, 0);
	ck_assert(r2_nicfilter_match(NULL, "eth0", -1));
}
END_TEST

START_TEST(test_prefix)
{
	ck_assert(m("eth,ib", "eth0", -1));
	ck_assert(m("eth,ib", "ib3", -1));
	ck_assert(m("eth,ib", "eth", -1));
	ck_assert(!m("eth,ib", "enp1s0", -1));
	ck_assert(!m("eth,ib", "et", -1));
	ck_assert(!f.negate);
	ck_assert(!f.exact);
	ck_assert_int_eq(f.n, 2);
	ck_assert_str_eq(f.ent[0].name, "eth");
	ck_assert_int_eq(f.ent[0].port, -1);
	/* blanks around elements are ignored */
	ck_assert(m(" eth0 , ib1 ", "ib1", -1));
}
END_TEST

START_TEST(test_negate)
{
	ck_assert(!m("^eth2", "eth2", -1));
	ck_assert(!m("^eth2", "eth20", -1)); /* prefix */
	ck_assert(m("^eth2", "eth1", -1));
	ck_assert(m("^eth2", "lo", -1));
	ck_assert(f.negate);
	ck_assert(!m("^docker,lo", "lo", -1));
	ck_assert(!m("^docker,lo", "docker0", -1));
	ck_assert(m("^docker,lo", "eth0", -1));
}
END_TEST

START_TEST(test_exact)
{
	ck_assert(m("=eth0,eth1", "eth0", -1));
	ck_assert(m("=eth0,eth1", "eth1", -1));
	ck_assert(!m("=eth0,eth1", "eth10", -1));
	ck_assert(!m("=eth0,eth1", "eth", -1));
	ck_assert(f.exact);
	ck_assert(!f.negate);
}
END_TEST

START_TEST(test_negate_exact)
{
	ck_assert(!m("^=eth0", "eth0", -1));
	ck_assert(m("^=eth0", "eth00", -1));
	ck_assert(m("^=eth0", "eth1", -1));
	ck_assert(f.exact && f.negate);
	/* "=^" is not the negation: '^' becomes part of the name */
	ck_assert(!m("=^eth0", "eth1", -1));
}
END_TEST

START_TEST(test_ports)
{
	ck_assert(m("mlx5_0:1", "mlx5_0", 1));
	ck_assert(!m("mlx5_0:1", "mlx5_0", 2));
	ck_assert_str_eq(f.ent[0].name, "mlx5_0");
	ck_assert_int_eq(f.ent[0].port, 1);
	/* a NIC without port notion, or a filter without a port, does not restrict */
	ck_assert(m("mlx5_0:1", "mlx5_0", -1));
	ck_assert(m("mlx5_0", "mlx5_0", 2));
	/* prefix with port: mlx5_1 port 1 matches "mlx5" prefix entries */
	ck_assert(m("mlx5:1", "mlx5_3", 1));
	ck_assert(!m("mlx5:1", "mlx5_3", 2));
	ck_assert(m("=mlx5_0:1,mlx5_1:2", "mlx5_1", 2));
	ck_assert(!m("=mlx5_0:1,mlx5_1:2", "mlx5_1", 1));
	ck_assert(!m("^=mlx5_0:1", "mlx5_0", 1));
	ck_assert(m("^=mlx5_0:1", "mlx5_0", 2));
}
END_TEST

START_TEST(test_parse_errors)
{
	static const char *const bad[] = { "eth,,ib", ",eth", "eth,", "^", "=", "^=", "mlx5_0:",
					   "mlx5_0:x", "mlx5_0:-1", ":1", "mlx5_0:1:2",
					   "mlx5_0:99999999999" };
	char longname[80], many[512] = "";

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		ck_assert_msg(r2_nicfilter_parse(bad[i], &f) == -EINVAL, "\"%s\"", bad[i]);
		/* a failed parse leaves an empty filter */
		ck_assert_int_eq(f.n, 0);
	}
	memset(longname, 'a', 64);
	longname[64] = '\0';
	ck_assert_int_eq(r2_nicfilter_parse(longname, &f), -EINVAL);
	longname[63] = '\0';
	ck_assert_int_eq(r2_nicfilter_parse(longname, &f), 0);
	ck_assert(r2_nicfilter_match(&f, longname, -1));

	for (int i = 0; i < R2_NICFILTER_MAX; i++)
		snprintf(many + strlen(many), sizeof(many) - strlen(many), "%se%d", i ? "," : "",
			 i);
	ck_assert_int_eq(r2_nicfilter_parse(many, &f), 0);
	ck_assert_int_eq(f.n, R2_NICFILTER_MAX);
	ck_assert(r2_nicfilter_match(&f, "e31", -1));
	strcat(many, ",e32");
	ck_assert_int_eq(r2_nicfilter_parse(many, &f), -EINVAL);
}
END_TEST

static Suite *nicfilter_suite(void)
{
	Suite *s = suite_create("nicfilter");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, test_empty_matches_all);
	tcase_add_test(tc, test_prefix);
	tcase_add_test(tc, test_negate);
	tcase_add_test(tc, test_exact);
	tcase_add_test(tc, test_negate_exact);
	tcase_add_test(tc, test_ports);
	tcase_add_test(tc, test_parse_errors);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(nicfilter_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
