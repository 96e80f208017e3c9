/*
 * DESIGN
 * - Signals, read every 250 ms (sooner when a PSI trigger fires):
 *     node:   MemAvailable (/proc/meminfo); PSI some/full avg10
 *             (/proc/pressure/memory, with a trigger "some 150ms in 1s"
 *             polled for POLLPRI where the kernel allows one);
 *     cgroup: the daemon's own memory cgroup (/proc/self/cgroup): v2
 *             memory.max / memory.high / memory.current / memory.pressure,
 *             v1 memory.limit_in_bytes / memory.usage_in_bytes and
 *             hierarchical_memory_limit; both less inactive file cache
 *             (memory.stat), which the kernel reclaims before it OOMs.
 *             tmpfs pages are charged to the cgroup of the process that
 *             touches them: the daemon's, so the hot tier counts there.
 * - Budget rule. available = min(node MemAvailable, cgroup limit - usage);
 *   used = hot bytes allocated + reserved. The hot tier may hold what it
 *   holds plus what is available beyond mem_reserve:
 *       target = clamp(used + available - mem_reserve, hot_min, hot_size)
 *   (mem_reserve=0: target = hot_size, only PSI counts). While PSI some
 *   avg10 is above PSI_SOME_LIMIT, tasks stall on memory whatever
 *   MemAvailable says: the target drops a further 10% of hot_size each
 *   second, down to hot_min.
 * - Shrink: a target below the budget (by at least `slack`, 1% of hot_size
 *   or a chunk) is applied at once; the evictor is woken and spills down to
 *   low_watermark x the new budget, clean chunks first; writers wait as for
 *   any full hot tier. Grow: only after no pressure for hold_ms (10 s), by
 *   at most 10% of hot_size per step_ms (2 s): no oscillation, since giving
 *   RAM back makes `available` rise by as much as `used` falls (the target
 *   stays put).
 * - Each change is logged once (info) and counted (pressure_get).
 * - The daemon's own idle memory: every GIVE_BACK_MS (mem_pressure=off too)
 *   the thread hands back the free heap (heap_give_back) and the pooled
 *   I/O buffers (seg_buf_trim) once they have been still for that period:
 *   what a burst took does not stay (issue 35: the RSS was 120-190 MiB).
 * Threading: the thread owns the decision state; st is protected by lock.
 */
#include "tier/hot/pressure.h"

#include "common/clock.h"
#include "common/config.h"
#include "common/heap.h"
#include "common/log.h"
#include "tier/hot/hot.h"
#include "tier/segment/segment.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SAMPLE_MS 250
#define PSI_SOME_LIMIT 10.0 /* % of 10 s some task stalled on memory */
#define PSI_STEP_MS 1000
#define HOLD_MS 10000
#define STEP_MS 2000
#define GIVE_BACK_MS 1000
#define UNLIMITED (1ULL << 60)
#define MS 1000000ULL

/* The daemon's memory cgroup. */
struct cg {
	char dir[PATH_MAX]; /* its directory (under root) */
	int ver;	    /* 0 none, 1, 2 */
};

struct pressure {
	const struct spw_config *cfg;
	struct hot *hot;
	pressure_fn changed;
	void *arg;
	char root[1024];       /* prefix for /proc and /sys ("" = /) */
	struct cg cg;	       /* the daemon's memory cgroup */
	int trig_fd;	       /* PSI trigger, or -1 */
	uint64_t hold_ms, step_ms, psi_step_ms;
	/* thread state */
	uint64_t last_pressure_ns, last_change_ns, last_psi_step_ns, last_give_back_ns;
	pthread_t th;
	int started;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int stop;		  /* protected by lock */
	struct pressure_stats st; /* protected by lock */
};

static int read_text(const char *path, char *buf, size_t len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC), n;
	if (fd < 0)
		return -errno;
	n = (int)read(fd, buf, len - 1);
	if (n < 0)
		n = -errno;
	else
		buf[n] = '\0';
	close(fd);
	return n;
}

/* Value of "key N" or "key: N" in a text file (0 if absent), times mult. */
static uint64_t read_key(const char *path, const char *key, uint64_t mult)
{
	char buf[8192], *p;
	size_t kl = strlen(key);
	if (read_text(path, buf, sizeof(buf)) < 0)
		return 0;
	for (p = buf; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
		if (!strncmp(p, key, kl) && (p[kl] == ' ' || p[kl] == ':' || p[kl] == '\t'))
			return strtoull(p + kl + 1 + strspn(p + kl + 1, " :\t"), NULL, 10) * mult;
	return 0;
}

/* A limit file: a number, or "max" (v2) / a huge number (v1): UNLIMITED. */
static uint64_t read_limit(const char *path)
{
	char buf[64];
	uint64_t v;
	if (read_text(path, buf, sizeof(buf)) <= 0 || !strncmp(buf, "max", 3))
		return UNLIMITED;
	v = strtoull(buf, NULL, 10);
	return v ? v : UNLIMITED;
}

/* PSI file: some/full avg10 (percent). */
static void read_psi(const char *path, double *some, double *full)
{
	char buf[512], *p;
	if (read_text(path, buf, sizeof(buf)) <= 0)
		return;
	if ((p = strstr(buf, "some avg10=")))
		*some = strtod(p + 11, NULL);
	if ((p = strstr(buf, "full avg10=")))
		*full = strtod(p + 11, NULL);
}

static void root_path(const char *root, char *out, size_t len, const char *rel)
{
	if (snprintf(out, len, "%s/%s", root, rel) >= (int)len)
		out[0] = '\0'; /* too long: reads fail, the signal counts as absent */
}

static void path_of(const struct pressure *p, char *out, size_t len, const char *rel)
{
	root_path(p->root, out, len, rel);
}

/* Find the daemon's memory cgroup from proc/self/cgroup: v1 "N:memory:/x"
 * (or a list with memory in it), else v2 "0::/x" with memory files. */
static void find_cgroup(const char *root, struct cg *cg)
{
	char buf[4096], path[PATH_MAX], probe[PATH_MAX + 32], *line, *save = NULL;
	char v2[PATH_MAX] = "";

	cg->ver = 0;
	root_path(root, path, sizeof(path), "proc/self/cgroup");
	if (read_text(path, buf, sizeof(buf)) <= 0)
		goto none;
	for (line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
		if (!c2)
			continue;
		*c2 = '\0';
		if (!strcmp(c1 + 1, "")) {
			snprintf(v2, sizeof(v2), "%s", c2 + 1);
			continue;
		}
		char *ctl, *s2 = NULL;
		for (ctl = strtok_r(c1 + 1, ",", &s2); ctl; ctl = strtok_r(NULL, ",", &s2))
			if (!strcmp(ctl, "memory")) {
				if (snprintf(cg->dir, sizeof(cg->dir), "%s/sys/fs/cgroup/memory%s",
					     root, strcmp(c2 + 1, "/") ? c2 + 1 : "") >=
				    (int)sizeof(cg->dir))
					continue;
				snprintf(probe, sizeof(probe), "%s/memory.limit_in_bytes", cg->dir);
				if (access(probe, R_OK) == 0) {
					cg->ver = 1;
					return;
				}
			}
	}
	if (v2[0] && snprintf(cg->dir, sizeof(cg->dir), "%s/sys/fs/cgroup%s", root,
			      strcmp(v2, "/") ? v2 : "") < (int)sizeof(cg->dir)) {
		snprintf(probe, sizeof(probe), "%s/memory.current", cg->dir);
		if (access(probe, R_OK) == 0) {
			cg->ver = 2;
			return;
		}
	}
none:
	cg->dir[0] = '\0';
}

/* The cgroup's limit, or UNLIMITED. v1: memory.limit_in_bytes, or a
 * tighter hierarchical_memory_limit (an ancestor's). v2: the least
 * memory.max / memory.high of the cgroup and its ancestors up to the root
 * of the hierarchy (v2 has no hierarchical figure). */
static uint64_t cg_limit(const char *root, const struct cg *cg)
{
	char path[PATH_MAX + 64], top[PATH_MAX], dir[PATH_MAX];
	uint64_t limit = UNLIMITED, v;

	if (cg->ver == 1) {
		snprintf(path, sizeof(path), "%s/memory.limit_in_bytes", cg->dir);
		limit = read_limit(path);
		snprintf(path, sizeof(path), "%s/memory.stat", cg->dir);
		v = read_key(path, "hierarchical_memory_limit", 1);
		if (v && v < limit)
			limit = v;
	} else if (cg->ver == 2) {
		snprintf(top, sizeof(top), "%s/sys/fs/cgroup", root);
		snprintf(dir, sizeof(dir), "%s", cg->dir);
		for (;;) {
			char *slash;
			snprintf(path, sizeof(path), "%s/memory.max", dir);
			if ((v = read_limit(path)) < limit)
				limit = v;
			snprintf(path, sizeof(path), "%s/memory.high", dir);
			if ((v = read_limit(path)) < limit)
				limit = v;
			if (!strcmp(dir, top) || !(slash = strrchr(dir, '/')) ||
			    (size_t)(slash - dir) < strlen(top))
				break;
			*slash = '\0';
		}
	}
	return limit;
}

/* Read every signal into s (the budget fields are left alone). */
static void read_signals(struct pressure *p, struct pressure_stats *s)
{
	char path[PATH_MAX + 64];
	uint64_t limit = UNLIMITED, usage = 0, inactive = 0;

	path_of(p, path, sizeof(path), "proc/meminfo");
	s->mem_available = read_key(path, "MemAvailable", 1024);
	s->psi_some10 = s->psi_full10 = 0;
	path_of(p, path, sizeof(path), "proc/pressure/memory");
	read_psi(path, &s->psi_some10, &s->psi_full10);
	if (p->cg.ver) {
		int v2 = p->cg.ver == 2;
		limit = cg_limit(p->root, &p->cg);
		snprintf(path, sizeof(path), "%s/%s", p->cg.dir,
			 v2 ? "memory.current" : "memory.usage_in_bytes");
		usage = read_limit(path);
		usage = usage == UNLIMITED ? 0 : usage;
		snprintf(path, sizeof(path), "%s/memory.stat", p->cg.dir);
		inactive = read_key(path, v2 ? "inactive_file" : "total_inactive_file", 1);
	}
	if (p->cg.ver == 2) {
		double some = 0, full = 0;
		snprintf(path, sizeof(path), "%s/memory.pressure", p->cg.dir);
		read_psi(path, &some, &full);
		s->psi_some10 = some > s->psi_some10 ? some : s->psi_some10;
		s->psi_full10 = full > s->psi_full10 ? full : s->psi_full10;
	}
	if (limit >= UNLIMITED) {
		s->cg_limit = s->cg_usage = 0;
	} else {
		s->cg_limit = limit;
		s->cg_usage = usage > inactive ? usage - inactive : 0;
	}
	s->available = s->mem_available;
	if (s->cg_limit) {
		uint64_t a = s->cg_limit > s->cg_usage ? s->cg_limit - s->cg_usage : 0;
		if (a < s->available)
			s->available = a;
	}
}

/* The root for /proc and /sys: $SPW_PROC_ROOT, "" for / . */
static void proc_root(char *out, size_t len)
{
	const char *root = getenv("SPW_PROC_ROOT");
	snprintf(out, len, "%s", root && strcmp(root, "/") ? root : "");
}

void pressure_probe(struct pressure_mem *out)
{
	char root[1024], path[PATH_MAX];
	struct cg cg;
	uint64_t limit;

	memset(out, 0, sizeof(*out));
	proc_root(root, sizeof(root));
	root_path(root, path, sizeof(path), "proc/meminfo");
	out->ram = read_key(path, "MemTotal", 1024);
	if (!out->ram)
		out->ram = (uint64_t)sysconf(_SC_PHYS_PAGES) * (uint64_t)sysconf(_SC_PAGESIZE);
	find_cgroup(root, &cg);
	limit = cg_limit(root, &cg);
	out->cgroup = cg.ver;
	out->cg_limit = limit < UNLIMITED ? limit : 0;
	out->of_cgroup = out->cg_limit && out->cg_limit < out->ram;
	out->limit = out->of_cgroup ? out->cg_limit : out->ram;
	/* 5%, in whole MiB (the log shows MiB), at least 1 MiB: 0 means off */
	out->reserve = out->limit / 20 < PRESSURE_RESERVE_CAP ? out->limit / 20
							      : PRESSURE_RESERVE_CAP;
	out->reserve = out->reserve >> 20 ? out->reserve >> 20 << 20 : 1ULL << 20;
}

/* One decision: read the signals, move the budget if the rule says so. */
static void sample(struct pressure *p)
{
	const struct spw_config *cfg = p->cfg;
	struct pressure_stats s;
	uint64_t now = clock_now_ns(), budget, target = cfg->hot_size, nb;
	uint64_t slack = cfg->hot_size / 100 > cfg->chunk_size ? cfg->hot_size / 100
							       : cfg->chunk_size;
	uint64_t used = hot_used(p->hot) + hot_reserved(p->hot);
	int psi, pressure;

	pthread_mutex_lock(&p->lock);
	s = p->st;
	pthread_mutex_unlock(&p->lock);
	read_signals(p, &s);
	budget = s.budget;
	if (cfg->mem_reserve)
		target = used + s.available > cfg->mem_reserve
			     ? used + s.available - cfg->mem_reserve
			     : 0;
	psi = s.psi_some10 > PSI_SOME_LIMIT;
	if (psi && now - p->last_psi_step_ns >= p->psi_step_ms * MS) {
		uint64_t step = cfg->hot_size / 10, cap = budget > step ? budget - step : 0;
		target = cap < target ? cap : target;
		p->last_psi_step_ns = now;
	}
	if (target < cfg->hot_min)
		target = cfg->hot_min;
	if (target > cfg->hot_size)
		target = cfg->hot_size;
	pressure = psi || target + slack <= budget ||
		   (cfg->mem_reserve && s.available < cfg->mem_reserve);
	if (pressure)
		p->last_pressure_ns = now;
	nb = budget;
	if (target < budget && (budget - target >= slack || target == cfg->hot_min))
		nb = target; /* shrink at once */
	else if (!pressure && target > budget &&
		 (target - budget >= slack || target == cfg->hot_size) &&
		 now - p->last_pressure_ns >= p->hold_ms * MS &&
		 now - p->last_change_ns >= p->step_ms * MS)
		nb = budget + cfg->hot_size / 10 < target ? budget + cfg->hot_size / 10 : target;
	s.pressure = pressure;
	if (nb != budget) {
		hot_set_limit(p->hot, nb);
		s.budget = nb;
		if (nb < budget)
			s.shrinks++;
		else
			s.grows++;
		p->last_change_ns = now;
		if (nb < budget)
			log_info("memory pressure: hot budget %lluM -> %lluM (available %lluM, "
				 "mem_reserve %lluM, psi some %.1f%%, hot_min %lluM)",
				 (unsigned long long)(budget >> 20), (unsigned long long)(nb >> 20),
				 (unsigned long long)(s.available >> 20),
				 (unsigned long long)(cfg->mem_reserve >> 20), s.psi_some10,
				 (unsigned long long)(cfg->hot_min >> 20));
		else
			log_info("memory pressure gone: hot budget %lluM -> %lluM (hot_size %lluM, "
				 "available %lluM)",
				 (unsigned long long)(budget >> 20), (unsigned long long)(nb >> 20),
				 (unsigned long long)(cfg->hot_size >> 20),
				 (unsigned long long)(s.available >> 20));
	}
	if (p->last_change_ns)
		s.last_change_ms = (now - p->last_change_ns) / MS;
	pthread_mutex_lock(&p->lock);
	p->st = s;
	pthread_mutex_unlock(&p->lock);
	if (nb != budget && p->changed)
		p->changed(p->arg, budget, nb);
}

/* The daemon's idle memory back to the kernel (DESIGN). */
static void give_back(struct pressure *p)
{
	uint64_t now = clock_now_ns();
	size_t bufs;
	int heap;

	if (now - p->last_give_back_ns < GIVE_BACK_MS * MS)
		return;
	p->last_give_back_ns = now;
	heap = heap_give_back();
	bufs = seg_buf_trim();
	if (heap || bufs)
		log_debug("idle memory given back:%s %zuM of pooled I/O buffers",
			  heap ? " the free heap," : "", bufs >> 20);
}

static void *pressure_thread(void *arg)
{
	struct pressure *p = arg;
	for (;;) {
		pthread_mutex_lock(&p->lock);
		int stop = p->stop;
		pthread_mutex_unlock(&p->lock);
		if (stop)
			break;
		if (p->cfg->mem_pressure)
			sample(p);
		give_back(p);
		if (p->trig_fd >= 0) {
			/* a trigger event wakes us early; stop is seen within SAMPLE_MS */
			struct pollfd pf = {.fd = p->trig_fd, .events = POLLPRI};
			if (poll(&pf, 1, SAMPLE_MS) > 0 && (pf.revents & (POLLERR | POLLNVAL))) {
				close(p->trig_fd);
				p->trig_fd = -1;
			}
		} else {
			struct timespec dl = clock_deadline_ms(SAMPLE_MS);
			pthread_mutex_lock(&p->lock);
			if (!p->stop)
				pthread_cond_timedwait(&p->cond, &p->lock, &dl);
			pthread_mutex_unlock(&p->lock);
		}
	}
	return NULL;
}

static uint64_t env_ms(const char *name, uint64_t dflt)
{
	const char *v = getenv(name);
	char *end;
	unsigned long long n;
	if (!v || !*v)
		return dflt;
	n = strtoull(v, &end, 10);
	return *end ? dflt : n;
}

int pressure_new(const struct spw_config *cfg, struct hot *hot, pressure_fn changed, void *arg,
		 struct pressure **out)
{
	struct pressure *p = calloc(1, sizeof(*p));

	if (!p)
		return -ENOMEM;
	p->cfg = cfg;
	p->hot = hot;
	p->changed = changed;
	p->arg = arg;
	p->trig_fd = -1;
	proc_root(p->root, sizeof(p->root));
	p->hold_ms = env_ms("SPW_PRESSURE_HOLD_MS", HOLD_MS);
	p->step_ms = env_ms("SPW_PRESSURE_STEP_MS", STEP_MS);
	p->psi_step_ms = env_ms("SPW_PRESSURE_PSI_STEP_MS", PSI_STEP_MS);
	pthread_mutex_init(&p->lock, NULL);
	pthread_cond_init(&p->cond, NULL);
	p->st.enabled = cfg->mem_pressure;
	p->st.budget = cfg->hot_size;
	p->st.hot_size = cfg->hot_size;
	p->st.hot_min = cfg->hot_min;
	p->st.mem_reserve = cfg->mem_reserve;
	p->st.reserve_given = cfg->mem_reserve_given;
	p->st.limit_cgroup = cfg->mem_limit_cgroup;
	p->st.mem_limit = cfg->mem_limit;
	if (cfg->mem_pressure)
		find_cgroup(p->root, &p->cg);
	p->st.cgroup = p->cg.ver;
	*out = p;
	return 0;
}

/* Where mem_reserve came from, for the mount's log line. */
static void reserve_why(const struct spw_config *cfg, char *out, size_t len)
{
	const char *of = cfg->mem_limit_cgroup ? "the memory cgroup's limit" : "the node's RAM";
	unsigned long long lim = cfg->mem_limit >> 20;
	if (cfg->mem_reserve_given)
		snprintf(out, len, "given; %s is %lluM", of, lim);
	else
		snprintf(out, len, "5%% of %s %lluM%s", of, lim,
			 cfg->mem_reserve >= PRESSURE_RESERVE_CAP ? ", at most 1G" : "");
}

int pressure_start(struct pressure *p)
{
	char path[PATH_MAX + 32], why[128];
	int ret;

	if (!p->cfg->mem_pressure)
		goto thread; /* only the idle memory's give-back */
	path_of(p, path, sizeof(path), "proc/pressure/memory");
	/* 150 ms of stall within 1 s wakes us at once (where the kernel lets us
	 * create triggers); otherwise sampling every SAMPLE_MS */
	p->trig_fd = open(path, O_RDWR | O_NONBLOCK | O_CLOEXEC);
	if (p->trig_fd >= 0 && write(p->trig_fd, "some 150000 1000000", 20) < 0) {
		close(p->trig_fd);
		p->trig_fd = -1;
	}
	/* under the lock: the metrics thread (started first) reads p->st */
	pthread_mutex_lock(&p->lock);
	p->st.psi_trigger = p->trig_fd >= 0;
	pthread_mutex_unlock(&p->lock);
	sample(p); /* the first decision before the first write */
	reserve_why(p->cfg, why, sizeof(why));
	log_info("memory pressure: following %s%s (cgroup %s%s), hot budget %lluM..%lluM, "
		 "mem_reserve %lluM (%s)",
		 p->root[0] ? p->root : "/proc",
		 p->trig_fd >= 0 ? " with a PSI trigger" : ", sampled every 250 ms",
		 p->cg.ver ? (p->cg.ver == 1 ? "v1 " : "v2 ") : "none", p->cg.dir,
		 (unsigned long long)(p->cfg->hot_min >> 20),
		 (unsigned long long)(p->cfg->hot_size >> 20),
		 (unsigned long long)(p->cfg->mem_reserve >> 20), why);
thread:
	if ((ret = pthread_create(&p->th, NULL, pressure_thread, p)) != 0)
		return -ret;
	p->started = 1;
	return 0;
}

void pressure_stop(struct pressure *p)
{
	if (!p || !p->started)
		return;
	pthread_mutex_lock(&p->lock);
	p->stop = 1;
	pthread_cond_broadcast(&p->cond);
	pthread_mutex_unlock(&p->lock);
	pthread_join(p->th, NULL);
	p->started = 0;
}

void pressure_free(struct pressure *p)
{
	if (!p)
		return;
	pressure_stop(p);
	if (p->trig_fd >= 0)
		close(p->trig_fd);
	pthread_cond_destroy(&p->cond);
	pthread_mutex_destroy(&p->lock);
	free(p);
}

void pressure_get(struct pressure *p, struct pressure_stats *out)
{
	pthread_mutex_lock(&p->lock);
	*out = p->st; /* budget and its counters from one sample, together */
	pthread_mutex_unlock(&p->lock);
}
