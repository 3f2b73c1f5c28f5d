/* SPDX-License-Identifier: MIT */
/* libnccl: NCCL's result codes from r2ccl errors, the last error's text,
 * ncclGetVersion, and the NCCL_DEBUG lines the user asked for. */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include "nccl_int.h"

ncclResult_t nccl_result_of(int e)
{
	if (e >= 0)
		return ncclSuccess;
	switch (e) {
	case -EINVAL:
	case -EOVERFLOW:
	case -ERANGE:
	case R2CCL_E_BAD_BUFFER:
		return ncclInvalidArgument;
	case R2CCL_E_MISMATCH:
	case R2CCL_E_DUP_RANK:
	case -EBUSY:
		return ncclInvalidUsage;
	case R2CCL_E_PEER_GONE:
	case R2CCL_E_NO_PATH:
	case R2CCL_E_COMM_BROKEN:
	case R2CCL_E_BOOTSTRAP:
	case -ETIMEDOUT:
		return ncclRemoteError;
	case R2CCL_E_PROTO_VERSION:
	case R2CCL_E_PROTOCOL:
		return ncclInternalError;
	case -ENODEV:
		return ncclUnhandledCudaError;
	default:
		/* the daemon gone or unreachable, out of memory, quotas,
		 * anything the system refused */
		return ncclSystemError;
	}
}

const char *ncclGetErrorString(ncclResult_t r)
{
	switch (r) {
	case ncclSuccess:
		return "no error";
	case ncclUnhandledCudaError:
		return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
	case ncclSystemError:
		return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
	case ncclInternalError:
		return "internal error - please report this issue to the R2CCL developers";
	case ncclInvalidArgument:
		return "invalid argument (run with NCCL_DEBUG=WARN for details)";
	case ncclInvalidUsage:
		return "invalid usage (run with NCCL_DEBUG=WARN for details)";
	case ncclRemoteError:
		return "remote process exited or there was a network error";
	case ncclInProgress:
		return "NCCL operation in progress";
	default:
		return "unknown result code";
	}
}
NCCL_ALIAS(ncclGetErrorString);

static __thread char thread_err[256];

ncclResult_t nccl_fail(struct ncclComm *comm, ncclResult_t res, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(thread_err, sizeof(thread_err), fmt, ap);
	va_end(ap);
	if (comm)
		snprintf(comm->last_err, sizeof(comm->last_err), "%s", thread_err);
	nccl_log(NCCL_LOG_WARN, "%s", thread_err);
	return res;
}

void nccl_set_thread_error(const char *text)
{
	if (text != thread_err)
		snprintf(thread_err, sizeof(thread_err), "%s", text);
}

ncclResult_t nccl_fail_r2(struct ncclComm *comm, int e, const char *what)
{
	return nccl_fail(comm, nccl_result_of(e), "%s: %s", what, r2ccl_strerror(e));
}

const char *ncclGetLastError(ncclComm_t comm)
{
	if (comm && comm->last_err[0])
		return comm->last_err;
	return thread_err;
}
NCCL_ALIAS(ncclGetLastError);

ncclResult_t ncclGetVersion(int *version)
{
	if (!version)
		return nccl_fail(NULL, ncclInvalidArgument, "ncclGetVersion: version is NULL");
	*version = NCCL_VERSION_CODE;
	return ncclSuccess;
}
NCCL_ALIAS(ncclGetVersion);

/* ---- NCCL_DEBUG ---- */

static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static bool log_ready; /* NCCL_DEBUG read (again after ncclResetDebugInit) */
static enum nccl_log_level log_lvl;
static FILE *log_file;

static void log_init(void)
{
	const char *v = getenv("NCCL_DEBUG"), *f = getenv("NCCL_DEBUG_FILE");

	log_lvl = NCCL_LOG_NONE;
	if (v) {
		if (!strcasecmp(v, "VERSION"))
			log_lvl = NCCL_LOG_VERSION;
		else if (!strcasecmp(v, "WARN"))
			log_lvl = NCCL_LOG_WARN;
		else if (!strcasecmp(v, "INFO"))
			log_lvl = NCCL_LOG_INFO;
		else if (!strcasecmp(v, "TRACE"))
			log_lvl = NCCL_LOG_TRACE;
	}
	log_file = stderr;
	if (f && f[0] && log_lvl != NCCL_LOG_NONE) {
		/* NCCL's %h (hostname) and %p (pid) */
		char path[512], host[128] = "";
		size_t o = 0;

		gethostname(host, sizeof(host) - 1);
		for (const char *s = f; *s && o < sizeof(path) - 1; s++) {
			if (s[0] == '%' && s[1] == 'h') {
				o += (size_t)snprintf(path + o, sizeof(path) - o, "%s", host);
				s++;
			} else if (s[0] == '%' && s[1] == 'p') {
				o += (size_t)snprintf(path + o, sizeof(path) - o, "%d", (int)getpid());
				s++;
			} else {
				path[o++] = *s;
			}
			if (o >= sizeof(path))
				o = sizeof(path) - 1;
		}
		path[o] = 0;
		FILE *fp = fopen(path, "a");
		if (fp) {
			setvbuf(fp, NULL, _IOLBF, 0);
			log_file = fp;
		}
	}
	if (log_lvl >= NCCL_LOG_VERSION)
		fprintf(log_file, "NCCL version %d.%d.%d (R2CCL %s, over r2ccld)\n", NCCL_MAJOR,
			NCCL_MINOR, NCCL_PATCH, R2CCL_VERSION_STRING);
}

enum nccl_log_level nccl_log_level(void)
{
	enum nccl_log_level l;

	if (__atomic_load_n(&log_ready, __ATOMIC_ACQUIRE))
		return log_lvl;
	pthread_mutex_lock(&log_lock);
	if (!log_ready) {
		log_init();
		__atomic_store_n(&log_ready, true, __ATOMIC_RELEASE);
	}
	l = log_lvl;
	pthread_mutex_unlock(&log_lock);
	return l;
}

void ncclResetDebugInit(void)
{
	/* NCCL re-reads NCCL_DEBUG on the next use; so do we */
	pthread_mutex_lock(&log_lock);
	if (log_file && log_file != stderr)
		fclose(log_file);
	log_file = stderr;
	__atomic_store_n(&log_ready, false, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&log_lock);
}
NCCL_ALIAS(ncclResetDebugInit);

void nccl_log(enum nccl_log_level lvl, const char *fmt, ...)
{
	char host[64] = "";
	va_list ap;

	if (nccl_log_level() < lvl || lvl == NCCL_LOG_NONE)
		return;
	gethostname(host, sizeof(host) - 1);
	fprintf(log_file, "%s:%d:%d [r2ccl] NCCL %s ", host, (int)getpid(), (int)gettid(),
		lvl == NCCL_LOG_WARN ? "WARN" : lvl == NCCL_LOG_TRACE ? "TRACE" : "INFO");
	va_start(ap, fmt);
	vfprintf(log_file, fmt, ap);
	va_end(ap);
	fputc('\n', log_file);
}
