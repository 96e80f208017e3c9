/*
 * state_s3 — the bucket keeps a copy of the state too: always with s3
 * alone, with nvme and s3 when s3_state is set.
 *
 * DESIGN
 * - Keys under <prefix>/<uuid>/: state/checkpoint.<gen>, state/journal.<gen>
 *   (the newest checkpoint and every journal after it), state/lease (the node
 *   holding the prefix: its state_dir's node id, host, pid; removed at a clean
 *   unmount). A node with an empty state_dir adopts the filesystem under the
 *   prefix from these (refused while a lease of another node exists, unless
 *   -o takeover).
 * - One upload at a time (struct state_s3's lock). Pushes follow a journal
 *   sync: with s3 alone each fsync; both ways each checkpoint, each
 *   demotion, GC deleting S3 segments, and the clean unmount. With nvme
 *   below, an fsync'd file is on the node's own disk, which a replacement
 *   node does not have: an fsync does not push.
 * - Adoption is layout-blind: the old node's store numbers (s3 alone: 0 is
 *   S3; with nvme: 0 is its disk, 1 S3) are not trusted. Recovery lists the
 *   bucket: a segment found there is S3's, any other was on the old node's
 *   disk and is gone (state_s3_locate), with the extents. The adopted
 *   state is checkpointed in the new numbering before the mount serves; a
 *   marker file (state_dir/adopting) written before the fetch and removed
 *   after that checkpoint makes an interrupted adoption start over.
 */
#include "tier/tier_i.h"

#include "common/atomic_file.h"
#include "common/log.h"
#include "index/journal.h"
#include "tier/store/store.h"
#include "tier/store/store_s3.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>


#define STATE_KEY "state/"
#define ADOPTING "adopting"

/* The store holding the bucket's copy (s3 alone: the first cold tier). */
static struct store *bucket(struct tier *t)
{
	return t->cfg->nvme ? t->s3 : t->store;
}

/* t->s3st: the bucket's copy of the state, s3 alone with a state_dir. */
struct state_s3 {
	pthread_mutex_t lock; /* one upload at a time */
	uint64_t ck_gen;      /* checkpoint generation uploaded (lock) */
	uint64_t s3_sig;      /* what S3 held at the last push (lock; s3_sig()) */
};

/* What the S3 tier holds, in one number that moves with every segment
 * entering or leaving it (demoted, spilled there when the disk was full,
 * deleted). */
static uint64_t s3_sig(struct tier *t)
{
	uint64_t b[2];
	segtab_tier_bytes(t->segtab, b);
	return b[t->cfg->nvme ? 1 : 0] * 31 +
	       __atomic_load_n(&t->st.segments_demoted, __ATOMIC_RELAXED) * 7 +
	       __atomic_load_n(&t->st.ext_demoted, __ATOMIC_RELAXED);
}

int state_s3_new(struct tier *t)
{
	struct state_s3 *s = calloc(1, sizeof(*s));

	if (!s)
		return -ENOMEM;
	pthread_mutex_init(&s->lock, NULL);
	t->s3st = s;
	return 0;
}

void state_s3_free(struct tier *t)
{
	if (!t->s3st)
		return;
	pthread_mutex_destroy(&t->s3st->lock);
	free(t->s3st);
	t->s3st = NULL;
}

static int read_whole(const char *dir, const char *name, void **buf, size_t *len)
{
	char path[4200];
	struct stat st;
	int fd, ret = 0;
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
		return -errno;
	if (fstat(fd, &st) < 0 || !(*buf = malloc(st.st_size ? (size_t)st.st_size : 1))) {
		close(fd);
		return -ENOMEM;
	}
	*len = 0;
	while (*len < (size_t)st.st_size) {
		ssize_t n = pread(fd, (char *)*buf + *len, (size_t)st.st_size - *len, (off_t)*len);
		if (n <= 0) {
			ret = n < 0 ? -errno : -EIO;
			free(*buf);
			*buf = NULL;
			break;
		}
		*len += (size_t)n;
	}
	close(fd);
	return ret;
}

static int write_whole(const char *dir, const char *name, const void *buf, size_t len)
{
	char path[4200];
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	return atomic_file_write(path, buf, len);
}

/* This state_dir's identity (created once): who holds a lease. */
static void node_id(struct tier *t, char id[33])
{
	void *buf = NULL;
	size_t len = 0;
	if (read_whole(t->cfg->state_dir, "node_id", &buf, &len) == 0 && len >= 32) {
		memcpy(id, buf, 32);
	} else {
		uint8_t r[16];
		if (getrandom(r, sizeof(r), 0) != sizeof(r))
			memset(r, 0x33, sizeof(r));
		for (int i = 0; i < 16; i++)
			snprintf(id + 2 * i, 3, "%02x", r[i]);
		write_whole(t->cfg->state_dir, "node_id", id, 32);
	}
	id[32] = '\0';
	free(buf);
}

/* Is name "<what>.<16 hex>"? Its generation in *gen. */
/* Is name a state file of this kind (journal.h spells the names)? */
static int gen_of(const char *name, int kind, uint64_t *gen)
{
	int k;
	return jrnl_parse_name(name, &k, gen) && k == kind;
}

struct adopt_scan {
	char uuid[33];
	int fs_count, lease;
	uint64_t ck_gen;
	int have_ck;
};

static int adopt_seen(void *arg, const char *name, uint64_t size)
{
	struct adopt_scan *a = arg;
	const char *slash = strchr(name, '/');
	uint64_t g;
	if (!slash || slash - name != 32 || strncmp(slash + 1, STATE_KEY, strlen(STATE_KEY)))
		return 0;
	if (strncmp(a->uuid, name, 32)) {
		if (a->uuid[0])
			a->fs_count++;
		else
			a->fs_count = 1;
		memcpy(a->uuid, name, 32);
		a->uuid[32] = '\0';
	}
	name = slash + 1 + strlen(STATE_KEY);
	if (!strcmp(name, "lease"))
		a->lease = 1;
	else if (gen_of(name, JRNL_KIND_CHECKPOINT, &g) && (!a->have_ck || g > a->ck_gen)) {
		a->ck_gen = g;
		a->have_ck = 1;
	}
	return 0;
}

static int local_state_empty(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	uint64_t gen;
	int empty = 1, kind;
	if (!d)
		return 1;
	while ((de = readdir(d)))
		if (jrnl_parse_name(de->d_name, &kind, &gen))
			empty = 0;
	closedir(d);
	return empty;
}

/* state_dir/adopting: an adoption started and not yet checkpointed */
static void marker_path(struct tier *t, char *path, size_t len)
{
	snprintf(path, len, "%s/" ADOPTING, t->cfg->state_dir);
}

static int access_marker(struct tier *t)
{
	char path[4200];
	marker_path(t, path, sizeof(path));
	return access(path, F_OK) == 0;
}

static void remove_marker(struct tier *t)
{
	char path[4200];
	marker_path(t, path, sizeof(path));
	unlink(path);
}

/* The journal and checkpoints of an adoption that did not finish. */
static void clear_local(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	uint64_t gen;
	int kind;
	while (d && (de = readdir(d)))
		if (jrnl_parse_name(de->d_name, &kind, &gen))
			unlinkat(dirfd(d), de->d_name, 0);
	if (d)
		closedir(d);
}

struct fetch_ctx {
	struct store *st;
	const char *uuid, *dir;
	uint64_t from;
	int err;
};

static int fetch_journal(void *arg, const char *name, uint64_t size)
{
	struct fetch_ctx *f = arg;
	const char *base = strrchr(name, '/');
	uint64_t g;
	void *buf = NULL;
	size_t len = 0;
	int ret;
	base = base ? base + 1 : name;
	if (!gen_of(base, JRNL_KIND_JOURNAL, &g) || g < f->from)
		return 0;
	if ((ret = store_s3_get_object(f->st, name, &buf, &len)) < 0 ||
	    (ret = write_whole(f->dir, base, buf, len)) < 0)
		f->err = ret;
	free(buf);
	return 0;
}

int state_s3_adopt(struct tier *t, char *err, size_t errlen)
{
	struct adopt_scan a;
	struct store *base = NULL;
	char key[256], name[64];
	void *buf = NULL;
	size_t len = 0;
	int ret;

	memset(&a, 0, sizeof(a));
	if (access_marker(t))
		clear_local(t->cfg->state_dir); /* an adoption interrupted: again */
	else if (!local_state_empty(t->cfg->state_dir))
		return 0;
	if ((ret = stores_open_s3(t, 0, &base, err, errlen)) < 0)
		return ret;
	if ((ret = store_s3_list_objects(base, "", adopt_seen, &a)) < 0) {
		snprintf(err, errlen, "option 's3': '%s': cannot list: %s", t->cfg->s3,
			 strerror(-ret));
		goto out;
	}
	if (!a.have_ck) {
		/* nothing to adopt: a new filesystem (and an earlier adoption's
		 * marker has nothing to start over from: it goes, or every later
		 * mount would clear this state_dir again) */
		remove_marker(t);
		ret = 0;
		goto out;
	}
	if (a.fs_count > 1) {
		snprintf(err, errlen,
			 "option 's3': '%s' holds the state of several filesystems; give each "
			 "its own prefix",
			 t->cfg->s3);
		ret = -EEXIST;
		goto out;
	}
	if (a.lease && !t->cfg->takeover) {
		snprintf(key, sizeof(key), "%s/%slease", a.uuid, STATE_KEY);
		store_s3_get_object(base, key, &buf, &len);
		snprintf(err, errlen,
			 "option 's3': '%s' is in use by another node (%.*s); add -o takeover "
			 "if that node is gone",
			 t->cfg->s3, buf ? (int)strcspn(buf, "\n") : 7, buf ? (char *)buf : "unknown");
		ret = -EBUSY;
		goto out;
	}
	if ((ret = write_whole(t->cfg->state_dir, ADOPTING, a.uuid, 32)) < 0) {
		snprintf(err, errlen, "option 'state_dir': '%s': cannot write: %s",
			 t->cfg->state_dir, strerror(-ret));
		goto out;
	}
	jrnl_file_name(name, sizeof(name), JRNL_KIND_CHECKPOINT, a.ck_gen);
	snprintf(key, sizeof(key), "%s/%s%s", a.uuid, STATE_KEY, name);
	if ((ret = store_s3_get_object(base, key, &buf, &len)) < 0 ||
	    (ret = write_whole(t->cfg->state_dir, name, buf, len)) < 0) {
		snprintf(err, errlen, "option 's3': '%s': cannot fetch %s: %s", t->cfg->s3, key,
			 strerror(-ret));
		goto out;
	}
	{
		struct fetch_ctx f = {.st = base, .uuid = a.uuid, .dir = t->cfg->state_dir,
				      .from = a.ck_gen};
		snprintf(key, sizeof(key), "%s/%s", a.uuid, STATE_KEY);
		ret = store_s3_list_objects(base, key, fetch_journal, &f);
		if (ret == 0)
			ret = f.err;
		if (ret < 0) {
			snprintf(err, errlen, "option 's3': '%s': cannot fetch the journal: %s",
				 t->cfg->s3, strerror(-ret));
			goto out;
		}
	}
	log_info("adopting filesystem %s from %s (checkpoint %llu)", a.uuid, t->cfg->s3,
		 (unsigned long long)a.ck_gen);
	t->rec.adopted = 1;
	ret = 0;
out:
	free(buf);
	store_close(base);
	return ret;
}

int state_s3_lease(struct tier *t, char *err, size_t errlen)
{
	char id[33], lease[512], host[256] = "unknown";
	void *buf = NULL;
	size_t len = 0;
	int ret;

	node_id(t, id);
	ret = store_s3_get_object(bucket(t), STATE_KEY "lease", &buf, &len);
	if (ret == 0 && (len < 5 + 32 || strncmp(buf, "node=", 5) || memcmp((char *)buf + 5, id, 32)) &&
	    !t->cfg->takeover) {
		snprintf(err, errlen,
			 "option 's3': '%s' is in use by another node (%.*s); add -o takeover if "
			 "that node is gone",
			 t->cfg->s3, (int)strcspn(buf, "\n"), (char *)buf);
		free(buf);
		return -EBUSY;
	}
	free(buf);
	if (ret < 0 && ret != -ENOENT) {
		snprintf(err, errlen, "option 's3': '%s': cannot read the lease: %s", t->cfg->s3,
			 strerror(-ret));
		return ret;
	}
	gethostname(host, sizeof(host) - 1);
	snprintf(lease, sizeof(lease), "node=%s host=%s pid=%d state_dir=%s since=%lld\n", id, host,
		 (int)getpid(), t->cfg->state_dir, (long long)time(NULL));
	if ((ret = store_s3_put_object(bucket(t), STATE_KEY "lease", lease, strlen(lease))) < 0)
		snprintf(err, errlen, "option 's3': '%s': cannot write the lease: %s", t->cfg->s3,
			 strerror(-ret));
	return ret;
}

struct local_gens {
	uint64_t ck, j[64];
	int have_ck, nj;
};

static void scan_local(const char *dir, struct local_gens *g)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	uint64_t v;
	memset(g, 0, sizeof(*g));
	if (!d)
		return;
	while ((de = readdir(d))) {
		if (gen_of(de->d_name, JRNL_KIND_CHECKPOINT, &v) && (!g->have_ck || v > g->ck)) {
			g->ck = v;
			g->have_ck = 1;
		} else if (gen_of(de->d_name, JRNL_KIND_JOURNAL, &v) && g->nj < 64) {
			g->j[g->nj++] = v;
		}
	}
	closedir(d);
}

struct prune_ctx {
	struct store *st;
	uint64_t keep;
};

static int prune_remote(void *arg, const char *name, uint64_t size)
{
	struct prune_ctx *p = arg;
	const char *base = name + strlen(STATE_KEY);
	uint64_t g;
	if ((gen_of(base, JRNL_KIND_CHECKPOINT, &g) || gen_of(base, JRNL_KIND_JOURNAL, &g)) &&
	    g < p->keep)
		store_s3_delete_object(p->st, name);
	return 0;
}

static int put_file(struct tier *t, const char *name)
{
	char key[128];
	void *buf = NULL;
	size_t len = 0;
	int ret = read_whole(t->cfg->state_dir, name, &buf, &len);
	snprintf(key, sizeof(key), STATE_KEY "%s", name);
	if (ret == 0)
		ret = store_s3_put_object(bucket(t), key, buf, len);
	free(buf);
	return ret;
}

int state_s3_push(struct tier *t)
{
	struct local_gens g;
	char name[64];
	uint64_t sig;
	int ret = 0;

	if (!t->s3st || !bucket(t))
		return 0;
	pthread_mutex_lock(&t->s3st->lock);
	sig = s3_sig(t); /* before the copy: a change during it pushes again */
	scan_local(t->cfg->state_dir, &g);
	if (g.have_ck && (g.ck != t->s3st->ck_gen)) {
		jrnl_file_name(name, sizeof(name), JRNL_KIND_CHECKPOINT, g.ck);
		if ((ret = put_file(t, name)) < 0)
			goto out;
		t->s3st->ck_gen = g.ck;
	}
	/* every journal from that checkpoint on (two during a rotation) */
	for (int i = 0; i < g.nj; i++) {
		if (g.j[i] < g.ck)
			continue;
		jrnl_file_name(name, sizeof(name), JRNL_KIND_JOURNAL, g.j[i]);
		if ((ret = put_file(t, name)) < 0)
			goto out;
	}
	{
		struct prune_ctx p = {.st = bucket(t), .keep = g.ck};
		store_s3_list_objects(bucket(t), STATE_KEY, prune_remote, &p);
	}
out:
	if (ret == 0) {
		t->s3st->s3_sig = sig;
		__atomic_add_fetch(&t->st.state_copies, 1, __ATOMIC_RELAXED);
	}
	pthread_mutex_unlock(&t->s3st->lock);
	if (ret < 0)
		log_err("s3: cannot store the journal in the bucket: %s", strerror(-ret));
	return ret;
}

int state_s3_push_changed(struct tier *t)
{
	int changed;
	if (!t->s3st)
		return 0;
	if (!t->cfg->nvme)
		return state_s3_push(t);
	pthread_mutex_lock(&t->s3st->lock);
	changed = t->s3st->s3_sig != s3_sig(t);
	pthread_mutex_unlock(&t->s3st->lock);
	return changed ? state_s3_push(t) : 0;
}

void state_s3_on_checkpoint(void *arg, uint64_t gen)
{
	state_s3_push(arg);
}

void state_s3_release(struct tier *t)
{
	if (!t->s3st || !bucket(t))
		return;
	if (state_s3_push(t) == 0)
		store_s3_delete_object(bucket(t), STATE_KEY "lease");
}

/* ---- adoption: where the segments are ---- */

struct locate_ctx {
	struct tier *t;
	uint8_t store_no;
	uint8_t *in_bucket; /* per segment id below cap */
	uint64_t cap;
};

static int located(void *arg, uint64_t id, uint32_t dev, uint64_t size)
{
	struct locate_ctx *c = arg;
	struct seg_where w;
	if (id < c->cap && segtab_where(c->t->segtab, id, &w) == 0) {
		segtab_relocate(c->t->segtab, id, c->store_no, dev);
		c->in_bucket[id] = 1;
	}
	return 0;
}

int state_s3_locate(struct tier *t, char *err, size_t errlen)
{
	struct locate_ctx c = {.t = t, .store_no = t->cfg->nvme ? 1 : 0};
	struct seg_where w;
	uint64_t id = 0, gone = 0;
	int ret;

	if (!t->rec.adopted)
		return 0;
	c.cap = segtab_recount(t->segtab);
	if (!(c.in_bucket = calloc(c.cap ? c.cap : 1, 1)))
		return -ENOMEM;
	if ((ret = store_list(bucket(t), located, &c)) < 0) {
		snprintf(err, errlen, "option 's3': '%s': cannot list the segments: %s", t->cfg->s3,
			 strerror(-ret));
		free(c.in_bucket);
		return ret;
	}
	while (segtab_next(t->segtab, &id, &w))
		if (id >= c.cap || !c.in_bucket[id]) {
			segtab_drop(t->segtab, id);
			gone++;
		}
	free(c.in_bucket);
	if (gone)
		log_warn("adopting: %llu segments of the old node are not in the bucket (they "
			 "were on its disk): files with bytes in them are lost or kept damaged",
			 (unsigned long long)gone);
	t->rec.adopt_gone_segments = gone;
	return 0;
}

void state_s3_adopted(struct tier *t)
{
	if (t->rec.adopted)
		remove_marker(t);
}
