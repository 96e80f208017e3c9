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
 * Puts (part buffers, multipart uploads): store_s3_put.c; reads, removes
 * and listings: store_s3_read.c.
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
