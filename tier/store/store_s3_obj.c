/*
 * store_s3_obj — the named (non-segment) objects of the S3 store:
 * store_s3_put_object, _get_object, _delete_object, _list_objects (contract
 * in store_s3.h), on the transfer, put, ranged-read and listing machinery
 * of store_s3.c, shared through store_s3_i.h; and store_s3_fs_url, where a
 * filesystem's objects live.
 *
 * DESIGN
 * Objects (journal, checkpoints: <prefix>/<name>). A put up to
 * part_size is one PUT of the caller's buffer; above it the put machinery
 * runs with parts pointing into that buffer (no fill copy); a failure aborts
 * the upload but, unlike a segment put, never deletes the key, whose
 * previous version must survive. A get first GETs bytes 0..1 MiB (short_ok:
 * the reply gives the size and ETag, and is all of a small object; an
 * empty one is S3's 416 or s3rver's "206 bytes 0-0/0"), then reads the rest
 * like a segment, each piece checked against that ETag; a mismatch (the
 * object was replaced meanwhile) reads the whole object again. Listing
 * shares the ListObjectsV2 pager with the segment list, but reports every
 * key under the prefix, its name relative to it.
 * Threading: any thread; each call borrows its own conn (a multipart put
 * holds one for its life), so calls run concurrently with segment traffic.
 */
#include "tier/store/store_s3.h"

#include "common/log.h"
#include "tier/store/store_s3_i.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OBJ_PROBE      (1u << 20) /* the first GET of an object: size, ETag, small objects whole */
#define OBJ_GET_ROUNDS 3u	  /* whole-object reads restarted when it changes meanwhile */
#define S3_KEY_MAX     1024u	  /* S3's longest key, in bytes */

/* A relative name (or, with is_sub, a listing prefix: may be "" or end in '/'). */
static int obj_name_ok(const char *name, int is_sub)
{
	uint64_t id;

	if (!name || (!is_sub && !*name) || *name == '/' || strstr(name, "..") ||
	    strstr(name, "//") ||
	    strspn(name, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._/-") !=
		strlen(name))
		return 0;
	if (is_sub)
		return 1;
	/* No "." component (curl would squash it out of the URL), no trailing '/'. */
	if (name[strlen(name) - 1] == '/' || !strcmp(name, ".") || !strncmp(name, "./", 2) ||
	    strstr(name, "/./") || (strlen(name) >= 2 && !strcmp(name + strlen(name) - 2, "/.")))
		return 0;
	/* The segment namespace: list() would report it, open could abort its upload. */
	return s3_seg_key_parse("", name, &id) != 0;
}

/* Check st and name and build the object key into *key (malloc'ed). 0, -EINVAL,
 * -ENAMETOOLONG, -ENOMEM. */
static int obj_key(struct store *st, const char *name, int is_sub, char **key)
{
	struct s3_store *s = to_s3(st);

	*key = NULL;
	if (!st || st->ops != &s3_ops || !obj_name_ok(name, is_sub))
		return -EINVAL;
	if (asprintf(key, "%s%s%s", s->prefix, *s->prefix ? "/" : "", name) < 0) {
		*key = NULL;
		return -ENOMEM;
	}
	if (strlen(*key) > S3_KEY_MAX) {
		free(*key);
		*key = NULL;
		return -ENAMETOOLONG;
	}
	return 0;
}

static int obj_err(int ret)
{
	return ret == -ENOENT || ret == -EACCES || ret == -ENOMEM ? ret : -EIO;
}

int store_s3_put_object(struct store *st, const char *name, const void *buf, size_t len)
{
	struct s3_store *s = to_s3(st);
	struct s3_put *p;
	char *key;
	int ret = obj_key(st, name, 0, &key);

	if (ret)
		return ret;
	if (len && !buf) {
		free(key);
		return -EINVAL;
	}
	if (len <= s->part_size) {
		struct s3_xfer x = {.method = "PUT", .key = key, .body = buf, .body_len = len};

		ret = s3_xfer_run(&s->cl, NULL, &x);
		if (ret) {
			log_err("s3 %s: PUT of object %s failed: %s", s->name, key, x.why);
			ret = ret == -ENOENT ? -EIO : obj_err(ret);
		}
		s3_xfer_fini(&x);
		free(key);
		return ret;
	}
	if ((len - 1) / s->part_size + 1 > S3_MAX_PARTS) {
		log_err("s3 %s: object %s (%zu bytes) needs more than %u parts; raise "
			"s3_part_size",
			s->name, key, len, S3_MAX_PARTS);
		free(key);
		return -EFBIG;
	}
	/* Multipart, the parts straight from buf; s3_put_new() owns key from here. */
	p = s3_put_new(s, key);
	if (!p)
		return -ENOMEM;
	p->named = 1;
	for (size_t off = 0; off < len && !ret; off += s->part_size) {
		struct part_slot *sl;

		ret = s3_put_slot(p, &sl);
		if (!ret)
			s3_put_send(p, sl, (const uint8_t *)buf + off,
				    len - off < s->part_size ? len - off : s->part_size);
	}
	if (!ret)
		ret = s3_put_drain(p);
	if (!ret)
		ret = s3_put_complete(p);
	/*
	 * Unlike a segment's, a failed object put never deletes the key: the
	 * previous version stays (or, when only the reply to the complete was
	 * lost, the new one, whole).
	 */
	if (ret)
		s3_put_cancel(p);
	s3_put_free(p);
	return ret == -ENOMEM || ret == -EFBIG ? ret : ret ? -EIO : 0;
}

int store_s3_get_object(struct store *st, const char *name, void **buf, size_t *len)
{
	struct s3_store *s = to_s3(st);
	struct s3_conn *c = NULL;
	uint8_t *data = NULL;
	uint64_t total = 0;
	char *key, *what = NULL;
	int ret = obj_key(st, name, 0, &key);

	if (ret)
		return ret;
	c = s3_conn_get(&s->cl);
	if (!c || asprintf(&what, "object %s", key) < 0) {
		what = NULL;
		ret = -ENOMEM;
		goto out;
	}
	for (unsigned round = 0;; round++) {
		struct s3_xfer x = {.method = "GET", .key = key, .short_ok = 1};
		uint8_t *d;

		/* One GET of the first OBJ_PROBE bytes: the whole of a small object, and
		 * the size and ETag of a large one. */
		data = malloc(OBJ_PROBE);
		if (!data) {
			ret = -ENOMEM;
			goto out;
		}
		x.dst = data;
		x.dst_len = OBJ_PROBE;
		memcpy(x.body_hash, EMPTY_SHA256, sizeof(EMPTY_SHA256));
		ret = s3_xfer_run(&s->cl, c, &x);
		if (ret == 0 && x.obj_total < 0) {
			snprintf(x.why, sizeof(x.why), "no object size in the reply");
			ret = -EIO;
		}
		if (ret) {
			if (ret != -ENOENT)
				log_err("s3 %s: GET of object %s failed: %s", s->name, key, x.why);
			s3_xfer_fini(&x);
			ret = obj_err(ret);
			goto out;
		}
		s3_xfer_fini(&x);
		total = (uint64_t)x.obj_total;
		if (total > SIZE_MAX - 1) {
			ret = -EFBIG;
			goto out;
		}
		if (total <= x.got) {
			d = realloc(data, total ? total : 1);
			data = d ? d : data;
			ret = 0;
			goto out;
		}
		/* The rest in parallel ranged GETs, each checked against the first ETag. */
		d = realloc(data, total);
		if (!d) {
			ret = -ENOMEM;
			goto out;
		}
		data = d;
		ret = s3_read_pieces(s, c, key, x.got, data + x.got, total - x.got,
				     x.etag[0] ? x.etag : NULL, what);
		if (ret != -ESTALE)
			goto out;
		free(data);
		data = NULL;
		if (round + 1 >= OBJ_GET_ROUNDS) {
			log_err("s3 %s: object %s kept changing while being read", s->name, key);
			ret = -EIO;
			goto out;
		}
	}
out:
	s3_conn_put(&s->cl, c);
	if (ret) {
		free(data);
	} else {
		*buf = data;
		*len = (size_t)total;
	}
	free(what);
	free(key);
	return ret;
}

int store_s3_delete_object(struct store *st, const char *name)
{
	struct s3_store *s = to_s3(st);
	struct s3_xfer head = {.method = "HEAD"}, del = {.method = "DELETE"};
	char *key;
	int ret = obj_key(st, name, 0, &key);

	if (ret)
		return ret;
	head.key = del.key = key;
	/* S3's DELETE succeeds on absent keys: HEAD first, for -ENOENT. */
	ret = s3_xfer_run(&s->cl, NULL, &head);
	if (ret == 0)
		ret = s3_xfer_run(&s->cl, NULL, &del);
	if (ret && ret != -ENOENT) {
		log_err("s3 %s: deleting object %s: %s", s->name, key,
			head.err ? head.why : del.why);
		ret = obj_err(ret);
	}
	s3_xfer_fini(&head);
	s3_xfer_fini(&del);
	free(key);
	return ret;
}

struct obj_walk {
	const char *lp; /* the store's listing prefix, cut from every key */
	size_t skip;	/* its length */
	int (*fn)(void *arg, const char *name, uint64_t size);
	void *arg;
};

static int obj_walk_key(void *arg, const char *key, uint64_t size)
{
	struct obj_walk *w = arg;

	if (strncmp(key, w->lp, w->skip) || !key[w->skip]) /* not under it: a server bug */
		return 0;
	return w->fn(w->arg, key + w->skip, size);
}

int store_s3_list_objects(struct store *st, const char *sub,
			  int (*fn)(void *arg, const char *name, uint64_t size), void *arg)
{
	struct s3_store *s = to_s3(st);
	struct obj_walk w = {NULL, 0, fn, arg};
	char *prefix, *lp;
	int ret = obj_key(st, sub, 1, &prefix);

	if (ret)
		return ret;
	if (!fn) {
		free(prefix);
		return -EINVAL;
	}
	/* obj_key() gave "<prefix>/<sub>"; with sub "" that is "<prefix>/" (or "" at the root). */
	lp = s3_list_prefix(s);
	if (!lp) {
		free(prefix);
		return -ENOMEM;
	}
	w.lp = lp;
	w.skip = strlen(lp);
	ret = s3_list_keys(s, prefix, obj_walk_key, &w, "objects");
	free(lp);
	free(prefix);
	return ret;
}

void store_s3_fs_url(char *url, size_t len, const char *base, const uint8_t *uuid)
{
	size_t bl = strlen(base);

	snprintf(url, len, "%.*s%s", (int)(bl && base[bl - 1] == '/' ? bl - 1 : bl), base,
		 uuid ? "/" : "");
	for (int i = 0; uuid && i < 16; i++)
		snprintf(url + strlen(url), len - strlen(url), "%02x", uuid[i]);
}
