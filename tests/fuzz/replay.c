/* replay.c — see replay.h. */
#include "replay.h"

#include "fuzz.h"
#include "index/index.h"
#include "index/journal.h"

#include <inttypes.h>
#include <string.h>

void replay_put(const char *dir, const char *what, const uint8_t *buf, size_t len)
{
	struct jrec r;
	uint64_t gen = 1;
	char name[64];

	if (jrnl_decode(buf, len, &r) > 0 && r.type == JR_HEADER)
		gen = r.hdr.gen;
	snprintf(name, sizeof(name), "%s.%016" PRIx64, what, gen);
	FUZZ_CHECK(fuzz_write_file(dir, name, buf, len) == 0, "%s", name);
}

struct ctx {
	struct index *idx;
	uint64_t calls;
};

static int on_record(void *arg, const struct jrec *r)
{
	struct ctx *c = arg;
	int ret;

	c->calls++;
	FUZZ_CHECK(r->type != JR_TX && r->type != JR_HEADER && r->type != JR_END,
		   "recovery handed over a record of type %u", r->type);
	FUZZ_CHECK(jrnl_rec_fits(r, REPLAY_CHUNK), "an out-of-range record was replayed");
	ret = idx_replay(c->idx, r);
	return ret < 0 ? ret : 0;
}

static int check_inode(void *arg, struct inode *in)
{
	uint64_t *n = arg;
	(*n)++;
	FUZZ_CHECK(in->nchunks <= JRNL_MAX_FILE_SIZE / REPLAY_CHUNK,
		   "inode %" PRIu64 ": %" PRIu32 " chunks", in->ino, in->nchunks);
	return 0;
}

void replay_run(const char *dir, struct replay_result *res)
{
	struct jrnl_config cfg = {.dir = dir, .sync_ms = 1000, .checkpoint_bytes = 1ull << 30,
				  .chunk_size = REPLAY_CHUNK};
	struct jrnl_recovery info;
	struct journal *j = NULL;
	struct ctx c = {0};
	char err[512] = "";
	int ret;

	memset(res, 0, sizeof(*res));
	FUZZ_CHECK(idx_new(REPLAY_CHUNK, &c.idx) == 0, "idx_new");
	ret = jrnl_open(&cfg, &j, err, sizeof(err));
	FUZZ_CHECK(ret == 0, "jrnl_open: %s", err);
	ret = jrnl_recover(j, on_record, &c, &info, err, sizeof(err));
	FUZZ_CHECK(ret <= 0, "jrnl_recover = %d", ret);
	FUZZ_CHECK(ret == 0 || err[0], "jrnl_recover = %d without a reason", ret);
	res->ret = ret;
	res->calls = c.calls;
	if (ret == 0) {
		FUZZ_CHECK(info.records == c.calls, "records %" PRIu64 ", calls %" PRIu64,
			   info.records, c.calls);
		res->fresh = info.fresh;
		res->truncated = info.truncated;
		idx_replay_finish(c.idx);
		idx_for_each(c.idx, check_inode, &res->inodes);
	}
	jrnl_close(j, 0);
	idx_free(c.idx);
}
