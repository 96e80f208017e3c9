/*
 * pressure — the elastic hot tier. hot_size is the ceiling, not a promise:
 * this module watches the node and the daemon's own memory cgroup (PSI
 * memory pressure, MemAvailable, the cgroup's limit and usage) and sets the
 * hot tier's effective budget (hot_set_limit) between hot_min and hot_size.
 * It shrinks at once under pressure and grows back in steps only after the
 * pressure has been gone for a hold time. Every change is logged once.
 * The same thread gives the daemon's own idle memory back every second
 * (the free heap, pooled I/O buffers), with mem_pressure=off too.
 * Threading: one thread of its own (pressure_start/pressure_stop);
 * pressure_get may be called from any thread.
 */
#ifndef SPW_PRESSURE_H
#define SPW_PRESSURE_H

#include <stdint.h>

struct spw_config;
struct hot;
struct pressure;

/* A snapshot of the signals and of the budget (pressure_get). */
struct pressure_stats {
	int enabled;	  /* mem_pressure=on */
	int psi_trigger;  /* woken by a PSI trigger (else sampled every 250 ms) */
	int cgroup;	  /* 0: none found, 1: v1, 2: v2 */
	int pressure;	  /* under pressure at the last sample */
	uint64_t budget;  /* effective hot budget now */
	uint64_t hot_size, hot_min, mem_reserve;
	int reserve_given;	  /* mem_reserve was given (else 5% of mem_limit, at most 1G) */
	int limit_cgroup;	  /* mem_limit is the cgroup's limit (else the node's RAM) */
	uint64_t mem_limit;	  /* what the daemon could have at mount */
	uint64_t mem_available;	  /* node MemAvailable */
	uint64_t cg_limit;	  /* the cgroup's limit (0: none) */
	uint64_t cg_usage;	  /* its usage less inactive file cache */
	uint64_t available;	  /* what the budget rule used: min(node, cgroup) */
	double psi_some10, psi_full10; /* % of the last 10 s (node or cgroup, higher) */
	uint64_t shrinks, grows;       /* budget changes so far */
	uint64_t last_change_ms;       /* ms since the last change (0: never) */
};

/* What the daemon may have, probed once when the options are parsed: the
 * node's RAM (MemTotal), its memory cgroup's limit, and the default
 * mem_reserve taken of the smaller. */
struct pressure_mem {
	uint64_t ram;	   /* the node's MemTotal */
	int cgroup;	   /* 0: no memory cgroup found, 1: v1, 2: v2 */
	uint64_t cg_limit; /* its limit (the tightest of its ancestors too); 0: none */
	int of_cgroup;	   /* 1: the cgroup's limit is below the node's RAM */
	uint64_t limit;	   /* what the daemon may have: min(cg_limit, ram) */
	uint64_t reserve;  /* the default mem_reserve: min(1G, 5% of limit), whole MiB */
};
#define PRESSURE_RESERVE_CAP (1ULL << 30)

/* Called (from the pressure thread) after each budget change. */
typedef void (*pressure_fn)(void *arg, uint64_t old_budget, uint64_t new_budget);

/* Reads its files under $SPW_PROC_ROOT (default /) : proc/meminfo,
 * proc/pressure/memory, proc/self/cgroup, sys/fs/cgroup/...; tests point it
 * at fake ones. SPW_PRESSURE_HOLD_MS and SPW_PRESSURE_STEP_MS override the
 * hold time before growing (10 s) and the step period (2 s). 0 or -ENOMEM. */
/* Probe the node and the daemon's memory cgroup (under $SPW_PROC_ROOT, as
 * pressure_new). Any thread; reads a few files. */
void pressure_probe(struct pressure_mem *out);
int pressure_new(const struct spw_config *cfg, struct hot *hot, pressure_fn changed, void *arg,
		 struct pressure **out);
/* Start the thread (with mem_pressure=off it only gives idle memory back).
 * 0 or -errno. */
int pressure_start(struct pressure *p);
void pressure_stop(struct pressure *p);
void pressure_free(struct pressure *p);
void pressure_get(struct pressure *p, struct pressure_stats *out);

#endif
