/*
 * hist.c — the two latency histograms (see hist.h). Every update is a
 * relaxed atomic add; readers load each bucket once.
 */
#include "common/hist.h"

const double hist_bounds[HIST_BUCKETS - 1] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
					      0.25,  0.5,    1,	    2.5,  5,	 30};

void hist_observe(struct hist *h, uint64_t ns)
{
	double s = ns / 1e9;
	int i = 0;
	while (i < HIST_BUCKETS - 1 && s > hist_bounds[i])
		i++;
	__atomic_add_fetch(&h->bucket[i], 1, __ATOMIC_RELAXED);
	__atomic_add_fetch(&h->sum_ns, ns, __ATOMIC_RELAXED);
	__atomic_add_fetch(&h->count, 1, __ATOMIC_RELAXED);
}

#define READ_ALL(dst, src, n)                                                              \
	do {                                                                               \
		for (unsigned i_ = 0; i_ < (n); i_++)                                      \
			(dst)->bucket[i_] = __atomic_load_n(&(src)->bucket[i_], __ATOMIC_RELAXED); \
		(dst)->count = __atomic_load_n(&(src)->count, __ATOMIC_RELAXED);            \
		(dst)->sum_ns = __atomic_load_n(&(src)->sum_ns, __ATOMIC_RELAXED);          \
	} while (0)

void hist_read(struct hist *dst, const struct hist *src)
{
	READ_ALL(dst, src, HIST_BUCKETS);
}

void lhist_read(struct lhist *dst, const struct lhist *src)
{
	READ_ALL(dst, src, LHIST_BUCKETS);
}

void hist_write(FILE *f, const char *name, const char *help, const struct hist *h)
{
	uint64_t cum = 0, b[HIST_BUCKETS];
	for (int i = 0; i < HIST_BUCKETS; i++)
		b[i] = __atomic_load_n(&h->bucket[i], __ATOMIC_RELAXED);
	fprintf(f, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
	for (int i = 0; i < HIST_BUCKETS - 1; i++) {
		cum += b[i];
		fprintf(f, "%s_bucket{le=\"%g\"} %llu\n", name, hist_bounds[i],
			(unsigned long long)cum);
	}
	cum += b[HIST_BUCKETS - 1];
	/* count = the +Inf bucket, from the same loads, so the sample is consistent */
	fprintf(f, "%s_bucket{le=\"+Inf\"} %llu\n", name, (unsigned long long)cum);
	fprintf(f, "%s_sum %.9f\n", name, __atomic_load_n(&h->sum_ns, __ATOMIC_RELAXED) / 1e9);
	fprintf(f, "%s_count %llu\n", name, (unsigned long long)cum);
}

/* Bucket of v us: v itself below 4, else 4 per power of two. */
static unsigned lhist_index(uint64_t us)
{
	unsigned e, i;

	if (us < 4)
		return (unsigned)us;
	e = 63 - (unsigned)__builtin_clzll(us);
	i = 4 * (e - 1) + (unsigned)((us >> (e - 2)) & 3);
	return i < LHIST_BUCKETS - 1 ? i : LHIST_BUCKETS - 1;
}

/* Lower bound (us) of bucket i. */
static uint64_t lhist_lo(unsigned i)
{
	if (i < 4)
		return i;
	return (uint64_t)(4 + i % 4) << (i / 4 - 1);
}

void lhist_observe(struct lhist *h, uint64_t ns)
{
	__atomic_add_fetch(&h->bucket[lhist_index(ns / 1000)], 1, __ATOMIC_RELAXED);
	__atomic_add_fetch(&h->sum_ns, ns, __ATOMIC_RELAXED);
	__atomic_add_fetch(&h->count, 1, __ATOMIC_RELAXED);
}

uint64_t lhist_quantile(const struct lhist *h, double q)
{
	uint64_t b[LHIST_BUCKETS], n = 0, cum = 0;

	for (unsigned i = 0; i < LHIST_BUCKETS; i++)
		n += b[i] = __atomic_load_n(&h->bucket[i], __ATOMIC_RELAXED);
	if (n == 0)
		return 0;
	double want = q * (double)n;
	for (unsigned i = 0; i < LHIST_BUCKETS; i++) {
		if (!b[i] || (double)(cum + b[i]) < want) {
			cum += b[i];
			continue;
		}
		double lo = (double)lhist_lo(i), hi = (double)lhist_lo(i + 1);
		double frac = (want - (double)cum) / (double)b[i];
		if (i == LHIST_BUCKETS - 1)
			return (uint64_t)(lo * 1000);
		return (uint64_t)((lo + (hi - lo) * (frac < 0 ? 0 : frac)) * 1000);
	}
	return lhist_lo(LHIST_BUCKETS - 1) * 1000;
}

void lhist_write(FILE *f, const char *name, const char *help, const char *label,
		 const struct lhist *h)
{
	uint64_t cum = 0;

	if (help)
		fprintf(f, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
	for (unsigned i = 0; i < LHIST_BUCKETS; i++) {
		/* bucket i + 1 starts at a power of two: a cumulative bound */
		cum += __atomic_load_n(&h->bucket[i], __ATOMIC_RELAXED);
		if ((i + 1) % 4 == 0 && i + 1 < LHIST_BUCKETS)
			fprintf(f, "%s_bucket{%s,le=\"%g\"} %llu\n", name, label,
				lhist_lo(i + 1) / 1e6, (unsigned long long)cum);
	}
	fprintf(f, "%s_bucket{%s,le=\"+Inf\"} %llu\n", name, label, (unsigned long long)cum);
	fprintf(f, "%s_sum{%s} %.9f\n", name, label,
		__atomic_load_n(&h->sum_ns, __ATOMIC_RELAXED) / 1e9);
	fprintf(f, "%s_count{%s} %llu\n", name, label, (unsigned long long)cum);
}
