// SPDX-License-Identifier: MIT
/* r2cclctl's JSON writer: pretty, two-space indent, one object per run. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "ctl.h"

static void jw_indent(struct jw *j)
{
	fputc('\n', j->f);
	for (int i = 0; i < j->depth; i++)
		fputs("  ", j->f);
}

/* Starts a member (key non-NULL, inside an object) or an element (key NULL). */
static void jw_item(struct jw *j, const char *key)
{
	if (j->depth > 0) {
		if (j->nonempty[j->depth])
			fputc(',', j->f);
		j->nonempty[j->depth] = true;
		jw_indent(j);
	}
	if (key) {
		json_string(j->f, key);
		fputs(": ", j->f);
	}
}

void jw_open(struct jw *j, const char *key, char bracket)
{
	jw_item(j, key);
	fputc(bracket, j->f);
	if (j->depth + 1 < JW_MAX_DEPTH)
		j->depth++;
	j->nonempty[j->depth] = false;
}

void jw_close(struct jw *j, char bracket)
{
	bool nonempty = j->nonempty[j->depth];

	j->depth--;
	if (nonempty)
		jw_indent(j);
	fputc(bracket, j->f);
	if (j->depth == 0)
		fputc('\n', j->f);
}

void jw_str(struct jw *j, const char *key, const char *v)
{
	jw_item(j, key);
	json_string(j->f, v);
}

void jw_u64(struct jw *j, const char *key, uint64_t v)
{
	jw_item(j, key);
	fprintf(j->f, "%" PRIu64, v);
}

void jw_i64(struct jw *j, const char *key, int64_t v)
{
	jw_item(j, key);
	fprintf(j->f, "%" PRId64, v);
}

void jw_bool(struct jw *j, const char *key, bool v)
{
	jw_item(j, key);
	fputs(v ? "true" : "false", j->f);
}

/* Opens the top-level object with its schema version. */
void jw_begin(struct jw *j)
{
	memset(j, 0, sizeof(*j));
	j->f = stdout;
	jw_open(j, NULL, '{');
	jw_u64(j, "schema_version", CTL_SCHEMA_VERSION);
}

void jw_end(struct jw *j)
{
	jw_close(j, '}');
}
