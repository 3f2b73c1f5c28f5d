/* SPDX-License-Identifier: MIT */
/*
 * A typed parameter registry (after NCCL's param.h): every parameter has a
 * name (config-file key, "hb_interval"), an environment name
 * ("R2CCL_HB_INTERVAL"), a command-line option ("--hb-interval"), a type, a
 * default, bounds, a unit and a help line. Sources, lowest precedence first:
 * default < configuration file < environment < command line. Every value can
 * be printed with its source at start-up. Malformed or out-of-range values and
 * unknown keys are errors (with a message in err), never silent defaults.
 */
#ifndef R2CCL_PARAMS_H
#define R2CCL_PARAMS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum r2_param_type {
	R2_PT_INT,    /* int64; accepts K/M/G/T suffixes (binary) when unit is "bytes" */
	R2_PT_BOOL,   /* 1/0, true/false, yes/no, on/off */
	R2_PT_DOUBLE, /* finite */
	R2_PT_STRING, /* any text (may be empty) */
	R2_PT_ENUM,   /* one of enum_values, "a|b|c" */
};

enum r2_param_source { R2_PS_DEFAULT = 0, R2_PS_FILE, R2_PS_ENV, R2_PS_CLI, R2_PS_RELOAD };

struct r2_param_def {
	const char *name; /* config key, lower_snake_case */
	const char *env;  /* R2CCL_... */
	const char *cli;  /* --long-option (without value) or NULL */
	enum r2_param_type type;
	const char *defval; /* textual default, parsed like any value */
	int64_t min, max;   /* inclusive bounds for INT (ignored when min > max) */
	const char *enum_values;
	const char *unit; /* "us", "ms", "bytes", ... or NULL */
	bool reloadable;  /* SIGHUP may change it */
	const char *help;
};

#define R2_PARAM_MAX 128

struct r2_param_val {
	enum r2_param_source src;
	int64_t i;
	double d;
	bool b;
	char *s; /* STRING and ENUM (owned) */
};

struct r2_params {
	const struct r2_param_def *defs;
	int n;
	char *file; /* path of the configuration file that was loaded, or NULL */
	struct r2_param_val v[R2_PARAM_MAX];
};

/* Sets every default; -EINVAL (message in err) if a default does not parse. */
int r2_params_init(struct r2_params *p, const struct r2_param_def *defs, int n, char *err,
		   size_t errlen);
void r2_params_free(struct r2_params *p); /* accepts NULL */

/* Looks up by name, env name or cli option (with or without leading "--"). */
int r2_params_find(const struct r2_params *p, const char *key);

/* Parses and stores value for key. -ENOENT unknown key, -EINVAL malformed,
 * -ERANGE out of bounds; err gets a sentence naming key, value and reason. */
int r2_params_set(struct r2_params *p, const char *key, const char *value,
		  enum r2_param_source src, char *err, size_t errlen);

/* "key = value" lines; '#' starts a comment; blank lines ignored; keys by
 * name or env name. -ENOENT if the file is missing (the caller decides whether
 * that matters), -EINVAL with "file:line: reason" for bad lines or keys. */
int r2_params_load_file(struct r2_params *p, const char *path, char *err, size_t errlen);

/* Every R2CCL_* variable of envp that names a parameter is applied. Unknown
 * R2CCL_* names are reported through unknown_cb (may be NULL) and skipped:
 * clients share the environment prefix. */
int r2_params_load_env(struct r2_params *p, char *const *envp,
		       void (*unknown_cb)(const char *name, void *arg), void *arg, char *err,
		       size_t errlen);

int64_t r2_param_int(const struct r2_params *p, int idx);
bool r2_param_bool(const struct r2_params *p, int idx);
double r2_param_double(const struct r2_params *p, int idx);
const char *r2_param_str(const struct r2_params *p, int idx);
const char *r2_param_source_name(enum r2_param_source s);

/* Formats the current value of idx as text (sizes stay in bytes). */
void r2_param_format(const struct r2_params *p, int idx, char *buf, size_t len);

/* Calls line_cb once per parameter: "name = value unit [source]", or
 * "name = value [source]" when there is no unit. */
void r2_params_dump(const struct r2_params *p, void (*line_cb)(const char *line, void *arg),
		    void *arg);

/* Parses "4M", "512K", "1G", "123" into bytes; -EINVAL/-ERANGE. */
int r2_parse_size(const char *s, int64_t *out);

#endif
