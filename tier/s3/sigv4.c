/*
 * DESIGN
 * Straight from the SigV4 specification: canonical request → SHA-256 →
 * string to sign → HMAC chain (date, region, service, "aws4_request") →
 * signature. Strings are built in a small growable buffer; every
 * intermediate holding key material is wiped before it is freed.
 */
#include "tier/s3/sigv4.h"

#include <ctype.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/sha.h>

struct sbuf {
	char *s;
	size_t len, cap;
	int oom;
};

static void sb_put(struct sbuf *b, const char *s, size_t n)
{
	if (b->oom)
		return;
	if (b->len + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 256;
		char *p;

		while (cap < b->len + n + 1)
			cap *= 2;
		p = realloc(b->s, cap);
		if (!p) {
			b->oom = 1;
			return;
		}
		b->s = p;
		b->cap = cap;
	}
	memcpy(b->s + b->len, s, n);
	b->len += n;
	b->s[b->len] = 0;
}

static void sb_str(struct sbuf *b, const char *s)
{
	sb_put(b, s, strlen(s));
}

static void sb_chr(struct sbuf *b, char c)
{
	sb_put(b, &c, 1);
}

/* The built string (caller frees), or NULL after an allocation failure. */
static char *sb_take(struct sbuf *b)
{
	if (b->oom) {
		free(b->s);
		return NULL;
	}
	if (!b->s)
		return strdup("");
	return b->s;
}

static void hex(const unsigned char *in, size_t n, char *out)
{
	static const char digits[] = "0123456789abcdef";

	for (size_t i = 0; i < n; i++) {
		out[2 * i] = digits[in[i] >> 4];
		out[2 * i + 1] = digits[in[i] & 15];
	}
	out[2 * n] = 0;
}

void sigv4_sha256_hex(const void *data, size_t len, char out[SIGV4_HASH_HEX])
{
	unsigned char md[SHA256_DIGEST_LENGTH];

	SHA256(data, len, md);
	hex(md, sizeof(md), out);
}

void sigv4_amz_date(time_t t, char out[SIGV4_DATE_LEN])
{
	struct tm tm;

	gmtime_r(&t, &tm);
	strftime(out, SIGV4_DATE_LEN, "%Y%m%dT%H%M%SZ", &tm);
}

static int unreserved(unsigned char c)
{
	return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
	       c == '-' || c == '.' || c == '_' || c == '~';
}

static void sb_encode(struct sbuf *b, const char *s, int keep_slash)
{
	static const char digits[] = "0123456789ABCDEF";

	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		if (unreserved(*p) || (keep_slash && *p == '/')) {
			sb_chr(b, (char)*p);
		} else {
			char e[3] = {'%', digits[*p >> 4], digits[*p & 15]};

			sb_put(b, e, 3);
		}
	}
}

char *sigv4_uri_encode(const char *s, int keep_slash)
{
	struct sbuf b = {0};

	sb_encode(&b, s ? s : "", keep_slash);
	return sb_take(&b);
}

struct enc_kv {
	char *name, *value;
};

static int cmp_enc_kv(const void *a, const void *b)
{
	const struct enc_kv *x = a, *y = b;
	int c = strcmp(x->name, y->name);

	return c ? c : strcmp(x->value, y->value);
}

char *sigv4_canonical_query(const struct sigv4_kv *q, size_t n)
{
	struct enc_kv *e = calloc(n ? n : 1, sizeof(*e));
	struct sbuf b = {0};
	char *out = NULL;

	if (!e)
		return NULL;
	for (size_t i = 0; i < n; i++) {
		e[i].name = sigv4_uri_encode(q[i].name, 0);
		e[i].value = sigv4_uri_encode(q[i].value, 0);
		if (!e[i].name || !e[i].value)
			goto out;
	}
	qsort(e, n, sizeof(*e), cmp_enc_kv);
	for (size_t i = 0; i < n; i++) {
		if (i)
			sb_chr(&b, '&');
		sb_str(&b, e[i].name);
		sb_chr(&b, '=');
		sb_str(&b, e[i].value);
	}
	out = sb_take(&b);
	b.s = NULL;
out:
	free(b.s);
	for (size_t i = 0; i < n; i++) {
		free(e[i].name);
		free(e[i].value);
	}
	free(e);
	return out;
}

struct canon_hdr {
	char *name;	   /* lowercase */
	const char *value; /* raw; trimmed when written */
};

static int cmp_hdr(const void *a, const void *b)
{
	const struct canon_hdr *x = a, *y = b;

	return strcmp(x->name, y->name);
}

/* Value with leading/trailing blanks removed and inner runs of blanks folded to one space. */
static void sb_trimmed(struct sbuf *b, const char *v)
{
	int space = 0;

	while (*v == ' ' || *v == '\t')
		v++;
	for (; *v; v++) {
		if (*v == ' ' || *v == '\t') {
			space = 1;
			continue;
		}
		if (space)
			sb_chr(b, ' ');
		space = 0;
		sb_chr(b, *v);
	}
}

char *sigv4_canonical_request(const char *method, const char *canonical_uri,
			      const char *canonical_query, const struct sigv4_kv *hdrs, size_t n,
			      const char *payload_hash, char **signed_headers)
{
	struct canon_hdr *h = calloc(n ? n : 1, sizeof(*h));
	struct sbuf b = {0}, sh = {0};
	char *out = NULL;

	if (!h)
		return NULL;
	for (size_t i = 0; i < n; i++) {
		h[i].name = strdup(hdrs[i].name);
		if (!h[i].name)
			goto out;
		for (char *p = h[i].name; *p; p++)
			*p = (char)tolower((unsigned char)*p);
		h[i].value = hdrs[i].value ? hdrs[i].value : "";
	}
	qsort(h, n, sizeof(*h), cmp_hdr);
	sb_str(&b, method);
	sb_chr(&b, '\n');
	sb_str(&b, canonical_uri && *canonical_uri ? canonical_uri : "/");
	sb_chr(&b, '\n');
	sb_str(&b, canonical_query ? canonical_query : "");
	sb_chr(&b, '\n');
	for (size_t i = 0; i < n; i++) {
		sb_str(&b, h[i].name);
		sb_chr(&b, ':');
		sb_trimmed(&b, h[i].value);
		sb_chr(&b, '\n');
		if (i)
			sb_chr(&sh, ';');
		sb_str(&sh, h[i].name);
	}
	sb_chr(&b, '\n');
	sb_str(&sh, ""); /* an empty list is still a string */
	if (sh.oom || b.oom)
		goto out;
	sb_str(&b, sh.s);
	sb_chr(&b, '\n');
	sb_str(&b, payload_hash);
	out = sb_take(&b);
	b.s = NULL;
	if (out && signed_headers) {
		*signed_headers = sb_take(&sh);
		sh.s = NULL;
		if (!*signed_headers) {
			free(out);
			out = NULL;
		}
	}
out:
	free(b.s);
	free(sh.s);
	for (size_t i = 0; i < n; i++)
		free(h[i].name);
	free(h);
	return out;
}

static void hmac(const void *key, size_t keylen, const char *msg, unsigned char out[32])
{
	unsigned int len = 32;

	HMAC(EVP_sha256(), key, (int)keylen, (const unsigned char *)msg, strlen(msg), out, &len);
}

int sigv4_sign(const struct sigv4_key *key, const char *amz_date, const char *method,
	       const char *canonical_uri, const char *canonical_query, const struct sigv4_kv *hdrs,
	       size_t n, const char *payload_hash, char *auth, size_t authlen)
{
	unsigned char k[32], sig[32];
	char date[9], creq_hash[SIGV4_HASH_HEX], sig_hex[SIGV4_HASH_HEX];
	char *creq, *signed_headers = NULL, *secret = NULL, *sts = NULL;
	size_t slen;
	int ret, w;

	if (!amz_date || strlen(amz_date) != 16 || amz_date[8] != 'T')
		return -EINVAL;
	memcpy(date, amz_date, 8);
	date[8] = 0;
	creq = sigv4_canonical_request(method, canonical_uri, canonical_query, hdrs, n,
				       payload_hash, &signed_headers);
	if (!creq)
		return -ENOMEM;
	sigv4_sha256_hex(creq, strlen(creq), creq_hash);

	ret = -ENOMEM;
	slen = strlen(key->secret_key) + 5;
	secret = malloc(slen);
	sts = malloc(strlen(amz_date) + strlen(key->region) + strlen(key->service) + 128);
	if (!secret || !sts)
		goto out;
	snprintf(secret, slen, "AWS4%s", key->secret_key);
	sprintf(sts, SIGV4_ALGORITHM "\n%s\n%s/%s/%s/aws4_request\n%s", amz_date, date, key->region,
		key->service, creq_hash);

	hmac(secret, strlen(secret), date, k);
	hmac(k, sizeof(k), key->region, k);
	hmac(k, sizeof(k), key->service, k);
	hmac(k, sizeof(k), "aws4_request", k);
	hmac(k, sizeof(k), sts, sig);
	hex(sig, sizeof(sig), sig_hex);

	w = snprintf(auth, authlen,
		     SIGV4_ALGORITHM " Credential=%s/%s/%s/%s/aws4_request, SignedHeaders=%s, "
				     "Signature=%s",
		     key->access_key, date, key->region, key->service, signed_headers, sig_hex);
	ret = w < 0 || (size_t)w >= authlen ? -ENOSPC : 0;
out:
	OPENSSL_cleanse(k, sizeof(k));
	OPENSSL_cleanse(sig, sizeof(sig));
	if (secret) {
		OPENSSL_cleanse(secret, slen);
		free(secret);
	}
	free(sts);
	free(creq);
	free(signed_headers);
	return ret;
}
