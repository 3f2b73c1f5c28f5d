// SPDX-License-Identifier: MIT
/*
 * verbs provider: RDMA devices and ports: discovery (which port serves a
 * netdev), the shared per-device context and protection domain, the
 * device's async events, and the port a rail opens on (verbs_int.h).
 */
#include "util.h"
#include "verbs_int.h"

/* ---- devices ---- */

pthread_mutex_t v_devs_lock = PTHREAD_MUTEX_INITIALIZER;
static struct vdev *g_devs;

static void *async_main(void *arg)
{
	struct vdev *d = arg;
	struct pollfd pf[2] = { { .fd = d->ctx->async_fd, .events = POLLIN },
				{ .fd = d->stop_fd, .events = POLLIN } };
	for (;;) {
		if (poll(pf, 2, -1) < 0 && errno != EINTR)
			break;
		if (pf[1].revents)
			break;
		struct ibv_async_event ev;
		while (ibv_get_async_event(d->ctx, &ev) == 0) {
			switch (ev.event_type) {
			case IBV_EVENT_QP_FATAL:
			case IBV_EVENT_QP_REQ_ERR:
			case IBV_EVENT_QP_ACCESS_ERR:
			case IBV_EVENT_PATH_MIG_ERR: {
				struct vqp *q = ev.element.qp ? ev.element.qp->qp_context : NULL;
				if (q) {
					atomic_store(&q->fatal, true);
					atomic_store(&q->tp->qp_event, true);
					r2_tp_efd_signal(q->tp->wfd);
				}
				log_warn("verbs %s: async event %s on qp %u", d->name,
					 ibv_event_type_str(ev.event_type),
					 ev.element.qp ? ev.element.qp->qp_num : 0);
				break;
			}
			case IBV_EVENT_PORT_ERR:
			case IBV_EVENT_PORT_ACTIVE:
			case IBV_EVENT_LID_CHANGE:
			case IBV_EVENT_GID_CHANGE:
			case IBV_EVENT_DEVICE_FATAL:
				log_info("verbs %s: async event %s (port %d)", d->name,
					 ibv_event_type_str(ev.event_type), ev.element.port_num);
				pthread_mutex_lock(&v_devs_lock);
				for (struct r2_tp *tp = d->tps; tp; tp = tp->dnext) {
					if (ev.event_type == IBV_EVENT_DEVICE_FATAL) {
						atomic_store(&tp->dev_fatal, true);
					} else if (ev.element.port_num == tp->port) {
						if (ev.event_type == IBV_EVENT_PORT_ERR)
							atomic_store(&tp->port_err, 1);
						else if (ev.event_type == IBV_EVENT_PORT_ACTIVE)
							atomic_store(&tp->port_err, 0);
						atomic_store(&tp->port_event, true);
					} else {
						continue;
					}
					r2_tp_efd_signal(tp->wfd);
				}
				pthread_mutex_unlock(&v_devs_lock);
				break;
			default:
				log_debug("verbs %s: async event %s", d->name,
					  ibv_event_type_str(ev.event_type));
				break;
			}
			ibv_ack_async_event(&ev);
		}
	}
	return NULL;
}

static void dev_free(struct vdev *d)
{
	if (d->started) {
		r2_tp_efd_signal(d->stop_fd);
		pthread_join(d->tid, NULL);
	}
	if (d->stop_fd >= 0)
		close(d->stop_fd);
	if (d->pd)
		ibv_dealloc_pd(d->pd);
	if (d->ctx)
		ibv_close_device(d->ctx);
	free(d);
}

void v_dev_put(struct vdev *d)
{
	pthread_mutex_lock(&v_devs_lock);
	if (--d->refs > 0) {
		pthread_mutex_unlock(&v_devs_lock);
		return;
	}
	for (struct vdev **pp = &g_devs; *pp; pp = &(*pp)->next)
		if (*pp == d) {
			*pp = d->next;
			break;
		}
	pthread_mutex_unlock(&v_devs_lock);
	dev_free(d); /* outside v_devs_lock: its async thread takes it */
}

static struct vdev *dev_get(const char *name, int *err)
{
	pthread_mutex_lock(&v_devs_lock);
	for (struct vdev *d = g_devs; d; d = d->next)
		if (!strcmp(d->name, name)) {
			d->refs++;
			pthread_mutex_unlock(&v_devs_lock);
			return d;
		}
	struct vdev *d = calloc(1, sizeof(*d));
	int num = 0;
	struct ibv_device **list = ibv_get_device_list(&num);
	*err = -ENODEV;
	if (!d || !list)
		goto fail;
	d->stop_fd = -1;
	snprintf(d->name, sizeof(d->name), "%s", name);
	for (int i = 0; i < num; i++)
		if (!strcmp(ibv_get_device_name(list[i]), name)) {
			d->ctx = ibv_open_device(list[i]);
			break;
		}
	if (!d->ctx)
		goto fail;
	d->pd = ibv_alloc_pd(d->ctx);
	d->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (!d->pd || d->stop_fd < 0) {
		*err = -ENOMEM;
		goto fail;
	}
	fcntl(d->ctx->async_fd, F_SETFL, fcntl(d->ctx->async_fd, F_GETFL) | O_NONBLOCK);
	if (r2_thread_create(&d->tid, async_main, d)) {
		*err = -EAGAIN;
		goto fail;
	}
	d->started = true;
	char tn[16];
	snprintf(tn, sizeof(tn), "r2ibv-%.9s", name);
	pthread_setname_np(d->tid, tn);
	d->refs = 1;
	d->next = g_devs;
	g_devs = d;
	ibv_free_device_list(list);
	pthread_mutex_unlock(&v_devs_lock);
	return d;
fail:
	if (list)
		ibv_free_device_list(list);
	pthread_mutex_unlock(&v_devs_lock);
	if (d)
		dev_free(d); /* never started its thread */
	return NULL;
}

/* ---- discovery ---- */

static int read_sysfs_line(const char *path, char *buf, size_t len)
{
	FILE *f = fopen(path, "re");
	if (!f)
		return -errno;
	if (!fgets(buf, (int)len, f)) {
		fclose(f);
		return -EIO;
	}
	fclose(f);
	buf[strcspn(buf, "\n")] = 0;
	return 0;
}

static int gid_table(struct ibv_context *ctx, uint8_t port, bool ib, struct r2v_gid_ent *out,
		     int max)
{
	struct ibv_port_attr pa;
	int n = 0;
	if (ibv_query_port(ctx, port, &pa))
		return -EIO;
	for (int i = 0; i < pa.gid_tbl_len && n < max; i++) {
		struct ibv_gid_entry ge;
		if (ibv_query_gid_ex(ctx, port, (uint32_t)i, &ge, 0))
			continue; /* empty entry */
		out[n].index = i;
		out[n].type = ge.gid_type == IBV_GID_TYPE_ROCE_V2 ? R2V_GID_ROCE_V2 :
			      ge.gid_type == IBV_GID_TYPE_ROCE_V1 && !ib ? R2V_GID_ROCE_V1 : R2V_GID_IB;
		memcpy(out[n].gid, ge.gid.raw, 16);
		out[n].ndev_ifindex = ge.ndev_ifindex;
		n++;
	}
	return n;
}

static bool sysfs_ib_of_netdev(const char *ifname, const char *dev)
{
	char path[512];
	snprintf(path, sizeof(path), "/sys/class/net/%s/device/infiniband/%s", ifname, dev);
	return access(path, F_OK) == 0;
}

/* Finds the device port for netdev ifname passing filter f. */
static int find_port(const char *ifname, const struct r2_nicfilter *f, char *dev, size_t devlen,
		     int *port_out)
{
	int num = 0, ret = -ENODEV;
	unsigned ifidx = ifname && *ifname ? if_nametoindex(ifname) : 0;
	struct ibv_device **list = ibv_get_device_list(&num);
	if (!list)
		return -ENODEV;
	for (int i = 0; i < num && ret; i++) {
		const char *name = ibv_get_device_name(list[i]);
		struct ibv_context *ctx = ibv_open_device(list[i]);
		struct ibv_device_attr da;
		if (!ctx)
			continue;
		if (ibv_query_device(ctx, &da)) {
			ibv_close_device(ctx);
			continue;
		}
		for (uint8_t p = 1; p <= da.phys_port_cnt && ret; p++) {
			struct ibv_port_attr pa;
			if (ibv_query_port(ctx, p, &pa) || !r2_nicfilter_match(f, name, p))
				continue;
			bool ib = pa.link_layer == IBV_LINK_LAYER_INFINIBAND;
			bool hit = false;
			if (ib) {
				hit = ifname && *ifname ? sysfs_ib_of_netdev(ifname, name) : true;
			} else {
				struct r2v_gid_ent ents[64];
				int n = gid_table(ctx, p, false, ents, 64);
				for (int k = 0; k < n && !hit; k++)
					hit = ifidx ? ents[k].ndev_ifindex == ifidx : true;
			}
			if (hit) {
				snprintf(dev, devlen, "%s", name);
				*port_out = p;
				ret = 0;
			}
		}
		ibv_close_device(ctx);
	}
	ibv_free_device_list(list);
	return ret;
}

static int parse_filter(const char *hca, struct r2_nicfilter *f)
{
	return r2_nicfilter_parse(hca && *hca ? hca : NULL, f);
}

int r2_verbs_probe(const char *ifname, const char *hca, char *dev, size_t devlen, int *port)
{
	struct r2_nicfilter f;
	char d[IBV_SYSFS_NAME_MAX];
	int p = 0;
	if (parse_filter(hca, &f))
		return -EINVAL;
	int r = find_port(ifname, &f, d, sizeof(d), &p);
	if (r)
		return r;
	if (dev && devlen)
		snprintf(dev, devlen, "%s", d);
	if (port)
		*port = p;
	return 0;
}

int verbs_probe(const struct r2_tp_config *cfg, struct r2_tp_choice *c)
{
	char d[IBV_SYSFS_NAME_MAX];
	int port = 0;
	int r = r2_verbs_probe(cfg->ifname, cfg->ib_hca, d, sizeof(d), &port);

	if (r == 0) {
		snprintf(c->dev, sizeof(c->dev), "%.40s:%d", d, port);
		snprintf(c->desc, sizeof(c->desc), "%.40s port %d", d, port);
	}
	return r;
}

/* The RDMA port of cfg->ifname that passes ib_hca, its device (shared,
 * refcounted), and what the port says: link layer, MTU, LID, GID (named
 * ib_gid_index, or the one of the rail's address), the netdev's MTU.
 * devname gets the device's name. 0 or a negative errno. */
int v_open_port(struct r2_tp *tp, char *devname, size_t devlen)
{
	struct r2_tp_config *c = &tp->cfg;
	int port = 0;
	int ret;

	struct r2_nicfilter f;
	if (parse_filter(c->ib_hca, &f)) {
		log_err("verbs: bad ib_hca filter");
		ret = -EINVAL;
		return ret;
	}
	ret = find_port(c->ifname, &f, devname, devlen, &port);
	if (ret) {
		log_debug("verbs: no RDMA device port for %s", c->ifname);
		return ret;
	}
	tp->dev = dev_get(devname, &ret);
	if (!tp->dev)
		return ret;
	tp->port = (uint8_t)port;
	struct ibv_port_attr pa;
	if (ibv_query_port(tp->dev->ctx, tp->port, &pa)) {
		ret = -EIO;
		return ret;
	}
	tp->link_layer = pa.link_layer == IBV_LINK_LAYER_INFINIBAND ? IBV_LINK_LAYER_INFINIBAND :
								      IBV_LINK_LAYER_ETHERNET;
	tp->active_mtu = r2v_mtu_valid(pa.active_mtu) ? pa.active_mtu : IBV_MTU_1024;
	tp->lid = pa.lid;
	bool ib = tp->link_layer == IBV_LINK_LAYER_INFINIBAND;
	struct r2v_gid_ent ents[256];
	int ng = gid_table(tp->dev->ctx, tp->port, ib, ents, 256);
	tp->gid_index = c->ib_gid_fixed ? c->ib_gid_index : r2v_gid_choose(ents, ng, c->addr.s_addr, ib);
	if (tp->gid_index < 0 && ib)
		tp->gid_index = 0;
	if (tp->gid_index < 0) {
		log_err("verbs %s: %s port %d has no GID for %s", c->ifname, devname, port,
			inet_ntoa(c->addr));
		ret = -EADDRNOTAVAIL;
		return ret;
	}
	union ibv_gid g;
	static const uint8_t zero_gid[16];
	if (tp->gid_index >= pa.gid_tbl_len || ibv_query_gid(tp->dev->ctx, tp->port, tp->gid_index, &g)) {
		log_err("verbs %s: %s port %d has no GID index %d (table of %d)", c->ifname, devname,
			port, tp->gid_index, pa.gid_tbl_len);
		ret = -EINVAL;
		return ret;
	}
	/* an unused entry reads as zeros (rxe answers any index): no address */
	if (!memcmp(g.raw, zero_gid, 16)) {
		log_err("verbs %s: %s port %d GID[%d] is empty", c->ifname, devname, port,
			tp->gid_index);
		ret = -EADDRNOTAVAIL;
		return ret;
	}
	memcpy(tp->gid, g.raw, 16);
	char mb[32], path[256];
	snprintf(path, sizeof(path), "/sys/class/net/%s/mtu", c->ifname);
	tp->netdev_mtu = read_sysfs_line(path, mb, sizeof(mb)) == 0 ? atoi(mb) : 0;
	return 0;
}
