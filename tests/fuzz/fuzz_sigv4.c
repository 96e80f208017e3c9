/*
 * fuzz_sigv4 — SigV4 canonical URI and query encoding (tier/s3/sigv4.c)
 * against the straightforward reference below (AWS's rules: every byte but
 * A-Z a-z 0-9 - . _ ~ is %XX with upper-case hex, '/' kept in paths;
 * parameters sorted by encoded name, then encoded value).
 * Input: lines; the first is a path, each further one a query parameter
 * "name=value" (no '=': empty value). Invariants: both encodings equal the
 * reference; percent-decoding the encoded path gives the path back; the
 * canonical request carries the URI ("/" when empty) and query verbatim
 * on lines 2 and 3.
 */
#include "fuzz.h"
#include "tier/s3/sigv4.h"

#include <string.h>

#define MAXQ 32

static char *ref_encode(const char *s, int keep_slash)
{
	static const char hex[] = "0123456789ABCDEF";
	char *out = malloc(strlen(s) * 3 + 1), *o = out;

	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		if ((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') ||
		    *p == '-' || *p == '.' || *p == '_' || *p == '~' || (keep_slash && *p == '/')) {
			*o++ = (char)*p;
		} else {
			*o++ = '%';
			*o++ = hex[*p >> 4];
			*o++ = hex[*p & 15];
		}
	}
	*o = 0;
	return out;
}

static int hexval(char c)
{
	return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

static char *ref_decode(const char *s)
{
	char *out = malloc(strlen(s) + 1), *o = out;

	while (*s) {
		if (*s == '%') {
			int h = hexval(s[1]), l = h < 0 ? -1 : hexval(s[2]);
			FUZZ_CHECK(h >= 0 && l >= 0, "bad escape in encoded output");
			*o++ = (char)(h * 16 + l);
			s += 3;
		} else {
			*o++ = *s++;
		}
	}
	*o = 0;
	return out;
}

struct pair {
	char *n, *v;
};

static char *ref_query(const struct sigv4_kv *q, size_t n)
{
	struct pair p[MAXQ];
	size_t len = 1;
	char *out;

	for (size_t i = 0; i < n; i++) {
		p[i].n = ref_encode(q[i].name, 0);
		p[i].v = ref_encode(q[i].value ? q[i].value : "", 0);
		len += strlen(p[i].n) + strlen(p[i].v) + 2;
	}
	for (size_t i = 1; i < n; i++) /* insertion sort: name, then value */
		for (size_t k = i; k > 0; k--) {
			int c = strcmp(p[k - 1].n, p[k].n);
			if (c < 0 || (c == 0 && strcmp(p[k - 1].v, p[k].v) <= 0))
				break;
			struct pair t = p[k];
			p[k] = p[k - 1];
			p[k - 1] = t;
		}
	out = malloc(len);
	out[0] = 0;
	for (size_t i = 0; i < n; i++) {
		if (i)
			strcat(out, "&");
		strcat(out, p[i].n);
		strcat(out, "=");
		strcat(out, p[i].v);
		free(p[i].n);
		free(p[i].v);
	}
	return out;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *text = malloc(size + 1), *line, *save = NULL, *path;
	struct sigv4_kv q[MAXQ];
	struct sigv4_kv hdr = {.name = "Host", .value = "example.com"};
	size_t nq = 0;
	char *a, *b, *creq, *want;

	memcpy(text, data, size);
	text[size] = 0;
	path = text;
	line = strchr(text, '\n');
	if (line) {
		*line++ = 0;
		for (char *l = strtok_r(line, "\n", &save); l && nq < MAXQ;
		     l = strtok_r(NULL, "\n", &save)) {
			char *eq = strchr(l, '=');
			if (eq)
				*eq++ = 0;
			q[nq].name = l;
			q[nq++].value = eq; /* NULL: the empty string */
		}
	}
	for (int ks = 0; ks < 2; ks++) {
		a = sigv4_uri_encode(path, ks);
		b = ref_encode(path, ks);
		FUZZ_CHECK(a && !strcmp(a, b), "uri_encode(keep_slash=%d): '%s', reference '%s'", ks,
			   a, b);
		want = ref_decode(a);
		FUZZ_CHECK(!strcmp(want, path), "encoding does not decode back");
		free(want);
		free(b);
		if (ks)
			break;
		free(a);
	}
	b = sigv4_canonical_query(q, nq);
	want = ref_query(q, nq);
	FUZZ_CHECK(b && !strcmp(b, want), "canonical query '%s', reference '%s'", b, want);
	creq = sigv4_canonical_request("GET", a, b, &hdr, 1, "UNSIGNED-PAYLOAD", NULL);
	FUZZ_CHECK(creq, "canonical request");
	{
		const char *uri = *a ? a : "/"; /* an empty path is "/" */
		size_t la = strlen(uri), lb = strlen(b);
		FUZZ_CHECK(!strncmp(creq, "GET\n", 4) && !strncmp(creq + 4, uri, la) &&
				   creq[4 + la] == '\n' && !strncmp(creq + 5 + la, b, lb) &&
				   creq[5 + la + lb] == '\n',
			   "canonical request does not carry the URI and query verbatim");
	}
	free(creq);
	free(want);
	free(b);
	free(a);
	free(text);
	return 0;
}
