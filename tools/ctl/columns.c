// SPDX-License-Identifier: MIT
/*
 * r2cclctl's column engine: one description per section (struct col: the
 * JSON key, the table header and position, the field and its text form)
 * prints the section both as an aligned table and as a JSON array.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctl.h"

static const void *field(const struct col *col, const void *row)
{
	return (const char *)row + col->off;
}

uint64_t col_u64(const struct col *col, const void *row)
{
	const void *p = field(col, row);

	switch (col->type) {
	case COL_U32: return *(const uint32_t *)p;
	case COL_I32: return (uint64_t)(int64_t)*(const int32_t *)p;
	case COL_U64: return *(const uint64_t *)p;
	case COL_SIZE: return *(const size_t *)p;
	case COL_BOOL: return *(const protobuf_c_boolean *)p != 0;
	case COL_STR: break;
	}
	return 0;
}

int64_t col_i64(const struct col *col, const void *row)
{
	return col->type == COL_I32 ? *(const int32_t *)field(col, row)
				    : (int64_t)col_u64(col, row);
}

const char *col_str(const struct col *col, const void *row)
{
	return col->type == COL_STR ? *(const char *const *)field(col, row) : NULL;
}

/* The default text: a string or '-', a number in decimal and its unit,
 * yes/no. */
static const char *txt_default(const struct col *col, const void *row, char *buf, size_t len)
{
	const char *unit = col->unit ? col->unit : "";

	switch (col->type) {
	case COL_STR:
		return or_dash(col_str(col, row));
	case COL_I32:
		snprintf(buf, len, "%" PRId64 "%s", col_i64(col, row), unit);
		break;
	case COL_BOOL:
		snprintf(buf, len, "%s", col_u64(col, row) ? "yes" : "no");
		break;
	default:
		snprintf(buf, len, "%" PRIu64 "%s", col_u64(col, row), unit);
	}
	return buf;
}

const char *txt_bytes(const struct col *col, const void *row, size_t idx, char *buf, size_t len)
{
	return fmt_bytes(col_u64(col, row), buf, len);
}

const char *txt_speed(const struct col *col, const void *row, size_t idx, char *buf, size_t len)
{
	return fmt_speed(col_u64(col, row), buf, len);
}

const char *txt_numa(const struct col *col, const void *row, size_t idx, char *buf, size_t len)
{
	return fmt_numa((int)col_i64(col, row), buf, len);
}

const char *txt_duration(const struct col *col, const void *row, size_t idx, char *buf, size_t len)
{
	return fmt_duration(col_u64(col, row), buf, len);
}

/* A string as it is, "" for none (no '-'). */
const char *txt_raw(const struct col *col, const void *row, size_t idx, char *buf, size_t len)
{
	const char *s = col_str(col, row);

	return s ? s : "";
}

/* The row's index in its section. */
const char *txt_index(const struct col *col, const void *row, size_t idx, char *buf, size_t len)
{
	snprintf(buf, len, "%zu", idx);
	return buf;
}

/* A number, '-' for 0. */
const char *txt_zero_dash(const struct col *col, const void *row, size_t idx, char *buf, size_t len)
{
	uint64_t v = col_u64(col, row);

	if (v)
		snprintf(buf, len, "%" PRIu64, v);
	else
		snprintf(buf, len, "-");
	return buf;
}

/* The table's columns: those with a header (with -v also the verbose ones),
 * in the order of their pos. Returns how many. */
static size_t table_cols(const struct section *s, bool verbose, const struct col **out)
{
	size_t n = 0;

	for (size_t i = 0; i < s->ncols && n < TBL_MAX_COLS; i++) {
		const struct col *col = &s->cols[i];
		size_t k = n++;

		if (!col->hdr || ((col->flags & COL_VERBOSE) && !verbose)) {
			n--;
			continue;
		}
		for (; k > 0 && out[k - 1]->pos > col->pos; k--)
			out[k] = out[k - 1];
		out[k] = col;
	}
	return n;
}

void section_table(const struct section *s, void *const *rows, size_t n, bool verbose)
{
	const struct col *cols[TBL_MAX_COLS];
	const char *hdr[TBL_MAX_COLS + 1];
	size_t nc = table_cols(s, verbose, cols);
	struct table t;
	char buf[256];

	for (size_t k = 0; k < nc; k++)
		hdr[k] = cols[k]->hdr;
	hdr[nc] = NULL;
	tbl_init(&t, hdr);
	for (size_t i = 0; i < n; i++) {
		for (size_t k = 0; k < nc; k++) {
			const char *v = cols[k]->text
						? cols[k]->text(cols[k], rows[i], i, buf, sizeof(buf))
						: txt_default(cols[k], rows[i], buf, sizeof(buf));

			tbl_cell(&t, "%s", v);
		}
	}
	tbl_print(&t, stdout);
	tbl_free(&t);
}

/* The row's members, in the order of the description. */
static void json_members(struct jw *j, const struct section *s, const void *row)
{
	for (size_t k = 0; k < s->ncols; k++) {
		const struct col *col = &s->cols[k];

		if (!col->key)
			continue;
		if (col->json) {
			col->json(j, col, row);
			continue;
		}
		switch (col->type) {
		case COL_STR:
			jw_str(j, col->key, col_str(col, row));
			break;
		case COL_I32:
			jw_i64(j, col->key, col_i64(col, row));
			break;
		case COL_BOOL:
			jw_bool(j, col->key, col_u64(col, row) != 0);
			break;
		default:
			jw_u64(j, col->key, col_u64(col, row));
		}
	}
}

void section_json(struct jw *j, const struct section *s, void *const *rows, size_t n)
{
	jw_open(j, s->key, '[');
	for (size_t i = 0; i < n; i++) {
		jw_open(j, NULL, '{');
		json_members(j, s, rows[i]);
		jw_close(j, '}');
	}
	jw_close(j, ']');
}

void section_object(struct jw *j, const struct section *s, const void *row)
{
	jw_open(j, s->key, '{');
	json_members(j, s, row);
	jw_close(j, '}');
}

void section_out(struct ctl *c, struct jw *j, const struct section *s, void *const *rows,
		 size_t n)
{
	if (c->json)
		section_json(j, s, rows, n);
	else
		section_table(s, rows, n, c->verbose);
}

void section_print(struct ctl *c, const struct section *s, void *const *rows, size_t n)
{
	struct jw j;

	if (c->json) {
		jw_begin(&j);
		section_json(&j, s, rows, n);
		jw_end(&j);
	} else {
		section_table(s, rows, n, c->verbose);
	}
}
