/*
 * store_s3_put — putting a segment (or a large named object) into the S3
 * store: the part buffers, the multipart upload and its parts in flight,
 * and the store_ops put calls (the table: store_s3.c). Requests and
 * retries: store_s3.c DESIGN.
 *
 * DESIGN
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
 * Threading: one put is used by one thread at a time; puts run at once,
 * sharing the store's conns and part-buffer pool (thread-safe).
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

#define POOL_WAIT_MS 1000 /* a put waiting for a part buffer re-checks this often */

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

int s3_put_begin(struct store *st, uint64_t seg_id, uint64_t size_hint,
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

int s3_put_append(struct store_put *put, const void *buf, size_t len)
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
int s3_put_window(struct store_put *put, void **buf, size_t *len)
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

int s3_put_finish(struct store_put *put, uint32_t *dev)
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

void s3_put_abort(struct store_put *put)
{
	struct s3_put *p = (struct s3_put *)put;

	s3_put_cancel(p);
	s3_put_free(p);
}
