// SPDX-License-Identifier: MIT
/*
 * r2cclctl rails, peers, events: the health of the rails and the paths to
 * the peers, and recent events, each section described once for the table
 * and the JSON.
 */
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "ctl.h"

/* A rail's state, "(drained)" after it when an operator drained it. */
static const char *rail_state(const struct col *col, const void *row, size_t idx, char *buf,
			      size_t len)
{
	const R2ccl__RailInfo *x = row;

	snprintf(buf, len, "%s%s", or_dash(x->state), x->drained ? " (drained)" : "");
	return buf;
}

#define RAIL(f) offsetof(R2ccl__RailInfo, f)
static const struct col rail_cols[] = {
	{ "nic", "NIC", 1, COL_STR, RAIL(nic) },
	{ "index", NULL, 0, COL_U32, RAIL(index) },
	{ "state", "STATE", 2, COL_STR, RAIL(state), rail_state },
	{ "drained", NULL, 0, COL_BOOL, RAIL(drained) },
	{ "transport", "TRANSPORT", 3, COL_STR, RAIL(transport) },
	{ "speed_mbps", ">SPEED", 4, COL_U64, RAIL(speed_mbps), txt_speed },
	{ "measured_mbps", ">MEASURED", 5, COL_U64, RAIL(measured_mbps), txt_speed },
	{ "tx_bytes_total", ">TX", 6, COL_U64, RAIL(tx_bytes_total), txt_bytes },
	{ "rx_bytes_total", ">RX", 7, COL_U64, RAIL(rx_bytes_total), txt_bytes },
	{ "errors_total", ">ERRORS", 8, COL_U64, RAIL(errors_total) },
	{ "state_changes_total", NULL, 0, COL_U64, RAIL(state_changes_total) },
	{ "state_since_s", "SINCE", 10, COL_U64, RAIL(state_since_s), txt_duration },
	{ "failovers_total", ">FAILOVERS", 9, COL_U64, RAIL(failovers_total) },
	{ "cause", "CAUSE", 11, COL_STR, RAIL(cause) },
};
static const struct section rails = { "rails", COLS(rail_cols) };

#define PEER(f) offsetof(R2ccl__PeerInfo, f)
static const struct col peer_cols[] = {
	{ "host", "HOST", 0, COL_STR, PEER(host) },
	{ "rail", "RAIL", 0, COL_STR, PEER(rail) },
	{ "address", "ADDRESS", 0, COL_STR, PEER(address) },
	{ "state", "STATE", 0, COL_STR, PEER(state) },
	{ "rtt_us", ">RTT", 0, COL_U64, PEER(rtt_us), NULL, NULL, 0, "us" },
	{ "last_heartbeat_ms", ">LAST-HB", 0, COL_U64, PEER(last_heartbeat_ms), NULL, NULL, 0,
	  "ms" },
	{ "missed_heartbeats", ">MISSED", 0, COL_U32, PEER(missed_heartbeats) },
	{ "comms", ">COMMS", 0, COL_U32, PEER(comms) },
	{ "errors_total", ">ERRORS", 0, COL_U64, PEER(errors_total) },
	{ "failovers_total", ">FAILOVERS", 0, COL_U64, PEER(failovers_total) },
	{ "cause", "CAUSE", 0, COL_STR, PEER(cause) },
};
static const struct section peers = { "peers", COLS(peer_cols) };

/* Local time with milliseconds. */
static const char *event_time(const struct col *col, const void *row, size_t idx, char *buf,
			      size_t len)
{
	uint64_t ms = col_u64(col, row);
	time_t s = (time_t)(ms / 1000);
	struct tm tm;
	char ts[32];

	if (localtime_r(&s, &tm))
		strftime(ts, sizeof(ts), "%Y-%m-%d %H:%M:%S", &tm);
	else
		snprintf(ts, sizeof(ts), "%" PRIu64, ms / 1000);
	snprintf(buf, len, "%s.%03u", ts, (unsigned)(ms % 1000));
	return buf;
}

#define EVENT(f) offsetof(R2ccl__Event, f)
static const struct col event_cols[] = {
	{ "seq", NULL, 0, COL_U64, EVENT(seq) },
	{ "time_unix_ms", "TIME", 0, COL_U64, EVENT(time_unix_ms), event_time },
	{ "severity", "SEVERITY", 0, COL_STR, EVENT(severity) },
	{ "kind", "KIND", 0, COL_STR, EVENT(kind) },
	{ "subject", "SUBJECT", 0, COL_STR, EVENT(subject) },
	{ "message", "MESSAGE", 0, COL_STR, EVENT(message), txt_raw },
};
static const struct section events = { "events", COLS(event_cols) };
static const struct section event_one = { "event", COLS(event_cols) }; /* --follow --json */

/* rails and peers: a section of the rails reply. */
static int rails_section(struct ctl *c, bool of_peers)
{
	R2ccl__RailsReply *rr = NULL;
	int r = get_rails(c, &rr);

	if (r)
		return r;
	if (of_peers)
		section_print(c, &peers, (void *const *)rr->peers, rr->n_peers);
	else
		section_print(c, &rails, (void *const *)rr->rails, rr->n_rails);
	r2ccl__rails_reply__free_unpacked(rr, NULL);
	return EXIT_OK;
}

int cmd_rails(struct ctl *c, int argc, char **argv)
{
	return rails_section(c, false);
}

int cmd_peers(struct ctl *c, int argc, char **argv)
{
	return rails_section(c, true);
}

/* events --follow: the events kept, then every new one as it comes (polled
 * twice a second), one line each (text), or one JSON object each
 * ({"schema_version": 1, "event": {...}}, one after the other), until interrupted or the
 * daemon goes away (exit 1 then, or 3 when it is not running at the start). */
static int events_follow(struct ctl *c)
{
	uint64_t since = 0;

	for (;;) {
		R2ccl__EventsRequest req = R2CCL__EVENTS_REQUEST__INIT;
		R2ccl__EventsReply *ev = NULL;
		int r;

		req.req_id = CTL_REQ_ID;
		req.since_seq = since;
		r = ctl_query_req(c, R2CCL__MSG_TYPE__MSG_EVENTS, &req.base,
				  R2CCL__MSG_TYPE__MSG_EVENTS_REPLY, &r2ccl__events_reply__descriptor,
				  (ProtobufCMessage **)&ev);
		if (r)
			return r;
		for (size_t i = 0; i < ev->n_events; i++) {
			const R2ccl__Event *e = ev->events[i];
			if (e->seq <= since)
				continue;
			if (c->json) {
				struct jw j;
				jw_begin(&j);
				section_object(&j, &event_one, e);
				jw_end(&j);
				putchar('\n');
			} else {
				char t[64], *subj = safe_text(e->subject), *msg = safe_text(e->message);
				printf("%s  %-5s  %-12s  %s: %s\n",
				       event_time(&event_cols[1], e, 0, t, sizeof(t)), e->severity,
				       e->kind, subj, msg);
				free(subj);
				free(msg);
			}
		}
		if (ev->last_seq > since)
			since = ev->last_seq;
		r2ccl__events_reply__free_unpacked(ev, NULL);
		if (fflush(stdout) != 0)
			return EXIT_OK; /* the reader went away */
		struct timespec ts = { 0, 500 * 1000 * 1000 };
		nanosleep(&ts, NULL);
	}
}

int cmd_events(struct ctl *c, int argc, char **argv)
{
	R2ccl__EventsReply *ev = NULL;
	struct jw j;
	int r;

	if (c->follow)
		return events_follow(c);

	r = ctl_query(c, R2CCL__MSG_TYPE__MSG_EVENTS, &r2ccl__events_request__descriptor,
		      R2CCL__MSG_TYPE__MSG_EVENTS_REPLY, &r2ccl__events_reply__descriptor,
		      (ProtobufCMessage **)&ev);
	if (r)
		return r;
	if (c->json) {
		jw_begin(&j);
		jw_u64(&j, "last_seq", ev->last_seq);
	}
	section_out(c, &j, &events, (void *const *)ev->events, ev->n_events);
	if (c->json)
		jw_end(&j);
	r2ccl__events_reply__free_unpacked(ev, NULL);
	return EXIT_OK;
}
