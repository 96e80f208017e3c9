/*
 * DESIGN
 * Each document is parsed whole into a libxml2 tree (responses are small:
 * at most 1000 keys per list page) with XML_PARSE_NONET and without
 * XML_PARSE_NOENT, and a document with a DOCTYPE is refused outright, so no
 * entity (external or internal, e.g. "billion laughs") is ever expanded.
 * Elements are found among the direct children of their parent by local
 * name, which makes the S3 namespace optional. Parse errors are not printed.
 */
#include "tier/s3/s3xml.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libxml/parser.h>
#include <libxml/tree.h>

static pthread_once_t xml_once = PTHREAD_ONCE_INIT;

static void xml_init(void)
{
	xmlInitParser();
}

/* Parse doc; *root gets the root element when its local name is want. 0, -ENOENT, -EINVAL. */
static int parse(const char *doc, size_t len, const char *want, xmlDocPtr *out, xmlNodePtr *root)
{
	xmlDocPtr d;
	xmlNodePtr r;

	pthread_once(&xml_once, xml_init);
	*out = NULL;
	if (!doc || len == 0 || len > INT32_MAX)
		return -EINVAL;
	d = xmlReadMemory(doc, (int)len, "s3.xml", NULL,
			  XML_PARSE_NONET | XML_PARSE_NOERROR | XML_PARSE_NOWARNING);
	if (!d)
		return -EINVAL;
	r = xmlDocGetRootElement(d);
	if (!r || d->intSubset || d->extSubset) { /* S3 never sends a DTD: no entity games */
		xmlFreeDoc(d);
		return -EINVAL;
	}
	*out = d;
	*root = r;
	return strcmp((const char *)r->name, want) ? -ENOENT : 0;
}

static xmlNodePtr child(xmlNodePtr parent, const char *name)
{
	for (xmlNodePtr c = parent->children; c; c = c->next)
		if (c->type == XML_ELEMENT_NODE && !strcmp((const char *)c->name, name))
			return c;
	return NULL;
}

/* Text of parent's child element name, malloc'ed; NULL when absent (or out of memory: *oom). */
static char *child_text(xmlNodePtr parent, const char *name, int *oom)
{
	xmlNodePtr c = child(parent, name);
	xmlChar *t;
	char *s;

	if (!c)
		return NULL;
	t = xmlNodeGetContent(c);
	s = strdup(t ? (const char *)t : "");
	xmlFree(t);
	if (!s)
		*oom = 1;
	return s;
}

static void child_copy(xmlNodePtr parent, const char *name, char *buf, size_t len)
{
	xmlNodePtr c = child(parent, name);
	xmlChar *t;

	buf[0] = 0;
	if (!c)
		return;
	t = xmlNodeGetContent(c);
	if (t)
		snprintf(buf, len, "%s", (const char *)t);
	xmlFree(t);
}

static int child_bool(xmlNodePtr parent, const char *name)
{
	xmlNodePtr c = child(parent, name);
	xmlChar *t;
	int v;

	if (!c)
		return 0;
	t = xmlNodeGetContent(c);
	v = t && !strcmp((const char *)t, "true");
	xmlFree(t);
	return v;
}

static void fill_error(xmlNodePtr root, struct s3xml_error *err)
{
	child_copy(root, "Code", err->code, sizeof(err->code));
	child_copy(root, "Message", err->message, sizeof(err->message));
}

int s3xml_parse_error(const char *doc, size_t len, struct s3xml_error *err)
{
	xmlDocPtr d;
	xmlNodePtr root;
	int ret;

	memset(err, 0, sizeof(*err));
	ret = parse(doc, len, "Error", &d, &root);
	if (ret == 0)
		fill_error(root, err);
	xmlFreeDoc(d);
	return ret;
}

int s3xml_parse_initiate(const char *doc, size_t len, char **upload_id)
{
	xmlDocPtr d;
	xmlNodePtr root;
	int ret, oom = 0;

	*upload_id = NULL;
	ret = parse(doc, len, "InitiateMultipartUploadResult", &d, &root);
	if (ret == 0) {
		*upload_id = child_text(root, "UploadId", &oom);
		ret = oom ? -ENOMEM : *upload_id && **upload_id ? 0 : -EINVAL;
		if (ret) {
			free(*upload_id);
			*upload_id = NULL;
		}
	} else {
		ret = -EINVAL;
	}
	xmlFreeDoc(d);
	return ret;
}

int s3xml_parse_complete(const char *doc, size_t len, struct s3xml_error *err)
{
	xmlDocPtr d;
	xmlNodePtr root;
	int ret;

	memset(err, 0, sizeof(*err));
	ret = parse(doc, len, "CompleteMultipartUploadResult", &d, &root);
	if (ret == -ENOENT) {
		if (!strcmp((const char *)root->name, "Error")) {
			fill_error(root, err);
			ret = -EREMOTEIO;
		} else {
			ret = -EINVAL;
		}
	}
	xmlFreeDoc(d);
	return ret;
}

void s3xml_uploads_free(struct s3xml_uploads *u)
{
	for (size_t i = 0; i < u->n; i++) {
		free(u->v[i].key);
		free(u->v[i].upload_id);
	}
	free(u->v);
	free(u->next_key_marker);
	free(u->next_upload_id_marker);
	memset(u, 0, sizeof(*u));
}

int s3xml_parse_list_uploads(const char *doc, size_t len, struct s3xml_uploads *out)
{
	xmlDocPtr d;
	xmlNodePtr root;
	size_t cap = 0;
	int ret, oom = 0;

	memset(out, 0, sizeof(*out));
	ret = parse(doc, len, "ListMultipartUploadsResult", &d, &root);
	if (ret) {
		ret = -EINVAL;
		goto out;
	}
	out->truncated = child_bool(root, "IsTruncated");
	out->next_key_marker = child_text(root, "NextKeyMarker", &oom);
	out->next_upload_id_marker = child_text(root, "NextUploadIdMarker", &oom);
	for (xmlNodePtr c = root->children; c && !oom; c = c->next) {
		struct s3xml_upload *u;

		if (c->type != XML_ELEMENT_NODE || strcmp((const char *)c->name, "Upload"))
			continue;
		if (out->n == cap) {
			struct s3xml_upload *v;

			cap = cap ? 2 * cap : 16;
			v = realloc(out->v, cap * sizeof(*v));
			if (!v) {
				oom = 1;
				break;
			}
			out->v = v;
		}
		u = &out->v[out->n];
		u->key = child_text(c, "Key", &oom);
		u->upload_id = child_text(c, "UploadId", &oom);
		out->n++;
		if (!oom && (!u->key || !u->upload_id)) {
			ret = -EINVAL;
			break;
		}
	}
	if (oom)
		ret = -ENOMEM;
out:
	if (ret)
		s3xml_uploads_free(out);
	xmlFreeDoc(d);
	return ret;
}

void s3xml_objects_free(struct s3xml_objects *o)
{
	for (size_t i = 0; i < o->n; i++)
		free(o->v[i].key);
	free(o->v);
	free(o->next_token);
	memset(o, 0, sizeof(*o));
}

static int parse_u64(const char *s, uint64_t *v)
{
	char *end;

	if (!s || *s < '0' || *s > '9')
		return -EINVAL;
	errno = 0;
	*v = strtoull(s, &end, 10);
	return errno || *end ? -EINVAL : 0;
}

int s3xml_parse_list_objects(const char *doc, size_t len, struct s3xml_objects *out)
{
	xmlDocPtr d;
	xmlNodePtr root;
	size_t cap = 0;
	int ret, oom = 0;

	memset(out, 0, sizeof(*out));
	ret = parse(doc, len, "ListBucketResult", &d, &root);
	if (ret) {
		ret = -EINVAL;
		goto out;
	}
	out->truncated = child_bool(root, "IsTruncated");
	out->next_token = child_text(root, "NextContinuationToken", &oom);
	for (xmlNodePtr c = root->children; c && !oom; c = c->next) {
		struct s3xml_object *o;
		char *size;

		if (c->type != XML_ELEMENT_NODE || strcmp((const char *)c->name, "Contents"))
			continue;
		if (out->n == cap) {
			struct s3xml_object *v;

			cap = cap ? 2 * cap : 64;
			v = realloc(out->v, cap * sizeof(*v));
			if (!v) {
				oom = 1;
				break;
			}
			out->v = v;
		}
		o = &out->v[out->n];
		o->key = child_text(c, "Key", &oom);
		size = child_text(c, "Size", &oom);
		out->n++;
		if (!oom && (!o->key || parse_u64(size, &o->size)))
			ret = -EINVAL;
		free(size);
		if (ret)
			break;
	}
	if (oom)
		ret = -ENOMEM;
out:
	if (ret)
		s3xml_objects_free(out);
	xmlFreeDoc(d);
	return ret;
}
