/*
 * hist — latency histograms: a Prometheus one with fixed bounds (struct
 * hist) and a fine one for quantiles (struct lhist), and their renderers.
 * Threading: *_observe() is lock-free (relaxed atomics) and may be called
 * from any thread at any time; readers see each bucket consistently, the
 * whole histogram only approximately (a sample may be half counted).
 * Ownership: the caller embeds the struct, zeroed; nothing to free.
 */
#ifndef SPW_HIST_H
#define SPW_HIST_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define HIST_BUCKETS 14

/* A Prometheus histogram with fixed bounds (seconds, 1 ms .. 30 s). */
struct hist {
	uint64_t bucket[HIST_BUCKETS]; /* non-cumulative counts; last = +Inf */
	uint64_t count;
	uint64_t sum_ns;
};

extern const double hist_bounds[HIST_BUCKETS - 1];

void hist_observe(struct hist *h, uint64_t ns);
/* dst = src, each field read atomically (src may be observed meanwhile). */
void hist_read(struct hist *dst, const struct hist *src);
/* Write h as NAME_bucket/_sum/_count lines. */
void hist_write(FILE *f, const char *name, const char *help, const struct hist *h);

/*
 * A fine latency histogram for quantiles (p50/p99 in stats): four buckets
 * per power of two of microseconds (error < 25 %), 1 us .. ~33 s.
 * lhist_observe() is lock-free like hist_observe().
 */
#define LHIST_BUCKETS 96

struct lhist {
	uint64_t bucket[LHIST_BUCKETS]; /* last = everything above */
	uint64_t count;
	uint64_t sum_ns;
};

void lhist_observe(struct lhist *h, uint64_t ns);
void lhist_read(struct lhist *dst, const struct lhist *src);
/* The q-quantile (0..1) in ns, interpolated in its bucket; 0 when empty. */
uint64_t lhist_quantile(const struct lhist *h, double q);
/* Write h as one Prometheus histogram series with the label pair label
 * (e.g. "tier=\"nvme\""), bounds at powers of two of microseconds; the
 * HELP/TYPE lines only when help is not NULL. */
void lhist_write(FILE *f, const char *name, const char *help, const char *label,
		 const struct lhist *h);

#endif
