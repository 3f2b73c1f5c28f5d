// SPDX-License-Identifier: MIT
/* r2cclctl's aligned tables: cells made terminal-safe, '>' right-aligns. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctl.h"

void tbl_init(struct table *t, const char *const *hdr)
{
	memset(t, 0, sizeof(*t));
	while (hdr[t->ncols] && t->ncols < TBL_MAX_COLS) {
		t->hdr[t->ncols] = hdr[t->ncols];
		t->ncols++;
	}
	t->col = t->ncols;
}

void tbl_cell(struct table *t, const char *fmt, ...)
{
	char *raw = NULL;
	va_list ap;

	if (t->col == t->ncols) { /* new row */
		if (t->rows == t->cap) {
			size_t ncap = t->cap ? 2 * t->cap : 16;
			char **n = realloc(t->cells, ncap * (size_t)t->ncols * sizeof(*n));

			if (!n)
				goto oom;
			t->cells = n;
			t->cap = ncap;
		}
		t->rows++;
		t->col = 0;
	}
	va_start(ap, fmt);
	if (vasprintf(&raw, fmt, ap) < 0)
		raw = NULL;
	va_end(ap);
	if (!raw)
		goto oom;
	t->cells[(t->rows - 1) * (size_t)t->ncols + (size_t)t->col++] = safe_text(raw);
	free(raw);
	return;
oom:
	fputs("r2cclctl: out of memory\n", stderr);
	exit(EXIT_FAIL);
}

static void tbl_pad(FILE *f, size_t n)
{
	while (n--)
		fputc(' ', f);
}

void tbl_print(struct table *t, FILE *f)
{
	size_t w[TBL_MAX_COLS];

	for (int c = 0; c < t->ncols; c++) {
		const char *h = t->hdr[c] + (t->hdr[c][0] == '>');

		w[c] = strlen(h);
		for (size_t r = 0; r < t->rows; r++) {
			size_t cw = text_width(t->cells[r * (size_t)t->ncols + (size_t)c]);

			if (cw > w[c])
				w[c] = cw;
		}
	}
	for (size_t r = 0; r <= t->rows; r++) {
		for (int c = 0; c < t->ncols; c++) {
			bool right = t->hdr[c][0] == '>';
			const char *s = r == 0 ? t->hdr[c] + right
					       : t->cells[(r - 1) * (size_t)t->ncols + (size_t)c];
			size_t pad = w[c] - text_width(s);
			bool last = c == t->ncols - 1;

			if (right)
				tbl_pad(f, pad);
			fputs(s, f);
			if (!right && !last)
				tbl_pad(f, pad);
			if (!last)
				fputs("  ", f);
		}
		fputc('\n', f);
	}
}

void tbl_free(struct table *t)
{
	for (size_t i = 0; i < t->rows * (size_t)t->ncols; i++)
		free(t->cells[i]);
	free(t->cells);
	memset(t, 0, sizeof(*t));
}
