/*
 * fuzz_journal_record — jrnl_decode on one framed record (index/journal.c).
 * Invariants: a decoded record re-encodes to the same bytes (a TX: its
 * inner records, via jrnl_encode_tx); every accepted field is inside the
 * format limits (journal.h); a short buffer is torn (0), never read past.
 */
#include "fuzz.h"
#include "index/journal.h"

#include <errno.h>
#include <string.h>

#define MAX_INNER 4096

struct inner {
	struct jrec r[MAX_INNER];
	int n;
};

static int collect(void *arg, const struct jrec *r)
{
	struct inner *in = arg;
	FUZZ_CHECK(r->type != JR_TX, "a TX nested in a TX");
	if (in->n == MAX_INNER)
		return 1;
	in->r[in->n++] = *r;
	return 0;
}

static void check_bounds(const struct jrec *r)
{
	switch (r->type) {
	case JR_CHUNK_LOC:
		FUZZ_CHECK(r->loc.seg_id > 0 && r->loc.seg_id <= JRNL_MAX_SEG_ID, "seg %llu",
			   (unsigned long long)r->loc.seg_id);
		FUZZ_CHECK(r->loc.len <= JRNL_MAX_LOC_LEN && r->loc.off + r->loc.len >= r->loc.off,
			   "loc");
		/* fall through */
	case JR_CHUNK_DIRTY:
		FUZZ_CHECK(r->chunk < JRNL_MAX_CHUNKS, "chunk %llu", (unsigned long long)r->chunk);
		break;
	case JR_CHUNK_ABSENT:
		FUZZ_CHECK(r->chunk < JRNL_MAX_CHUNKS && r->count <= JRNL_MAX_CHUNKS - r->chunk,
			   "absent range");
		break;
	case JR_INODE:
		FUZZ_CHECK(r->attr.size <= JRNL_MAX_FILE_SIZE && r->ino, "inode");
		break;
	case JR_SEG_ADD:
	case JR_SEG_DEL:
		FUZZ_CHECK(r->seg.id > 0 && r->seg.id <= JRNL_MAX_SEG_ID, "seg id");
		break;
	case JR_META:
		FUZZ_CHECK(r->next_seg <= JRNL_MAX_SEG_ID + 1, "next_seg");
		break;
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct inner in;
	struct jrec r;
	uint8_t *buf, *copy;
	size_t len;
	ssize_t n;

	/* an exact-size copy: ASan sees any read past the end */
	copy = malloc(size ? size : 1);
	memcpy(copy, data, size);
	n = jrnl_decode(copy, size, &r);
	FUZZ_CHECK(n == 0 || n == -EBADMSG || (n >= 9 && (size_t)n <= size), "n = %zd", n);
	if (n <= 0)
		goto out;
	if (r.type != JR_TX) {
		check_bounds(&r);
		len = jrnl_encoded_size(&r);
		FUZZ_CHECK(len == (size_t)n, "re-encoded size %zu, decoded %zd", len, n);
		buf = malloc(len);
		jrnl_encode(&r, buf);
		FUZZ_CHECK(!memcmp(buf, copy, len), "type %u does not re-encode to its bytes",
			   r.type);
		free(buf);
		goto out;
	}
	in.n = 0;
	FUZZ_CHECK(jrnl_for_each_in(copy, (size_t)n, &r, collect, &in) == 0 || in.n == MAX_INNER,
		   "a TX jrnl_decode accepted fails in jrnl_for_each_in");
	if (in.n == MAX_INNER)
		goto out;
	FUZZ_CHECK((uint64_t)in.n == r.count, "TX count %llu, walked %d",
		   (unsigned long long)r.count, in.n);
	for (int i = 0; i < in.n; i++)
		check_bounds(&in.r[i]);
	if (in.n >= 2) { /* one inner record is encoded as a plain record */
		buf = jrnl_encode_tx(in.r, in.n, &len);
		FUZZ_CHECK(buf && len == (size_t)n && !memcmp(buf, copy, len),
			   "TX of %d records does not re-encode to its bytes", in.n);
		free(buf);
	}
out:
	free(copy);
	return 0;
}
