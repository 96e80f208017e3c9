/*
 * DESIGN
 * Requests. Every request is an s3_xfer: method, key, query, body (whose
 * real SHA-256 goes into x-amz-content-sha256), optional byte range with a
 * destination buffer. It is signed afresh (SigV4, current time) on every
 * attempt and run on an s3_conn: one libcurl multi handle whose connection
 * cache keeps up to io_workers connections alive between requests. Conns
 * are pooled in the store (s3_store.idle); a put holds one for its whole
 * life, a read/remove/list borrows one per call, so there is no lock around
 * libcurl and connections are reused across calls.
 * Retries. An attempt that ends in a connection error, a timeout, a
 * truncated body (Content-Length mismatch, fewer bytes than the range
 * asked), HTTP 5xx (but 501) or 429, or 400 RequestTimeout/IncompleteBody,
 * or a CompleteMultipartUpload 200 OK carrying <Error> InternalError or
 * SlowDown is retried after s3_retry_delay_ms() (full jitter, Retry-After
 * honoured) up to max_attempts; the waiting transfer stays on its conn and
 * others keep running meanwhile. Other 4xx fail at once with the S3 error
 * Code. What failed is left in x->why for the caller's log line; nothing
 * logged or kept ever holds a secret key, a signature or an Authorization
 * header.
 * Writes. put_append copies into a part buffer (the fill) from the store's
 * pool, unless its bytes are already there: the segment writer stages
 * straight into the fill through put_window (one copy of a hot byte, the
 * writer's read, instead of two). The fill comes from the store's
 * pool (s3_pool.c): buffer_budget / part_size buffers of part_size bytes
 * (default 48 MiB: 3 parts of 16 MiB; at least 2 parts by default, 1 when
 * set), mmap'ed, shared by every put. A full fill is handed to a free slot
 * (one of io_workers per put) only when more data arrives, so a segment of
 * at most part_size bytes is one PUT at put_finish. The first hand-off
 * starts a multipart upload; each slot's UploadPart runs in the background
 * (driven by every later append and by every wait of its put) and keeps its
 * buffer until the part is acknowledged (a retry resends from it), then
 * gives it back. put_finish sends the last part, waits for all, and
 * completes; any failure aborts the upload and returns -EIO.
 * Memory bound: part buffers never exceed the budget, however many puts run
 * (io_workers segment writers) and however many parts each has in flight;
 * idle buffers stay mapped while any put runs and are unmapped when the
 * last one ends. Named objects send their parts from the caller's buffer.
 * No deadlock with a pool smaller than puts x parts: a put asks for a
 * buffer only when it holds no fill. While none is free it drives its own
 * parts in flight (collecting one gives its buffer back) or, with none in
 * flight and so holding no buffer, waits on the pool. Every buffer out is a
 * fill its put's thread is copying into, or a part in flight that its put
 * drives at its next append, finish or abort, and every part ends
 * (acknowledged, or failed after S3_MAX_ATTEMPTS): some buffer always comes
 * back. Hence a thread holding a put must not wait for another put's
 * progress (each segment writer runs its one put in its own thread).
 * Reads. One ranged GET per part_size piece, io_workers at a time, each
 * writing straight into the caller's buffer: reads allocate no data buffer.
 * Listing. One ListObjectsV2 pager (s3_list_keys) for the segment list,
 * which keeps only exact seg-<hex>.spw keys directly under the prefix, and
 * for the named objects.
 * Named objects (store_s3_obj.c) run on the same transfers, put and
 * ranged-read machinery, shared through store_s3_i.h. The request engine
 * (transfers, conns, retries) is tier/s3/s3_xfer.{c,h}.
 */
#include "tier/store/store_s3.h"

#include "common/log.h"
#include "tier/s3/s3xml.h"
#include "tier/store/store_s3_i.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define POOL_WAIT_MS 1000 /* a put waiting for a part buffer re-checks this often */

/* ---- put ---- */

static void put_log(struct s3_put *p, const char *what, const struct s3_xfer *x)
{
	if (p->named)
		log_err("s3 %s: %s of object %s failed: %s", to_s3(p->base.st)->name, what, p->key,
			x->why);
	else
		log_err("s3 %s: %s of segment %016" PRIx64 " failed: %s", to_s3(p->base.st)->name,
			what, p->seg_id, x->why);
}

/* A put of key (taken over: freed on failure too) with its conn and slots; NULL: no memory. */
struct s3_put *s3_put_new(struct s3_store *s, char *key)
{
	struct s3_put *p = calloc(1, sizeof(*p));

	if (!p || !key)
		goto fail;
	p->base.st = &s->base;
	p->key = key;
	p->slots = calloc(s->cl.io_workers, sizeof(*p->slots));
	p->conn = s3_conn_get(&s->cl);
	if (!p->slots || !p->conn) {
		s3_conn_put(&s->cl, p->conn);
		free(p->slots);
		goto fail;
	}
	pthread_mutex_lock(&s->cl.lock);
	s->puts++;
	pthread_mutex_unlock(&s->cl.lock);
	return p;
fail:
	free(key);
	free(p);
	return NULL;
}

static int s3_put_begin(struct store *st, uint64_t seg_id, uint64_t size_hint,
			struct store_put **out)
{
	struct s3_store *s = to_s3(st);
	struct s3_put *p = s3_put_new(s, s3_seg_key(s->prefix, seg_id));

	if (!p)
		return -ENOMEM;
	p->seg_id = seg_id;
	*out = &p->base;
	return 0;
}

/* Collect finished parts: record their ETags. 0, or -EIO on the first failed part. */
static int put_collect(struct s3_put *p)
{
	struct s3_store *s = to_s3(p->base.st);
	int ret = 0;

	for (unsigned i = 0; i < s->cl.io_workers; i++) {
		struct part_slot *sl = &p->slots[i];

		if (!sl->busy || sl->x.state != XS_DONE)
			continue;
		sl->busy = 0;
		if (sl->x.err == 0 && !sl->x.etag[0]) {
			snprintf(sl->x.why, sizeof(sl->x.why), "no ETag in the UploadPart reply");
			sl->x.err = -EIO;
		}
		if (sl->x.err) {
			char what[40];

			snprintf(what, sizeof(what), "upload of part %u", sl->part_no);
			put_log(p, what, &sl->x);
			ret = -EIO;
		} else {
			p->etags[sl->part_no - 1] = strdup(sl->x.etag);
			if (!p->etags[sl->part_no - 1])
				ret = -ENOMEM;
		}
		s3_xfer_fini(&sl->x);
		s3_pool_put(s->pool, sl->buf); /* acknowledged (or failed for good) */
		sl->buf = NULL;
	}
	return ret;
}

static int put_initiate(struct s3_put *p)
{
	struct s3_store *s = to_s3(p->base.st);
	struct s3_xfer x = {.method = "POST", .key = p->key, .q = {{"uploads", ""}}, .nq = 1};
	int ret = s3_xfer_run(&s->cl, p->conn, &x);

	if (ret == 0) {
		ret = s3xml_parse_initiate(x.resp, x.resp_len, &p->upload_id);
		if (ret == -EINVAL)
			snprintf(x.why, sizeof(x.why), "no UploadId in the reply");
	}
	if (ret)
		put_log(p, "CreateMultipartUpload", &x);
	s3_xfer_fini(&x);
	return ret == -ENOMEM ? ret : ret ? -EIO : 0;
}

/* A free slot for the next part (starting the multipart upload first), waiting for one. */
int s3_put_slot(struct s3_put *p, struct part_slot **out)
{
	struct s3_store *s = to_s3(p->base.st);
	struct part_slot *sl = NULL;
	int ret;

	if (!p->upload_id && (ret = put_initiate(p)))
		return ret;
	if (p->nparts >= S3_MAX_PARTS) {
		if (p->named)
			log_err("s3 %s: object %s needs more than %u parts; raise s3_part_size",
				s->name, p->key, S3_MAX_PARTS);
		else
			log_err("s3 %s: segment %016" PRIx64
				" needs more than %u parts; raise s3_part_size",
				s->name, p->seg_id, S3_MAX_PARTS);
		return -EFBIG;
	}
	if (p->nparts >= p->etags_cap) {
		unsigned cap = p->etags_cap ? p->etags_cap * 2 : 64;
		char **e = realloc(p->etags, cap * sizeof(*e));

		if (!e)
			return -ENOMEM;
		memset(e + p->etags_cap, 0, (cap - p->etags_cap) * sizeof(*e));
		p->etags = e;
		p->etags_cap = cap;
	}
	for (;;) {
		if ((ret = put_collect(p)))
			return ret;
		for (unsigned i = 0; i < s->cl.io_workers && !sl; i++)
			if (!p->slots[i].busy)
				sl = &p->slots[i];
		if (sl)
			break;
		s3_conn_step(&s->cl, p->conn, 1);
	}
	*out = sl;
	return 0;
}

/* Start uploading len bytes at body (alive until the part is collected) as the next part. */
void s3_put_send(struct s3_put *p, struct part_slot *sl, const uint8_t *body, size_t len)
{
	struct s3_store *s = to_s3(p->base.st);

	sl->part_no = ++p->nparts;
	snprintf(sl->part_str, sizeof(sl->part_str), "%u", sl->part_no);
	memset(&sl->x, 0, sizeof(sl->x));
	sl->x.method = "PUT";
	sl->x.key = p->key;
	sl->x.q[0] = (struct sigv4_kv){"partNumber", sl->part_str};
	sl->x.q[1] = (struct sigv4_kv){"uploadId", p->upload_id};
	sl->x.nq = 2;
	sl->x.body = body;
	sl->x.body_len = len;
	sl->busy = 1;
	s3_xfer_submit(p->conn, &sl->x);
	s3_conn_step(&s->cl, p->conn, 0);
}

/* Hand the full fill buffer to a free slot as the next part and start its
 * upload; the slot keeps the buffer until the part is acknowledged. */
static int put_handoff(struct s3_put *p)
{
	struct part_slot *sl;
	int ret = s3_put_slot(p, &sl);

	if (ret)
		return ret;
	sl->buf = p->fill;
	sl->len = p->fill_len;
	p->fill = NULL;
	p->fill_len = 0;
	s3_put_send(p, sl, sl->buf, sl->len);
	return 0;
}

/*
 * A part buffer for p->fill from the store's pool. While the budget is used
 * up, keep p's own parts moving (each gives its buffer back once collected)
 * or, with none in flight, wait for another put to give one back: p holds
 * no buffer then, so it blocks nobody. 0, -EIO (a part failed), -ENOMEM.
 */
static int put_fill_get(struct s3_put *p)
{
	struct s3_store *s = to_s3(p->base.st);
	void *buf;
	int ret;

	for (;;) {
		int busy = 0;

		for (unsigned i = 0; i < s->cl.io_workers; i++)
			busy |= p->slots[i].busy;
		ret = s3_pool_get(s->pool, busy ? 0 : POOL_WAIT_MS, &buf);
		if (ret != -EAGAIN)
			break;
		if (busy) {
			s3_conn_step(&s->cl, p->conn, 1);
			if ((ret = put_collect(p)))
				return ret;
		}
	}
	if (ret == 0)
		p->fill = buf;
	return ret;
}

static int s3_put_append(struct store_put *put, const void *buf, size_t len)
{
	struct s3_put *p = (struct s3_put *)put;
	struct s3_store *s = to_s3(put->st);
	const uint8_t *src = buf;

	if (p->err)
		return p->err;
	if (len % STORE_ALIGN || (uintptr_t)buf % STORE_ALIGN)
		return -EINVAL;
	if (p->fill && src == p->fill + p->fill_len && len <= s->part_size - p->fill_len) {
		/* written in place through s3_put_window: nothing to copy */
		p->fill_len += len;
		p->size += len;
		len = 0;
	}
	while (len) {
		size_t n;

		if (p->fill_len == s->part_size && (p->err = put_handoff(p)))
			return p->err;
		if (!p->fill && (p->err = put_fill_get(p)))
			return p->err;
		n = s->part_size - p->fill_len;
		n = n < len ? n : len;
		memcpy(p->fill + p->fill_len, src, n);
		p->fill_len += n;
		p->size += n;
		src += n;
		len -= n;
	}
	if (p->upload_id) { /* keep the parts in flight moving */
		s3_conn_step(&s->cl, p->conn, 0);
		if ((p->err = put_collect(p)))
			return p->err;
	}
	return 0;
}

/* The rest of the part being filled (a new part, the full one handed off,
 * when it is full): the segment writer stages its bytes there, so a part's
 * body is written once, by the writer's read of the hot file. */
static int s3_put_window(struct store_put *put, void **buf, size_t *len)
{
	struct s3_put *p = (struct s3_put *)put;
	struct s3_store *s = to_s3(put->st);

	if (p->err)
		return p->err;
	if (s->part_size % STORE_ALIGN || p->fill_len % STORE_ALIGN)
		return -EOPNOTSUPP; /* whole blocks only: the caller stages itself */
	if (p->fill_len == s->part_size && (p->err = put_handoff(p)))
		return p->err;
	if (!p->fill && (p->err = put_fill_get(p)))
		return p->err;
	*buf = p->fill + p->fill_len;
	*len = s->part_size - p->fill_len;
	return 0;
}

static void put_abort_upload(struct s3_put *p)
{
	struct s3_store *s = to_s3(p->base.st);
	struct s3_xfer x = {.method = "DELETE", .key = p->key, .nq = 1, .max_attempts = 3};
	char seg[40];
	int ret;

	if (!p->upload_id)
		return;
	snprintf(seg, sizeof(seg), "segment %016" PRIx64, p->seg_id);
	x.q[0] = (struct sigv4_kv){"uploadId", p->upload_id};
	ret = s3_xfer_run(&s->cl, p->conn, &x);
	if (ret == -EOPNOTSUPP)
		log_warn("s3 %s: the server cannot abort multipart uploads (%s); the parts of "
			 "%s%s stay until its lifecycle rules remove them",
			 s->name, x.why, p->named ? "object " : seg, p->named ? p->key : "");
	else if (ret && ret != -ENOENT)
		log_warn("s3 %s: aborting the upload of %s%s: %s", s->name,
			 p->named ? "object " : seg, p->named ? p->key : "", x.why);
	s3_xfer_fini(&x);
}

/* Cancel the parts in flight and abort the multipart upload, if any. */
void s3_put_cancel(struct s3_put *p)
{
	struct s3_store *s = to_s3(p->base.st);

	for (unsigned i = 0; i < s->cl.io_workers; i++)
		s3_xfer_cancel(p->conn, &p->slots[i].x);
	put_abort_upload(p);
}

/* Wait until every part handed out is uploaded. 0, or the first part's failure. */
int s3_put_drain(struct s3_put *p)
{
	struct s3_store *s = to_s3(p->base.st);
	int ret;

	for (;;) {
		int busy = 0;

		if ((ret = put_collect(p)))
			return ret;
		for (unsigned i = 0; i < s->cl.io_workers; i++)
			busy |= p->slots[i].busy;
		if (!busy)
			return 0;
		s3_conn_step(&s->cl, p->conn, 1);
	}
}

void s3_put_free(struct s3_put *p)
{
	struct s3_store *s = to_s3(p->base.st);
	int idle;

	for (unsigned i = 0; i < s->cl.io_workers; i++) {
		s3_xfer_cancel(p->conn, &p->slots[i].x);
		s3_xfer_fini(&p->slots[i].x);
		s3_pool_put(s->pool, p->slots[i].buf);
	}
	s3_conn_put(&s->cl, p->conn);
	for (unsigned i = 0; i < p->etags_cap; i++)
		free(p->etags[i]);
	free(p->etags);
	free(p->slots);
	s3_pool_put(s->pool, p->fill);
	free(p->upload_id);
	free(p->key);
	pthread_mutex_lock(&s->cl.lock);
	idle = --s->puts == 0;
	pthread_mutex_unlock(&s->cl.lock);
	if (idle) /* no upload running: the part buffers go back to the OS */
		s3_pool_trim(s->pool);
	free(p);
}

int s3_put_complete(struct s3_put *p)
{
	struct s3_store *s = to_s3(p->base.st);
	struct s3_xfer x = {.method = "POST", .key = p->key, .nq = 1, .complete = 1};
	char *body = NULL;
	size_t blen = 0;
	FILE *f = open_memstream(&body, &blen);
	int ret;

	if (!f)
		return -ENOMEM;
	fputs("<CompleteMultipartUpload xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">", f);
	for (unsigned i = 0; i < p->nparts; i++) {
		fprintf(f, "<Part><PartNumber>%u</PartNumber><ETag>", i + 1);
		for (const char *c = p->etags[i]; *c; c++) {
			if (*c == '&')
				fputs("&amp;", f);
			else if (*c == '<')
				fputs("&lt;", f);
			else if (*c == '>')
				fputs("&gt;", f);
			else
				fputc(*c, f);
		}
		fputs("</ETag></Part>", f);
	}
	fputs("</CompleteMultipartUpload>", f);
	if (fclose(f) || !body) {
		free(body);
		return -ENOMEM;
	}
	x.q[0] = (struct sigv4_kv){"uploadId", p->upload_id};
	x.body = (const uint8_t *)body;
	x.body_len = blen;
	ret = s3_xfer_run(&s->cl, p->conn, &x);
	if (ret)
		put_log(p, "CompleteMultipartUpload", &x);
	s3_xfer_fini(&x);
	free(body);
	return ret == -ENOMEM ? ret : ret ? -EIO : 0;
}

static int s3_put_finish(struct store_put *put, uint32_t *dev)
{
	struct s3_put *p = (struct s3_put *)put;
	struct s3_store *s = to_s3(put->st);
	int ret = p->err;

	if (ret)
		goto fail;
	if (!p->upload_id) {
		struct s3_xfer x = {.method = "PUT", .key = p->key};

		x.body = p->fill;
		x.body_len = p->fill_len;
		ret = s3_xfer_run(&s->cl, p->conn, &x);
		if (ret) {
			put_log(p, "PUT", &x);
			ret = ret == -ENOMEM ? ret : -EIO;
		}
		s3_xfer_fini(&x);
		if (ret)
			goto fail;
	} else {
		if (p->fill_len && (ret = put_handoff(p)))
			goto fail;
		if ((ret = s3_put_drain(p)))
			goto fail;
		if ((ret = s3_put_complete(p)))
			goto fail;
	}
	pthread_mutex_lock(&s->cl.lock);
	s->used += p->size;
	pthread_mutex_unlock(&s->cl.lock);
	*dev = 0;
	s3_put_free(p);
	return 0;
fail:
	s3_put_cancel(p);
	{
		/* The PUT or CompleteMultipartUpload may have succeeded with its
		 * reply lost: delete the key, so a failed put leaves nothing behind
		 * (deleting a missing key is a 204 in S3). A few attempts only:
		 * after a put that ran out of retries S3 is likely gone, and the
		 * spill that waits for this would hold its chunks (and writers)
		 * for another whole retry budget; a key left behind belongs to no
		 * segment, so the next mount's recovery (or, without a journal,
		 * the unmount's sweep of the mount's prefix) removes it. */
		struct s3_xfer d = {.method = "DELETE", .key = p->key,
				    .max_attempts = S3_OPEN_ATTEMPTS};
		if (s3_xfer_run(&s->cl, p->conn, &d) && d.status != 404)
			log_warn("s3 %s: cannot delete %s after a failed put: %s (removed by the "
				 "next mount, or at unmount without a journal)",
				 s->name, p->key, d.why);
		s3_xfer_fini(&d);
	}
	s3_put_free(p);
	return ret;
}

static void s3_put_abort(struct store_put *put)
{
	struct s3_put *p = (struct s3_put *)put;

	s3_put_cancel(p);
	s3_put_free(p);
}

/* ---- read, remove, stat, list ---- */

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

static int s3_read(struct store *st, uint64_t seg_id, uint32_t dev, uint64_t off, void *buf,
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

static int s3_remove(struct store *st, uint64_t seg_id, uint32_t dev)
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

static int s3_stat(struct store *st, struct store_dev_stat *out, int max)
{
	struct s3_store *s = to_s3(st);

	if (max < 1)
		return 1;
	memset(out, 0, sizeof(*out));
	snprintf(out->name, sizeof(out->name), "%s", s->name);
	pthread_mutex_lock(&s->cl.lock);
	out->used = s->used;
	out->failed = s->cl.failed;
	pthread_mutex_unlock(&s->cl.lock);
	out->total = S3_CAPACITY;
	out->avail = S3_CAPACITY > out->used ? S3_CAPACITY - out->used : 0;
	return 1;
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

static int s3_list(struct store *st, store_list_fn fn, void *arg)
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

int store_s3_buffer_stats(struct store *st, struct s3_pool_stats *out)
{
	if (!st || st->ops != &s3_ops)
		return -EINVAL;
	s3_pool_stats(to_s3(st)->pool, out);
	return 0;
}

static void s3_unmounting(struct store *st)
{
	s3_client_unmounting(&to_s3(st)->cl);
}

static void s3_close(struct store *st)
{
	struct s3_store *s = to_s3(st);

	if (s->puts)
		log_err("s3 %s: closed with %u puts in flight", s->name, s->puts);
	while (s->cl.idle) {
		struct s3_conn *c = s->cl.idle;

		s->cl.idle = c->next;
		s3_conn_free(c);
	}
	s3_pool_free(s->pool);
	s3_credentials_free(&s->cl.creds);
	pthread_mutex_destroy(&s->cl.lock);
	free(s->endpoint);
	free(s->region);
	free(s->bucket);
	free(s->prefix);
	free(s->cl.ca_file);
	free(s);
}

const struct store_ops s3_ops = {
    .name = "s3",
    .tier = STORE_TIER_S3,
    .put_begin = s3_put_begin,
    .put_append = s3_put_append,
    .put_window = s3_put_window,
    .put_finish = s3_put_finish,
    .put_abort = s3_put_abort,
    .read = s3_read,
    .remove = s3_remove,
    .stat = s3_stat,
    .list = s3_list,
    .unmounting = s3_unmounting,
    .close = s3_close,
};

/* ---- open ---- */

/* HEAD the bucket; on failure err gets the reason. */
static int check_bucket(struct s3_store *s, char *err, size_t errlen)
{
	struct s3_xfer x = {.method = "HEAD", .max_attempts = S3_OPEN_ATTEMPTS};
	int ret = s3_xfer_run(&s->cl, NULL, &x);

	if (ret == 0)
		goto out;
	if (x.conn_fail || (x.status == 0 && ret != -ENOMEM)) {
		snprintf(err, errlen, "cannot reach S3 endpoint %s: %s", s->endpoint, x.why);
		ret = -EHOSTUNREACH;
	} else if (x.status == 403) {
		snprintf(err, errlen,
			 "%s: access denied (HTTP 403 on HEAD bucket): the access key or secret "
			 "is wrong (signature mismatch), or the key lacks permission on the bucket",
			 s->name);
		ret = -EACCES;
	} else if (x.status == 404) {
		snprintf(err, errlen, "%s: bucket %s does not exist (HTTP 404)", s->name,
			 s->bucket);
		ret = -ENOENT;
	} else if (x.region[0] && strcmp(x.region, s->region)) {
		snprintf(err, errlen, "%s: the bucket is in region %s, not %s (set s3_region=%s)",
			 s->name, x.region, s->region, x.region);
		ret = -EINVAL;
	} else {
		snprintf(err, errlen, "%s: checking the bucket: %s", s->name, x.why);
		ret = ret == -ENOMEM ? ret : -EIO;
	}
out:
	s3_xfer_fini(&x);
	return ret;
}

/* Length of the parent of prefix when its last component is a 32-hex mount
 * id ("data/<uuid>" -> 4, "<uuid>" -> 0), else -1. */
static ssize_t mount_parent_len(const char *prefix)
{
	const char *slash = strrchr(prefix, '/');
	const char *last = slash ? slash + 1 : prefix;
	if (strlen(last) != 32 || strspn(last, "0123456789abcdef") != 32)
		return -1;
	return slash ? slash - prefix : 0;
}

/* Is key a segment of ours, or of another mount under the same parent? */
static int stale_seg_key(const struct s3_store *s, ssize_t plen, const char *key)
{
	uint64_t id;
	char sib[1024];
	const char *mid;

	if (s3_seg_key_parse(s->prefix, key, &id) == 0)
		return 1;
	if (plen < 0 || (plen && (strncmp(key, s->prefix, (size_t)plen) || key[plen] != '/')))
		return 0;
	mid = key + (plen ? plen + 1 : 0);
	if (strlen(mid) < 33 || strspn(mid, "0123456789abcdef") != 32 || mid[32] != '/')
		return 0;
	snprintf(sib, sizeof(sib), "%.*s", (int)(mid - key + 32), key);
	return s3_seg_key_parse(sib, key, &id) == 0;
}

/*
 * Abort the unfinished multipart uploads of segments left by a crash. When
 * the prefix ends in a mount id (the daemon mounts under <prefix>/<uuid>),
 * the uploads of earlier mounts under the same parent are aborted too; an
 * upload of a live mount aborted by mistake only makes that mount retry its
 * segment, its chunks stay in RAM meanwhile.
 */
static void abort_stale_uploads(struct s3_store *s)
{
	ssize_t plen = mount_parent_len(s->prefix);
	char *prefix = NULL, *key_marker = NULL, *id_marker = NULL;
	unsigned aborted = 0;

	if (plen < 0)
		prefix = s3_list_prefix(s);
	else if (asprintf(&prefix, "%.*s%s", (int)plen, s->prefix, plen ? "/" : "") < 0)
		prefix = NULL;

	while (prefix) {
		struct s3_xfer x = {.method = "GET", .nq = 2};
		struct s3xml_uploads u;
		int ret;

		x.q[0] = (struct sigv4_kv){"uploads", ""};
		x.q[1] = (struct sigv4_kv){"prefix", prefix};
		if (key_marker)
			x.q[x.nq++] = (struct sigv4_kv){"key-marker", key_marker};
		if (id_marker)
			x.q[x.nq++] = (struct sigv4_kv){"upload-id-marker", id_marker};
		ret = s3_xfer_run(&s->cl, NULL, &x);
		if (ret == 0 && s3xml_parse_list_uploads(x.resp, x.resp_len, &u)) {
			snprintf(x.why, sizeof(x.why), "unparsable ListMultipartUploads reply");
			ret = -EIO;
		}
		if (ret) {
			log_warn("s3 %s: cannot list unfinished multipart uploads (%s)%s", s->name,
				 x.why,
				 ret == -EOPNOTSUPP ? ": the server does not support it" : "");
			s3_xfer_fini(&x);
			break;
		}
		s3_xfer_fini(&x);
		for (size_t i = 0; i < u.n; i++) {
			struct s3_xfer a = {.method = "DELETE", .key = u.v[i].key, .nq = 1};

			if (!stale_seg_key(s, plen, u.v[i].key))
				continue;
			a.q[0] = (struct sigv4_kv){"uploadId", u.v[i].upload_id};
			ret = s3_xfer_run(&s->cl, NULL, &a);
			if (ret && ret != -ENOENT)
				log_warn("s3 %s: aborting a stale upload of %s: %s", s->name,
					 u.v[i].key, a.why);
			aborted += !ret;
			s3_xfer_fini(&a);
		}
		free(key_marker);
		free(id_marker);
		key_marker = id_marker = NULL;
		if (u.truncated && u.next_key_marker) {
			key_marker = strdup(u.next_key_marker);
			id_marker =
			    u.next_upload_id_marker ? strdup(u.next_upload_id_marker) : NULL;
		}
		s3xml_uploads_free(&u);
		if (!key_marker)
			break;
	}
	if (aborted)
		log_info("s3 %s: aborted %u unfinished segment uploads", s->name, aborted);
	free(key_marker);
	free(id_marker);
	free(prefix);
}

int store_s3_open(const struct s3_config *cfg, struct store **out, char *err, size_t errlen)
{
	struct s3_store *s;
	const char *scheme_end, *host;
	size_t hostlen;
	struct timespec ts;
	uint64_t bufs;
	int ret;

	snprintf(err, errlen, "out of memory");
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	pthread_mutex_init(&s->cl.lock, NULL);
	s->base.ops = &s3_ops;
	clock_gettime(CLOCK_REALTIME, &ts);
	s->cl.rng = ((uint64_t)ts.tv_nsec << 20) ^ (uint64_t)ts.tv_sec ^ (uint64_t)getpid() ^
		 (uint64_t)(uintptr_t)s;
	s->cl.rng |= 1;
	ret = s3_url_parse_err(cfg->url, &s->bucket, &s->prefix, err, errlen);
	if (ret)
		goto err;
	snprintf(s->name, sizeof(s->name), "s3://%s%s%s", s->bucket, *s->prefix ? "/" : "",
		 s->prefix);
	s->region = strdup(cfg->region && *cfg->region ? cfg->region : S3_DEFAULT_REGION);
	if (!s->region)
		goto err_nomem;
	if (cfg->endpoint && *cfg->endpoint)
		s->endpoint = strdup(cfg->endpoint);
	else if (asprintf(&s->endpoint, "https://s3.%s.amazonaws.com", s->region) < 0)
		s->endpoint = NULL;
	if (!s->endpoint)
		goto err_nomem;
	if (s3_endpoint_split(s->endpoint, &scheme_end, &host, &hostlen)) {
		snprintf(err, errlen, "s3_endpoint=%s: expected http(s)://host[:port]",
			 s->endpoint);
		ret = -EINVAL;
		goto err;
	}
	if (cfg->ca_file && *cfg->ca_file) {
		if (access(cfg->ca_file, R_OK) < 0) {
			ret = -errno;
			snprintf(err, errlen, "s3_ca_file=%s: %s", cfg->ca_file, strerror(errno));
			goto err;
		}
		if (!(s->cl.ca_file = strdup(cfg->ca_file)))
			goto err_nomem;
	}
	s->part_size = cfg->part_size ? cfg->part_size : S3_DEFAULT_PART_SIZE;
	if (s->part_size < S3_MIN_PART_SIZE || s->part_size > S3_MAX_PART_SIZE ||
	    s->part_size % STORE_ALIGN) {
		snprintf(err, errlen,
			 "s3_part_size=%" PRIu64 ": must be 5M to 5G and a multiple of 4K",
			 s->part_size);
		ret = -EINVAL;
		goto err;
	}
	bufs = (cfg->buffer_budget ? cfg->buffer_budget : S3_DEFAULT_BUFFER_BUDGET) / s->part_size;
	if (bufs < (cfg->buffer_budget ? 1u : 2u))
		bufs = cfg->buffer_budget ? 1 : 2; /* the default overlaps a fill and an upload */
	if (bufs > S3_MAX_PART_BUFFERS)
		bufs = S3_MAX_PART_BUFFERS;
	if ((ret = s3_pool_new(s->part_size, (unsigned)bufs, &s->pool)))
		goto err;
	s->list_page = cfg->list_page;
	s->cl.io_workers = cfg->io_workers ? cfg->io_workers : S3_DEFAULT_IO_WORKERS;
	if (s->cl.io_workers > S3_MAX_IO_WORKERS)
		s->cl.io_workers = S3_MAX_IO_WORKERS;
	s->cl.target = (struct s3_target){s->endpoint, s->region, s->bucket, cfg->path_style};
	ret = s3_credentials_load(cfg->credentials_file, &s->cl.creds, err, errlen);
	if (ret)
		goto err;
	s3_xfer_global_init();
	ret = check_bucket(s, err, errlen);
	if (ret)
		goto err;
	abort_stale_uploads(s);
	log_info("s3 %s: bucket reachable at %s (%s-style, parts of %" PRIu64 " MiB, %u "
		 "connections, %" PRIu64 " part buffers)",
		 s->name, s->endpoint, cfg->path_style ? "path" : "virtual-host",
		 s->part_size >> 20, s->cl.io_workers, bufs);
	err[0] = 0;
	*out = &s->base;
	return 0;
err_nomem:
	snprintf(err, errlen, "out of memory");
	ret = -ENOMEM;
err:
	s3_close(&s->base);
	return ret;
}
