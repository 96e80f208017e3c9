/*
 * DESIGN
 * Everything here is pure string work except s3_credentials_load, which
 * reads one small file: open, fstat the open descriptor (so the mode that
 * is checked is the mode of the file that is read), read, parse, wipe.
 * Secrets are copied only into s3_creds and wiped when freed.
 */
#include "tier/s3/s3req.h"

#include "common/segname.h"

#include "common/log.h"
#include "common/span.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#define CREDS_MAX    65536

static void wipe_free(char *s)
{
	if (s) {
		explicit_bzero(s, strlen(s));
		free(s);
	}
}

/* ---- pure helpers: backoff, URL, key, credentials ---- */

uint32_t s3_backoff_ms(unsigned attempt, int throttled, uint64_t rnd)
{
	uint64_t ceil = throttled ? S3_BACKOFF_THROTTLE_MS : S3_BACKOFF_BASE_MS;

	for (unsigned i = 0; i < attempt && ceil < S3_BACKOFF_CAP_MS; i++)
		ceil <<= 1;
	if (ceil > S3_BACKOFF_CAP_MS)
		ceil = S3_BACKOFF_CAP_MS;
	return (uint32_t)(rnd % (ceil + 1));
}

/* Plain decimal digits [p, end) that fit an int64, or -1. */
static int64_t hdr_number(const char *p, const char *end)
{
	int64_t v = 0;

	if (p == end)
		return -1;
	for (; p < end; p++) {
		if (*p < '0' || *p > '9' || v > (INT64_MAX - (*p - '0')) / 10)
			return -1;
		v = v * 10 + (*p - '0');
	}
	return v;
}

enum s3_hdr s3_header_parse(const char *line, size_t len, struct s3_hdr_val *v)
{
	static const struct {
		const char *name;
		enum s3_hdr h;
	} names[] = {{"etag", S3_HDR_ETAG},
		     {"retry-after", S3_HDR_RETRY_AFTER},
		     {"content-range", S3_HDR_CONTENT_RANGE},
		     {"content-length", S3_HDR_CONTENT_LENGTH},
		     {"x-amz-bucket-region", S3_HDR_REGION}};
	const char *colon = memchr(line, ':', len), *s, *e, *end = line + len;
	enum s3_hdr h = S3_HDR_OTHER;
	size_t n;

	v->text[0] = 0;
	v->num = -1;
	if (!colon)
		return S3_HDR_OTHER;
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (strlen(names[i].name) == (size_t)(colon - line) &&
		    !strncasecmp(line, names[i].name, (size_t)(colon - line)))
			h = names[i].h;
	if (h == S3_HDR_OTHER)
		return h;
	s = colon + 1;
	e = end;
	span_ltrim(&s, e, " \t");
	span_rtrim(s, &e, " \t\r\n");
	n = (size_t)(e - s) < sizeof(v->text) - 1 ? (size_t)(e - s) : sizeof(v->text) - 1;
	memcpy(v->text, s, n);
	v->text[n] = 0;
	switch (h) {
	case S3_HDR_RETRY_AFTER:
		if ((v->num = hdr_number(s, e)) > 3600)
			v->num = 3600;
		break;
	case S3_HDR_CONTENT_RANGE: {
		const char *slash = e;
		while (slash > s && slash[-1] != '/')
			slash--;
		v->num = slash > s ? hdr_number(slash, e) : -1;
		break;
	}
	case S3_HDR_CONTENT_LENGTH:
		v->num = hdr_number(s, e);
		break;
	default:
		break;
	}
	return h;
}

uint32_t s3_retry_delay_ms(unsigned attempt, int throttled, uint32_t retry_after_s, uint64_t rnd)
{
	uint64_t d = s3_backoff_ms(attempt, throttled, rnd);
	uint64_t ra = (uint64_t)retry_after_s * 1000;

	if (ra > d)
		d = ra;
	return (uint32_t)(d > S3_BACKOFF_CAP_MS ? S3_BACKOFF_CAP_MS : d);
}

static int bucket_ok(const char *b, size_t n)
{
	if (n < 3 || n > 63 || !isalnum((unsigned char)b[0]) || !isalnum((unsigned char)b[n - 1]))
		return 0;
	for (size_t i = 0; i < n; i++)
		if (!isalnum((unsigned char)b[i]) && b[i] != '.' && b[i] != '-' && b[i] != '_')
			return 0;
	return 1;
}

int s3_url_parse_err(const char *url, char **bucket, char **prefix, char *err, size_t errlen)
{
	const char *b, *slash, *p;
	size_t blen, plen;

	*bucket = *prefix = NULL;
	if (!url || strncmp(url, "s3://", 5)) {
		snprintf(err, errlen, "s3=%s: not an s3://bucket/prefix URL", url ? url : "");
		return -EINVAL;
	}
	b = url + 5;
	slash = strchr(b, '/');
	blen = slash ? (size_t)(slash - b) : strlen(b);
	if (!bucket_ok(b, blen)) {
		snprintf(err, errlen,
			 "s3=%s: bad bucket name (3-63 letters, digits, '.', '-', '_')", url);
		return -EINVAL;
	}
	p = slash ? slash : b + blen;
	while (*p == '/')
		p++;
	plen = strlen(p);
	while (plen && p[plen - 1] == '/')
		plen--;
	if (plen > 900) {
		snprintf(err, errlen, "s3=%s: prefix longer than 900 bytes", url);
		return -EINVAL;
	}
	for (size_t i = 0, start = 0; i <= plen; i++) {
		if (i < plen && (unsigned char)p[i] < 0x20) {
			snprintf(err, errlen, "s3=%s: control character in the prefix", url);
			return -EINVAL;
		}
		if (plen && (i == plen || p[i] == '/')) {
			size_t n = i - start;

			if (n == 0 || (n == 1 && p[start] == '.') ||
			    (n == 2 && p[start] == '.' && p[start + 1] == '.')) {
				snprintf(err, errlen,
					 "s3=%s: empty, '.' or '..' component in the prefix", url);
				return -EINVAL;
			}
			start = i + 1;
		}
	}
	*bucket = strndup(b, blen);
	*prefix = strndup(p, plen);
	if (!*bucket || !*prefix) {
		free(*bucket);
		free(*prefix);
		*bucket = *prefix = NULL;
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	return 0;
}

int s3_url_parse(const char *url, char **bucket, char **prefix)
{
	char err[256];
	int ret = s3_url_parse_err(url, bucket, prefix, err, sizeof(err));

	if (ret)
		log_err("%s", err);
	return ret;
}

char *s3_seg_key(const char *prefix, uint64_t seg_id)
{
	char *k;

	if (asprintf(&k, "%s%sseg-%016" PRIx64 ".spw", prefix, *prefix ? "/" : "", seg_id) < 0)
		return NULL;
	return k;
}

int s3_seg_key_parse(const char *prefix, const char *key, uint64_t *id)
{
	size_t pl = strlen(prefix);

	if (pl) {
		if (strncmp(key, prefix, pl) || key[pl] != '/')
			return -1;
		key += pl + 1;
	}
	return segname_parse(key, id);
}

void s3_credentials_free(struct s3_creds *c)
{
	wipe_free(c->access_key);
	wipe_free(c->secret_key);
	wipe_free(c->session_token);
	memset(c, 0, sizeof(*c));
}

/* Parse an AWS shared-credentials document (modified in place) for profile. */
static int creds_parse(char *text, const char *profile, const char *file, struct s3_creds *out,
		       char *err, size_t errlen)
{
	int in = 0, found = 0;
	char *save = NULL;

	for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		char *l = str_trim(line), *eq, *k, *v, **dst = NULL;

		if (!*l || *l == '#' || *l == ';')
			continue;
		if (*l == '[') {
			char *end = strchr(l, ']');

			if (!end)
				continue;
			*end = 0;
			in = !strcmp(str_trim(l + 1), profile);
			found |= in;
			continue;
		}
		if (!in || !(eq = strchr(l, '=')))
			continue;
		*eq = 0;
		k = str_trim(l);
		v = str_trim(eq + 1);
		if (!strcasecmp(k, "aws_access_key_id"))
			dst = &out->access_key;
		else if (!strcasecmp(k, "aws_secret_access_key"))
			dst = &out->secret_key;
		else if (!strcasecmp(k, "aws_session_token"))
			dst = &out->session_token;
		if (!dst || !*v)
			continue;
		wipe_free(*dst);
		*dst = strdup(v);
		if (!*dst) {
			snprintf(err, errlen, "out of memory");
			return -ENOMEM;
		}
	}
	if (!found) {
		snprintf(err, errlen, "credentials file %s: no [%s] profile", file, profile);
		return -ENOENT;
	}
	if (!out->access_key || !out->secret_key) {
		snprintf(err, errlen, "credentials file %s: profile [%s] lacks %s", file, profile,
			 out->access_key ? "aws_secret_access_key" : "aws_access_key_id");
		return -EINVAL;
	}
	return 0;
}

int s3_credentials_load(const char *file, struct s3_creds *out, char *err, size_t errlen)
{
	const char *profile = getenv("AWS_PROFILE");
	struct stat sb;
	char *text = NULL;
	ssize_t n;
	size_t len = 0;
	int fd, ret;

	memset(out, 0, sizeof(*out));
	if (!file) {
		const char *id = getenv("AWS_ACCESS_KEY_ID");
		const char *secret = getenv("AWS_SECRET_ACCESS_KEY");
		const char *token = getenv("AWS_SESSION_TOKEN");

		if (!id || !*id || !secret || !*secret) {
			snprintf(err, errlen,
				 "no S3 credentials: set AWS_ACCESS_KEY_ID and "
				 "AWS_SECRET_ACCESS_KEY, or s3_credentials=FILE");
			return -ENOENT;
		}
		out->access_key = strdup(id);
		out->secret_key = strdup(secret);
		if (token && *token)
			out->session_token = strdup(token);
		if (!out->access_key || !out->secret_key ||
		    (token && *token && !out->session_token)) {
			s3_credentials_free(out);
			snprintf(err, errlen, "out of memory");
			return -ENOMEM;
		}
		return 0;
	}
	fd = open(file, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		ret = -errno;
		snprintf(err, errlen, "credentials file %s: %s", file, strerror(errno));
		return ret;
	}
	if (fstat(fd, &sb) < 0) {
		ret = -errno;
		snprintf(err, errlen, "credentials file %s: %s", file, strerror(errno));
		goto out;
	}
	if (!S_ISREG(sb.st_mode)) {
		ret = -EINVAL;
		snprintf(err, errlen, "credentials file %s is not a regular file", file);
		goto out;
	}
	if (sb.st_mode & (S_IRWXG | S_IRWXO)) {
		ret = -EACCES;
		snprintf(err, errlen,
			 "credentials file %s is accessible by group or others (mode %04o); "
			 "it must be mode 0600 or 0400 (chmod 600 %s)",
			 file, (unsigned)(sb.st_mode & 07777), file);
		goto out;
	}
	if (sb.st_size > CREDS_MAX) {
		ret = -EINVAL;
		snprintf(err, errlen, "credentials file %s is larger than %d bytes", file,
			 CREDS_MAX);
		goto out;
	}
	text = calloc(1, CREDS_MAX + 1);
	if (!text) {
		ret = -ENOMEM;
		snprintf(err, errlen, "out of memory");
		goto out;
	}
	while (len < CREDS_MAX && (n = read(fd, text + len, CREDS_MAX - len)) != 0) {
		if (n < 0) {
			if (errno == EINTR)
				continue;
			ret = -errno;
			snprintf(err, errlen, "credentials file %s: %s", file, strerror(errno));
			goto out;
		}
		len += (size_t)n;
	}
	ret = creds_parse(text, profile && *profile ? profile : "default", file, out, err, errlen);
out:
	if (ret)
		s3_credentials_free(out);
	if (text) {
		explicit_bzero(text, CREDS_MAX + 1);
		free(text);
	}
	close(fd);
	return ret;
}

/* ---- request building ---- */

void s3_req_free(struct s3_req *r)
{
	free(r->url);
	for (int i = 0; i < r->nheaders; i++)
		free(r->headers[i]);
	memset(r, 0, sizeof(*r));
}

int s3_endpoint_split(const char *ep, const char **scheme_end, const char **host, size_t *hostlen)
{
	const char *h;

	if (!strncmp(ep, "https://", 8))
		h = ep + 8;
	else if (!strncmp(ep, "http://", 7))
		h = ep + 7;
	else
		return -EINVAL;
	*scheme_end = h - 3;
	*host = h;
	*hostlen = strcspn(h, "/?#");
	if (*hostlen == 0 || (h[*hostlen] && strcmp(h + *hostlen, "/")))
		return -EINVAL;
	for (size_t i = 0; i < *hostlen; i++)
		if ((unsigned char)h[i] <= ' ' || h[i] == '@')
			return -EINVAL;
	return 0;
}

int s3_req_build(const struct s3_target *t, const struct s3_creds *cr, const struct s3_req_spec *rq,
		 time_t now, struct s3_req *out)
{
	struct sigv4_kv h[6];
	const struct sigv4_key key = {cr->access_key, cr->secret_key, t->region, "s3"};
	char date[SIGV4_DATE_LEN], auth[1024];
	char *host = NULL, *raw_path = NULL, *path = NULL, *query = NULL;
	const char *scheme_end, *ep_host;
	size_t ep_hostlen, n = 0;
	int ret;

	memset(out, 0, sizeof(*out));
	ret = s3_endpoint_split(t->endpoint, &scheme_end, &ep_host, &ep_hostlen);
	if (ret)
		return ret;
	ret = -ENOMEM;
	if (t->path_style) {
		if (asprintf(&host, "%.*s", (int)ep_hostlen, ep_host) < 0)
			host = NULL;
		if (asprintf(&raw_path, "/%s%s%s", t->bucket, rq->key ? "/" : "",
			     rq->key ? rq->key : "") < 0)
			raw_path = NULL;
	} else {
		if (asprintf(&host, "%s.%.*s", t->bucket, (int)ep_hostlen, ep_host) < 0)
			host = NULL;
		if (asprintf(&raw_path, "/%s", rq->key ? rq->key : "") < 0)
			raw_path = NULL;
	}
	if (!host || !raw_path)
		goto out;
	path = sigv4_uri_encode(raw_path, 1);
	query = sigv4_canonical_query(rq->query, rq->nq);
	if (!path || !query)
		goto out;
	sigv4_amz_date(now, date);
	h[n++] = (struct sigv4_kv){"Host", host};
	h[n++] = (struct sigv4_kv){"x-amz-date", date};
	h[n++] = (struct sigv4_kv){"x-amz-content-sha256", rq->payload_hash};
	if (cr->session_token && *cr->session_token)
		h[n++] = (struct sigv4_kv){"x-amz-security-token", cr->session_token};
	if (rq->range)
		h[n++] = (struct sigv4_kv){"Range", rq->range};
	ret = sigv4_sign(&key, date, rq->method, path, query, h, n, rq->payload_hash, auth,
			 sizeof(auth));
	if (ret)
		goto out;
	ret = -ENOMEM;
	if (asprintf(&out->url, "%.*s://%s%s%s%s", (int)(scheme_end - t->endpoint), t->endpoint,
		     host, path, *query ? "?" : "", query) < 0) {
		out->url = NULL;
		goto out;
	}
	for (size_t i = 0; i < n; i++)
		if (asprintf(&out->headers[out->nheaders++], "%s: %s", h[i].name, h[i].value) < 0)
			goto out_partial;
	if (asprintf(&out->headers[out->nheaders++], "Authorization: %s", auth) < 0)
		goto out_partial;
	ret = 0;
	goto out;
out_partial:
	out->headers[--out->nheaders] = NULL;
	s3_req_free(out);
out:
	explicit_bzero(auth, sizeof(auth));
	free(host);
	free(raw_path);
	free(path);
	free(query);
	return ret;
}
