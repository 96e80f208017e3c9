/*
 * store_s3_read — reading, removing and listing the S3 store's segments,
 * and the ranged-read and listing machinery the named objects share
 * (store_s3_obj.c); the store_ops read, remove and list calls (the table:
 * store_s3.c). Requests and retries: store_s3.c DESIGN.
 *
 * DESIGN
 * Reads. One ranged GET per part_size piece, io_workers at a time, each
 * writing straight into the caller's buffer: reads allocate no data buffer.
 * Listing. One ListObjectsV2 pager (s3_list_keys) for the segment list,
 * which keeps only exact seg-<hex>.spw keys directly under the prefix, and
 * for the named objects.
 * Threading: any thread; each call borrows its own conn.
 */
#include "tier/store/store_s3_i.h"

#include "common/log.h"
#include "tier/s3/s3xml.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/*
 * Read len bytes at off of key into buf: one ranged GET per part_size piece,
 * io_workers at a time, on c. With etag, a piece whose ETag differs (the
 * object was replaced meanwhile) fails the read with -ESTALE. what names the
 * object in the log. 0, -ENOENT, -EACCES, -ENOMEM, -ESTALE or -EIO.
 */
int s3_read_pieces(struct s3_store *s, struct s3_conn *c, const char *key, uint64_t off,
		   uint8_t *buf, size_t len, const char *etag, const char *what)
{
	size_t npieces, nslots, next = 0;
	struct s3_xfer *xs;
	int ret = 0;

	if (len == 0)
		return 0;
	npieces = (len + s->part_size - 1) / s->part_size;
	nslots = npieces < s->cl.io_workers ? npieces : s->cl.io_workers;
	xs = calloc(nslots, sizeof(*xs));
	if (!xs)
		return -ENOMEM;
	for (;;) {
		int busy = 0;

		for (size_t i = 0; i < nslots; i++) {
			struct s3_xfer *x = &xs[i];

			if (x->state == XS_DONE) {
				if (etag && !ret && x->err != -ENOENT && x->etag[0] &&
				    strcmp(x->etag, etag)) {
					log_warn("s3 %s: %s changed while being read (ETag %s, "
						 "was %s)",
						 s->name, what, x->etag, etag);
					ret = -ESTALE;
				}
				if (x->err && !ret) {
					ret = x->err;
					if (ret != -ENOENT)
						log_err("s3 %s: reading %s at %" PRIu64 ": %s",
							s->name, what, x->off, x->why);
					ret = ret == -ENOENT || ret == -EACCES || ret == -ENOMEM
						  ? ret
						  : -EIO;
				}
				s3_xfer_fini(x);
				x->state = XS_IDLE;
			}
			if (x->state == XS_IDLE && !ret && next < npieces) {
				uint64_t poff = (uint64_t)next * s->part_size;

				memset(x, 0, sizeof(*x));
				x->method = "GET";
				x->key = key;
				x->off = off + poff;
				x->dst = buf + poff;
				x->dst_len = len - poff < s->part_size ? len - poff : s->part_size;
				memcpy(x->body_hash, EMPTY_SHA256, sizeof(EMPTY_SHA256));
				s3_xfer_submit(c, x);
				next++;
			}
			busy |= x->state != XS_IDLE;
		}
		if (!busy)
			break;
		if (ret) { /* one piece failed: drop the others */
			for (size_t i = 0; i < nslots; i++) {
				s3_xfer_cancel(c, &xs[i]);
				s3_xfer_fini(&xs[i]);
				xs[i].state = XS_IDLE;
			}
			break;
		}
		s3_conn_step(&s->cl, c, 1);
	}
	free(xs);
	return ret;
}

int s3_read(struct store *st, uint64_t seg_id, uint32_t dev, uint64_t off, void *buf,
		   size_t len)
{
	struct s3_store *s = to_s3(st);
	struct s3_conn *c = NULL;
	char *key = NULL, what[40];
	int ret;

	if (dev != 0)
		return -EINVAL;
	if (off % STORE_ALIGN || len % STORE_ALIGN || (uintptr_t)buf % STORE_ALIGN)
		return -EINVAL;
	if (len == 0)
		return 0;
	snprintf(what, sizeof(what), "segment %016" PRIx64, seg_id);
	key = s3_seg_key(s->prefix, seg_id);
	c = s3_conn_get(&s->cl);
	ret = key && c ? s3_read_pieces(s, c, key, off, buf, len, NULL, what) : -ENOMEM;
	s3_conn_put(&s->cl, c);
	free(key);
	return ret;
}

int s3_remove(struct store *st, uint64_t seg_id, uint32_t dev)
{
	struct s3_store *s = to_s3(st);
	struct s3_xfer head = {.method = "HEAD"}, del = {.method = "DELETE"};
	char *key;
	int ret;

	if (dev != 0)
		return -EINVAL;
	key = s3_seg_key(s->prefix, seg_id);
	if (!key)
		return -ENOMEM;
	head.key = del.key = key;
	/* S3's DELETE succeeds on absent keys: HEAD first, for -ENOENT and the size. */
	ret = s3_xfer_run(&s->cl, NULL, &head);
	if (ret == 0)
		ret = s3_xfer_run(&s->cl, NULL, &del);
	if (ret == 0) {
		uint64_t size = head.clen > 0 ? (uint64_t)head.clen : 0;

		pthread_mutex_lock(&s->cl.lock);
		s->used -= size < s->used ? size : s->used;
		pthread_mutex_unlock(&s->cl.lock);
	} else if (ret != -ENOENT) {
		log_err("s3 %s: removing segment %016" PRIx64 ": %s", s->name, seg_id,
			head.err ? head.why : del.why);
		ret = ret == -EACCES || ret == -ENOMEM ? ret : -EIO;
	}
	s3_xfer_fini(&head);
	s3_xfer_fini(&del);
	free(key);
	return ret;
}

/* The listing prefix: "<prefix>/" or "" for the whole bucket. */
char *s3_list_prefix(const struct s3_store *s)
{
	char *p;

	if (asprintf(&p, "%s%s", s->prefix, *s->prefix ? "/" : "") < 0)
		return NULL;
	return p;
}

/*
 * Call fn(arg, key, size) for every key starting with prefix, all pages
 * (ListObjectsV2, list_page keys a page when set). what names the listing
 * in the log. 0, fn's nonzero return, -EACCES, -ENOMEM or -EIO.
 */
int s3_list_keys(struct s3_store *s, const char *prefix,
		 int (*fn)(void *arg, const char *key, uint64_t size), void *arg, const char *what)
{
	struct s3_conn *c = s3_conn_get(&s->cl);
	char *token = NULL, page[16];
	int ret = 0;

	if (!c)
		return -ENOMEM;
	snprintf(page, sizeof(page), "%u", s->list_page);
	for (;;) {
		struct s3_xfer x = {.method = "GET", .nq = 2};
		struct s3xml_objects o;

		x.q[0] = (struct sigv4_kv){"list-type", "2"};
		x.q[1] = (struct sigv4_kv){"prefix", prefix};
		if (s->list_page)
			x.q[x.nq++] = (struct sigv4_kv){"max-keys", page};
		if (token)
			x.q[x.nq++] = (struct sigv4_kv){"continuation-token", token};
		ret = s3_xfer_run(&s->cl, c, &x);
		if (ret == 0) {
			ret = s3xml_parse_list_objects(x.resp, x.resp_len, &o);
			if (ret == -EINVAL)
				snprintf(x.why, sizeof(x.why), "unparsable ListObjectsV2 reply");
		}
		if (ret) {
			log_err("s3 %s: listing %s: %s", s->name, what, x.why);
			s3_xfer_fini(&x);
			ret = ret == -EACCES || ret == -ENOMEM ? ret : -EIO;
			break;
		}
		s3_xfer_fini(&x);
		for (size_t i = 0; i < o.n && !ret; i++)
			ret = fn(arg, o.v[i].key, o.v[i].size);
		free(token);
		token = NULL;
		if (!ret && o.truncated) {
			if (!o.next_token || !(token = strdup(o.next_token))) {
				log_err("s3 %s: truncated listing without a continuation token",
					s->name);
				ret = o.next_token ? -ENOMEM : -EIO;
			}
		}
		s3xml_objects_free(&o);
		if (ret || !token)
			break;
	}
	s3_conn_put(&s->cl, c);
	free(token);
	return ret;
}

struct seg_walk {
	const struct s3_store *s;
	store_list_fn fn;
	void *arg;
};

/* Only exact segment keys of this store: named objects and nested prefixes are skipped. */
static int seg_walk_key(void *arg, const char *key, uint64_t size)
{
	struct seg_walk *w = arg;
	uint64_t id;

	if (s3_seg_key_parse(w->s->prefix, key, &id))
		return 0;
	return w->fn(w->arg, id, 0, size);
}

int s3_list(struct store *st, store_list_fn fn, void *arg)
{
	struct s3_store *s = to_s3(st);
	struct seg_walk w = {s, fn, arg};
	char *prefix = s3_list_prefix(s);
	int ret;

	if (!prefix)
		return -ENOMEM;
	ret = s3_list_keys(s, prefix, seg_walk_key, &w, "segments");
	free(prefix);
	return ret;
}
