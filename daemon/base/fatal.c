// SPDX-License-Identifier: MIT
/*
 * What the daemon says when it dies of a fault: the signal, the faulting
 * address, the thread and a backtrace, on stderr (the journal), then the
 * default action (exit status 128+N, a core dump where the system keeps
 * them). Without it a crash leaves only "the daemon does not answer".
 *
 * The handler uses only async-signal-safe calls, with one exception that
 * glibc documents as safe once loaded: backtrace(), which is called once at
 * install time so that its libgcc is loaded outside the handler. The frames
 * are "r2ccld(+0xOFFSET)": `addr2line -f -e r2ccld 0xOFFSET` names them.
 *
 * Under AddressSanitizer the handler is not installed: its own report says
 * more.
 */
#include <execinfo.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "base/daemon.h"
#include "util.h"

#if defined(__SANITIZE_ADDRESS__)
void r2d_fatal_signals_install(void)
{
}
#else
static const struct {
	int sig;
	const char *name;
} fatal_sigs[] = {
	{ SIGSEGV, "SIGSEGV" }, { SIGBUS, "SIGBUS" },	{ SIGFPE, "SIGFPE" },
	{ SIGILL, "SIGILL" },	{ SIGABRT, "SIGABRT" },
};

/* The main thread's alternate stack: its stack overflow still gets the
 * message (the other threads' would die silently of the second fault). */
static char alt_stack[64 * 1024];

static size_t put_str(char *b, size_t n, size_t cap, const char *s)
{
	while (*s && n < cap)
		b[n++] = *s++;
	return n;
}

static size_t put_num(char *b, size_t n, size_t cap, unsigned long v, unsigned base)
{
	char t[24];
	int k = 0;

	do {
		t[k++] = "0123456789abcdef"[v % base];
		v /= base;
	} while (v && k < (int)sizeof(t));
	while (k && n < cap)
		b[n++] = t[--k];
	return n;
}

static void on_fatal(int sig, siginfo_t *si, void *uc)
{
	char b[256], tname[17] = "";
	const char *name = "?";
	void *frames[48];
	size_t n = 0;
	int nf;

	(void)uc;
	for (size_t i = 0; i < sizeof(fatal_sigs) / sizeof(fatal_sigs[0]); i++)
		if (fatal_sigs[i].sig == sig)
			name = fatal_sigs[i].name;
	prctl(PR_GET_NAME, tname, 0, 0, 0);
	n = put_str(b, n, sizeof(b), "<2>r2ccld: fatal signal ");
	n = put_num(b, n, sizeof(b), (unsigned long)sig, 10);
	n = put_str(b, n, sizeof(b), " (");
	n = put_str(b, n, sizeof(b), name);
	if (si->si_code <= 0) { /* kill(2), raise(3), abort(3): no address */
		n = put_str(b, n, sizeof(b), ") sent by pid ");
		n = put_num(b, n, sizeof(b), (unsigned long)si->si_pid, 10);
	} else {
		n = put_str(b, n, sizeof(b), ") at address 0x");
		n = put_num(b, n, sizeof(b), (unsigned long)si->si_addr, 16);
		n = put_str(b, n, sizeof(b), " (code ");
		n = put_num(b, n, sizeof(b), (unsigned long)si->si_code, 10);
		n = put_str(b, n, sizeof(b), ")");
	}
	n = put_str(b, n, sizeof(b), " in thread '");
	n = put_str(b, n, sizeof(b), tname);
	n = put_str(b, n, sizeof(b), "'; backtrace (addr2line -f -e r2ccld OFFSET):\n");
	if (write(STDERR_FILENO, b, n) == (ssize_t)n) {
		nf = backtrace(frames, (int)(sizeof(frames) / sizeof(frames[0])));
		backtrace_symbols_fd(frames, nf, STDERR_FILENO);
	}
	/* SA_RESETHAND made the action the default: re-raised, the signal is
	 * delivered when the handler returns (a fault re-executes anyway) */
	raise(sig);
}

void r2d_fatal_signals_install(void)
{
	struct sigaction sa;
	stack_t ss = { .ss_sp = alt_stack, .ss_size = sizeof(alt_stack) };
	void *one[1];

	backtrace(one, 1); /* loads libgcc now, not in the handler */
	sigaltstack(&ss, NULL);
	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = on_fatal;
	sa.sa_flags = SA_SIGINFO | SA_RESETHAND | SA_ONSTACK;
	sigemptyset(&sa.sa_mask);
	for (size_t i = 0; i < sizeof(fatal_sigs) / sizeof(fatal_sigs[0]); i++)
		sigaction(fatal_sigs[i].sig, &sa, NULL);
}
#endif
