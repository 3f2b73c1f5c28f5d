// SPDX-License-Identifier: MIT
/*
 * The typed parameter registry (params.h).
 *
 * Precedence is applied whatever the order of loading: a value from a source
 * of lower precedence than the one that set the parameter is validated (its
 * errors are reported) but not stored. Ranks: default 0, file and reload 1,
 * environment 2, command line 3. The file and the environment are applied all
 * or nothing: one bad line or variable leaves every parameter unchanged.
 *
 * INT values: decimal or 0x hexadecimal; with unit "bytes", a binary suffix
 * K, M, G, T (also KB/KiB..., any case, optional blank before it). A negative
 * value is accepted only when the bounds are in force and min is negative.
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "params.h"
#include "util.h"

#define VALUE_SHOWN 128 /* characters of a bad value quoted in a message */

/* Copies s without leading and trailing blanks into a new string. */
static char *strdup_trim(const char *s)
{
	const char *e;
	char *d;

	while (isspace((unsigned char)*s))
		s++;
	e = s + strlen(s);
	while (e > s && isspace((unsigned char)e[-1]))
		e--;
	d = malloc((size_t)(e - s) + 1);
	if (!d)
		return NULL;
	memcpy(d, s, (size_t)(e - s));
	d[e - s] = '\0';
	return d;
}

static bool unit_is_bytes(const struct r2_param_def *d)
{
	return d->unit && !strcmp(d->unit, "bytes");
}

static int suffix_shift(const char *s, int *shift)
{
	static const char units[] = "KMGT";
	const char *u;

	while (isspace((unsigned char)*s))
		s++;
	if (!*s) {
		*shift = 0;
		return 0;
	}
	if (!strcasecmp(s, "B")) {
		*shift = 0;
		return 0;
	}
	u = strchr(units, toupper((unsigned char)*s));
	if (!u)
		return -EINVAL;
	if (s[1] && strcasecmp(s + 1, "B") && strcasecmp(s + 1, "iB"))
		return -EINVAL;
	*shift = 10 * (int)(u - units + 1);
	return 0;
}

/*
 * Parses an already trimmed integer: optional sign, decimal or 0x hex, and a
 * size suffix when sizes is set. -EINVAL malformed, -ERANGE beyond int64.
 */
static int parse_int(const char *s, bool sizes, int64_t *out)
{
	bool neg = false;
	uint64_t mag, lim;
	int shift = 0;
	char *end;

	if (*s == '-' || *s == '+') {
		neg = *s == '-';
		s++;
	}
	if (!isxdigit((unsigned char)*s)) /* no blank, no second sign */
		return -EINVAL;
	errno = 0;
	if (s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
		if (!isxdigit((unsigned char)s[2]))
			return -EINVAL;
		mag = strtoull(s + 2, &end, 16);
	} else {
		if (!isdigit((unsigned char)*s))
			return -EINVAL;
		mag = strtoull(s, &end, 10);
	}
	if (errno == ERANGE)
		return -ERANGE;
	if (*end) {
		if (!sizes || suffix_shift(end, &shift) < 0)
			return -EINVAL;
	}
	if (shift && mag > (UINT64_MAX >> shift))
		return -ERANGE;
	mag <<= shift;
	lim = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
	if (mag > lim)
		return -ERANGE;
	*out = neg ? (int64_t)(0 - mag) : (int64_t)mag;
	return 0;
}

int r2_parse_size(const char *s, int64_t *out)
{
	char *t;
	int ret;

	if (!s || !out)
		return -EINVAL;
	t = strdup_trim(s);
	if (!t)
		return -ENOMEM;
	ret = -EINVAL;
	if (*t && *t != '-' && *t != '+')
		ret = parse_int(t, true, out);
	free(t);
	return ret;
}

static int parse_bool(const char *s, bool *out)
{
	static const char *const yes[] = { "1", "true", "yes", "on" };
	static const char *const no[] = { "0", "false", "no", "off" };

	for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++) {
		if (!strcasecmp(s, yes[i])) {
			*out = true;
			return 0;
		}
		if (!strcasecmp(s, no[i])) {
			*out = false;
			return 0;
		}
	}
	return -EINVAL;
}

/* Finds s among "a|b|c"; returns a new string with the canonical spelling. */
static char *enum_match(const char *values, const char *s)
{
	size_t sl = strlen(s);
	const char *p = values;

	if (!values || !sl)
		return NULL;
	for (;;) {
		const char *bar = strchr(p, '|');
		size_t l = bar ? (size_t)(bar - p) : strlen(p);

		if (l == sl && !strncasecmp(p, s, l))
			return strndup(p, l);
		if (!bar)
			return NULL;
		p = bar + 1;
	}
}

/*
 * Parses value for def into *v (v->s is allocated for STRING/ENUM). key is
 * the name the user wrote, used in messages.
 */
static int parse_value(const struct r2_param_def *d, const char *key, const char *value,
		       struct r2_param_val *v, char *err, size_t errlen)
{
	char *t = strdup_trim(value ? value : "");
	int ret = 0;

	if (!t) {
		r2_seterr(err, errlen, "%s: out of memory", key);
		return -ENOMEM;
	}
	memset(v, 0, sizeof(*v));
	switch (d->type) {
	case R2_PT_INT: {
		bool sizes = unit_is_bytes(d);
		bool bounded = d->min <= d->max;

		ret = parse_int(t, sizes, &v->i);
		if (ret == -EINVAL) {
			if (sizes)
				r2_seterr(err, errlen,
				       "%s: \"%.*s\" is not a size (an integer with an optional "
				       "K, M, G or T suffix)",
				       key, VALUE_SHOWN, t);
			else
				r2_seterr(err, errlen, "%s: \"%.*s\" is not an integer", key,
				       VALUE_SHOWN, t);
			break;
		}
		if (ret == -ERANGE) {
			r2_seterr(err, errlen, "%s: \"%.*s\" is too large", key, VALUE_SHOWN, t);
			break;
		}
		if (v->i < 0 && !(bounded && d->min < 0)) {
			r2_seterr(err, errlen, "%s: \"%.*s\" must not be negative", key, VALUE_SHOWN,
			       t);
			ret = -ERANGE;
			break;
		}
		if (bounded && (v->i < d->min || v->i > d->max)) {
			r2_seterr(err, errlen,
			       "%s: \"%.*s\" is out of range (must be between %lld and %lld%s%s)",
			       key, VALUE_SHOWN, t, (long long)d->min, (long long)d->max,
			       d->unit ? " " : "", d->unit ? d->unit : "");
			ret = -ERANGE;
		}
		break;
	}
	case R2_PT_BOOL:
		ret = parse_bool(t, &v->b);
		if (ret < 0)
			r2_seterr(err, errlen,
			       "%s: \"%.*s\" is not a boolean (use 1/0, true/false, yes/no or "
			       "on/off)",
			       key, VALUE_SHOWN, t);
		break;
	case R2_PT_DOUBLE: {
		char *end;

		errno = 0;
		v->d = strtod(t, &end);
		if (!*t || *end || isspace((unsigned char)*t)) {
			r2_seterr(err, errlen, "%s: \"%.*s\" is not a number", key, VALUE_SHOWN, t);
			ret = -EINVAL;
		} else if (!isfinite(v->d) || errno == ERANGE) {
			r2_seterr(err, errlen, "%s: \"%.*s\" is not a finite number", key, VALUE_SHOWN,
			       t);
			ret = errno == ERANGE ? -ERANGE : -EINVAL;
		}
		break;
	}
	case R2_PT_STRING:
		v->s = t;
		t = NULL;
		break;
	case R2_PT_ENUM:
		v->s = enum_match(d->enum_values, t);
		if (!v->s) {
			r2_seterr(err, errlen, "%s: \"%.*s\" is not one of %s", key, VALUE_SHOWN, t,
			       d->enum_values ? d->enum_values : "(no values)");
			ret = -EINVAL;
		}
		break;
	default:
		r2_seterr(err, errlen, "%s: parameter has an unknown type %d", key, (int)d->type);
		ret = -EINVAL;
	}
	free(t);
	if (ret < 0) {
		free(v->s);
		v->s = NULL;
	}
	return ret;
}

static int source_rank(enum r2_param_source s)
{
	switch (s) {
	case R2_PS_DEFAULT:
		return 0;
	case R2_PS_FILE:
	case R2_PS_RELOAD:
		return 1;
	case R2_PS_ENV:
		return 2;
	case R2_PS_CLI:
		return 3;
	}
	return 0;
}

int r2_params_init(struct r2_params *p, const struct r2_param_def *defs, int n, char *err,
		   size_t errlen)
{
	int ret;

	memset(p, 0, sizeof(*p));
	if (n < 0 || n > R2_PARAM_MAX || (n && !defs)) {
		r2_seterr(err, errlen, "%d parameters given, at most %d are supported", n,
		       R2_PARAM_MAX);
		return -EINVAL;
	}
	p->defs = defs;
	for (int i = 0; i < n; i++) {
		const struct r2_param_def *d = &defs[i];
		char msg[256];

		if (!d->name) {
			r2_seterr(err, errlen, "parameter %d has no name", i);
			ret = -EINVAL;
			goto fail;
		}
		ret = parse_value(d, d->name, d->defval ? d->defval : "", &p->v[i], msg,
				  sizeof(msg));
		if (ret < 0) {
			r2_seterr(err, errlen, "default value of %s: %s", d->name, msg);
			ret = -EINVAL;
			goto fail;
		}
		p->v[i].src = R2_PS_DEFAULT;
		p->n = i + 1;
	}
	p->n = n;
	return 0;
fail:
	r2_params_free(p);
	p->defs = defs;
	return ret;
}

void r2_params_free(struct r2_params *p)
{
	if (!p)
		return;
	for (int i = 0; i < p->n && i < R2_PARAM_MAX; i++) {
		free(p->v[i].s);
		p->v[i].s = NULL;
	}
	free(p->file);
	p->file = NULL;
	p->n = 0;
}

static bool cli_eq(const char *cli, const char *key)
{
	while (*cli == '-')
		cli++;
	while (*key == '-')
		key++;
	return *key && !strcmp(cli, key);
}

int r2_params_find(const struct r2_params *p, const char *key)
{
	if (!p || !key || !*key)
		return -ENOENT;
	for (int i = 0; i < p->n; i++) {
		const struct r2_param_def *d = &p->defs[i];

		if (!strcmp(d->name, key) || (d->env && !strcmp(d->env, key)) ||
		    (d->cli && cli_eq(d->cli, key)))
			return i;
	}
	return -ENOENT;
}

static int set_idx(struct r2_params *p, int idx, const char *key, const char *value,
		   enum r2_param_source src, char *err, size_t errlen)
{
	struct r2_param_val v;
	int ret;

	ret = parse_value(&p->defs[idx], key, value, &v, err, errlen);
	if (ret < 0)
		return ret;
	if (source_rank(src) < source_rank(p->v[idx].src)) {
		free(v.s); /* a source of higher precedence has set it */
		return 0;
	}
	free(p->v[idx].s);
	v.src = src;
	p->v[idx] = v;
	return 0;
}

int r2_params_set(struct r2_params *p, const char *key, const char *value,
		  enum r2_param_source src, char *err, size_t errlen)
{
	int idx = r2_params_find(p, key);

	if (idx < 0) {
		r2_seterr(err, errlen, "unknown parameter \"%.*s\"", VALUE_SHOWN, key ? key : "");
		return -ENOENT;
	}
	return set_idx(p, idx, key, value, src, err, errlen);
}

/* A deep copy of p's values, changed by a loader and committed only on success. */
static struct r2_params *params_clone(const struct r2_params *p)
{
	struct r2_params *c = calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	c->defs = p->defs;
	c->n = p->n;
	for (int i = 0; i < p->n; i++) {
		c->v[i] = p->v[i];
		c->v[i].s = NULL;
		if (p->v[i].s) {
			c->v[i].s = strdup(p->v[i].s);
			if (!c->v[i].s) {
				r2_params_free(c);
				free(c);
				return NULL;
			}
		}
	}
	return c;
}

static void params_commit(struct r2_params *p, struct r2_params *c)
{
	for (int i = 0; i < p->n; i++)
		free(p->v[i].s);
	memcpy(p->v, c->v, sizeof(p->v));
	free(c->file);
	free(c);
}

static void params_discard(struct r2_params *c)
{
	r2_params_free(c);
	free(c);
}

static char *trim_inplace(char *s)
{
	char *e;

	while (isspace((unsigned char)*s))
		s++;
	e = s + strlen(s);
	while (e > s && isspace((unsigned char)e[-1]))
		*--e = '\0';
	return s;
}

int r2_params_load_file(struct r2_params *p, const char *path, char *err, size_t errlen)
{
	struct r2_params *c = NULL;
	char *line = NULL, *file = NULL;
	size_t cap = 0;
	unsigned lineno = 0;
	FILE *fp;
	int ret;

	fp = fopen(path, "re");
	if (!fp) {
		ret = -errno;
		r2_seterr(err, errlen, "%s: %s", path, strerror(-ret));
		return ret;
	}
	c = params_clone(p);
	file = strdup(path);
	if (!c || !file) {
		r2_seterr(err, errlen, "%s: out of memory", path);
		ret = -ENOMEM;
		goto out;
	}
	for (;;) {
		char msg[512];
		char *s, *eq, *key, *val, *hash;
		int idx;

		ssize_t len;

		errno = 0;
		len = getline(&line, &cap, fp);
		if (len < 0) {
			ret = errno ? -errno : 0;
			if (ret)
				r2_seterr(err, errlen, "%s: %s", path, strerror(-ret));
			break;
		}
		lineno++;
		if (strlen(line) != (size_t)len) {
			r2_seterr(err, errlen, "%s:%u: the line contains a NUL byte", path, lineno);
			ret = -EINVAL;
			break;
		}
		hash = strchr(line, '#');
		if (hash)
			*hash = '\0';
		s = trim_inplace(line);
		if (!*s)
			continue;
		if (*s == '[') {
			ret = 0; /* a [section]: the rest of the file is its reader's */
			break;
		}
		eq = strchr(s, '=');
		if (!eq) {
			r2_seterr(err, errlen, "%s:%u: expected \"key = value\", got \"%.*s\"", path,
			       lineno, VALUE_SHOWN, s);
			ret = -EINVAL;
			break;
		}
		*eq = '\0';
		key = trim_inplace(s);
		val = eq + 1;
		if (!*key) {
			r2_seterr(err, errlen, "%s:%u: a key is missing before \"=\"", path, lineno);
			ret = -EINVAL;
			break;
		}
		/* keys by name or environment name, not by command-line option */
		idx = r2_params_find(c, key);
		if (idx >= 0 && strcmp(c->defs[idx].name, key) &&
		    !(c->defs[idx].env && !strcmp(c->defs[idx].env, key)))
			idx = -ENOENT;
		if (idx < 0) {
			r2_seterr(err, errlen, "%s:%u: unknown parameter \"%.*s\"", path, lineno,
			       VALUE_SHOWN, key);
			ret = -EINVAL;
			break;
		}
		ret = set_idx(c, idx, key, val, R2_PS_FILE, msg, sizeof(msg));
		if (ret < 0) {
			r2_seterr(err, errlen, "%s:%u: %s", path, lineno, msg);
			ret = ret == -ENOMEM ? ret : -EINVAL;
			break;
		}
	}
out:
	fclose(fp);
	free(line);
	if (ret < 0 || !c) {
		free(file);
		if (c)
			params_discard(c);
		return ret;
	}
	params_commit(p, c);
	free(p->file);
	p->file = file;
	return 0;
}

int r2_params_load_env(struct r2_params *p, char *const *envp,
		       void (*unknown_cb)(const char *name, void *arg), void *arg, char *err,
		       size_t errlen)
{
	struct r2_params *c;
	int ret = 0;

	if (!envp)
		return 0;
	c = params_clone(p);
	if (!c) {
		r2_seterr(err, errlen, "out of memory");
		return -ENOMEM;
	}
	for (char *const *e = envp; *e; e++) {
		const char *eq = strchr(*e, '=');
		char name[256];
		size_t nl;
		int idx = -ENOENT;

		if (strncmp(*e, "R2CCL_", 6) || !eq)
			continue;
		nl = (size_t)(eq - *e);
		if (nl < sizeof(name)) {
			memcpy(name, *e, nl);
			name[nl] = '\0';
			for (int i = 0; i < c->n; i++) {
				if (c->defs[i].env && !strcmp(c->defs[i].env, name)) {
					idx = i;
					break;
				}
			}
		} else {
			snprintf(name, sizeof(name), "%.*s", (int)sizeof(name) - 1, *e);
		}
		if (idx < 0) {
			if (unknown_cb)
				unknown_cb(name, arg);
			continue;
		}
		ret = set_idx(c, idx, name, eq + 1, R2_PS_ENV, err, errlen);
		if (ret < 0)
			break;
	}
	if (ret < 0) {
		params_discard(c);
		return ret;
	}
	params_commit(p, c);
	return 0;
}

static bool idx_ok(const struct r2_params *p, int idx)
{
	return p && idx >= 0 && idx < p->n;
}

int64_t r2_param_int(const struct r2_params *p, int idx)
{
	return idx_ok(p, idx) ? p->v[idx].i : 0;
}

bool r2_param_bool(const struct r2_params *p, int idx)
{
	return idx_ok(p, idx) ? p->v[idx].b : false;
}

double r2_param_double(const struct r2_params *p, int idx)
{
	return idx_ok(p, idx) ? p->v[idx].d : 0.0;
}

const char *r2_param_str(const struct r2_params *p, int idx)
{
	if (!idx_ok(p, idx) || !p->v[idx].s)
		return "";
	return p->v[idx].s;
}

const char *r2_param_source_name(enum r2_param_source s)
{
	switch (s) {
	case R2_PS_DEFAULT:
		return "default";
	case R2_PS_FILE:
		return "file";
	case R2_PS_ENV:
		return "env";
	case R2_PS_CLI:
		return "cli";
	case R2_PS_RELOAD:
		return "reload";
	}
	return "unknown";
}

void r2_param_format(const struct r2_params *p, int idx, char *buf, size_t len)
{
	if (!buf || !len)
		return;
	if (!idx_ok(p, idx)) {
		buf[0] = '\0';
		return;
	}
	switch (p->defs[idx].type) {
	case R2_PT_INT:
		snprintf(buf, len, "%lld", (long long)p->v[idx].i);
		break;
	case R2_PT_BOOL:
		snprintf(buf, len, "%s", p->v[idx].b ? "true" : "false");
		break;
	case R2_PT_DOUBLE:
		snprintf(buf, len, "%.17g", p->v[idx].d);
		/* shortest form that reads back the same */
		for (int prec = 1; prec <= 17; prec++) {
			char tmp[64];

			snprintf(tmp, sizeof(tmp), "%.*g", prec, p->v[idx].d);
			if (strtod(tmp, NULL) == p->v[idx].d) {
				snprintf(buf, len, "%s", tmp);
				break;
			}
		}
		break;
	default:
		snprintf(buf, len, "%s", r2_param_str(p, idx));
	}
}

void r2_params_dump(const struct r2_params *p, void (*line_cb)(const char *line, void *arg),
		    void *arg)
{
	if (!p || !line_cb)
		return;
	for (int i = 0; i < p->n; i++) {
		const struct r2_param_def *d = &p->defs[i];
		char val[512], line[768];
		bool quote = (d->type == R2_PT_STRING) && !*r2_param_str(p, i);

		r2_param_format(p, i, val, sizeof(val));
		snprintf(line, sizeof(line), "%s = %s%s%s [%s]", d->name, quote ? "\"\"" : val,
			 d->unit ? " " : "", d->unit ? d->unit : "",
			 r2_param_source_name(p->v[i].src));
		line_cb(line, arg);
	}
}
