/*
 * fuzz_options — mount option strings (opt_parse in fs/options.c): the input
 * is the argument of -o, after "hot_dir=<scratch>/hot," (inputs holding a
 * '/' are skipped: no absolute path is ever created; opt_parse only looks
 * at relative ones, and refuses a relative hot_dir).
 * Invariants: an accepted configuration satisfies every documented range
 * (and each row of opt_table its bounds);
 * a rejected one gives a one-line reason and removes the hot_dir it made.
 */
#include "fuzz.h"
#include "tier/hot/hot.h"
#include "fs/options.h"

#include <math.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *dir = fuzz_scratch();
	static char mnt[256], hot[256];
	struct spw_config cfg;
	struct stat st;
	char err[1024] = "", *opt;
	int ret;

	if (memchr(data, '/', size) || memchr(data, 0, size) || size > 4096)
		return 0;
	if (!mnt[0]) {
		snprintf(mnt, sizeof(mnt), "%s/mnt", dir);
		snprintf(hot, sizeof(hot), "%s/hot", dir);
		FUZZ_CHECK(mkdir(mnt, 0700) == 0, "mkdir %s", mnt);
	}
	opt = malloc(size + sizeof(hot) + 16);
	snprintf(opt, size + sizeof(hot) + 16, "hot_dir=%s,%.*s", hot, (int)size, (const char *)data);
	{
		char *argv[] = {"spillway", "-o", opt, NULL};
		struct fuse_args args = FUSE_ARGS_INIT(3, argv);

		ret = opt_parse(&args, mnt, &cfg, err, sizeof(err));
		fuse_opt_free_args(&args);
	}
	if (ret == 0) {
		uint64_t c = cfg.chunk_size;
		FUZZ_CHECK(c >= (1u << 20) && c <= (64u << 20) && !(c & (c - 1)), "chunk_size %llu",
			   (unsigned long long)c);
		FUZZ_CHECK(cfg.hot_size >= 2 * c, "hot_size %llu", (unsigned long long)cfg.hot_size);
		FUZZ_CHECK(cfg.low_watermark < cfg.spill_threshold &&
				   cfg.spill_threshold <= cfg.hard_watermark,
			   "watermarks %g %g %g", cfg.low_watermark, cfg.spill_threshold,
			   cfg.hard_watermark);
		FUZZ_CHECK(isfinite(cfg.gc_threshold) && isfinite(cfg.nvme_threshold), "thresholds");
		FUZZ_CHECK(cfg.io_workers >= 1 && cfg.io_workers <= 256, "io_workers %u",
			   cfg.io_workers);
		FUZZ_CHECK(cfg.min_spill_size >= c && cfg.min_spill_size <= (16ull << 30),
			   "min_spill_size");
		/* and every row of the options table holds its own bounds */
		for (size_t i = 0; i < opt_count; i++) {
			const struct opt_spec *s = &opt_table[i];
			const char *p = (const char *)&cfg + s->off;
			uint64_t v;
			unsigned u;
			double d;
			if (s->kind == OPT_FRACTION) {
				memcpy(&d, p, sizeof(d));
				FUZZ_CHECK(d > 0 && d <= 1, "%s %g", s->name, d);
			}
			if (s->kind != OPT_SIZE && s->kind != OPT_DURATION && s->kind != OPT_COUNT)
				continue;
			if (s->width == sizeof(v)) {
				memcpy(&v, p, sizeof(v));
			} else {
				memcpy(&u, p, sizeof(u));
				v = u;
			}
			FUZZ_CHECK((v >= s->min && v <= s->max) ||
					   (v == 0 && (s->flags & OPT_OFF_IS_ZERO)),
				   "%s %llu outside %llu..%llu", s->name, (unsigned long long)v,
				   (unsigned long long)s->min, (unsigned long long)s->max);
		}
		FUZZ_CHECK(cfg.mountpoint && cfg.mountpoint[0] == '/' && cfg.hot_dir &&
				   cfg.hot_dir[0] == '/',
			   "paths");
		opt_free(&cfg);
		hot_dir_unmake(hot); /* it holds spillway's marker */
	} else {
		FUZZ_CHECK(err[0] && !strchr(err, '\n'), "reason '%s'", err);
		FUZZ_CHECK(stat(hot, &st) < 0, "a rejected configuration left hot_dir behind: %s",
			   err);
	}
	free(opt);
	return 0;
}
