/*
 * journal_recover.c — recovery at open: validate the newest checkpoint
 * wholly, apply it, replay the journals after it in order up to the first
 * bad record (a torn tail is cut off and the later journals dropped), and
 * leave the journal ready to append where the good records end.
 * Guarantees: nothing is applied from a checkpoint that does not validate;
 * a state dir made for another chunk size is refused, never misread.
 * Threading: one caller, before any append (journal.h).
 */
#include "index/journal_i.h"

#include "common/log.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

/* A whole file mapped read-only (len 0: empty, map NULL). */
struct mapped {
	uint8_t *map;
	size_t len;
};

static int map_file(struct journal *j, const char *name, struct mapped *m)
{
	struct stat st;
	int fd = openat(j->dirfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	m->map = NULL;
	m->len = 0;
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0) {
		close(fd);
		return -errno;
	}
	if (st.st_size > 0) {
		void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
		if (p == MAP_FAILED) {
			close(fd);
			return -errno;
		}
		madvise(p, (size_t)st.st_size, MADV_SEQUENTIAL);
		m->map = p;
		m->len = (size_t)st.st_size;
	}
	close(fd);
	return 0;
}

static void unmap_file(struct mapped *m)
{
	if (m->map)
		munmap(m->map, m->len);
	m->map = NULL;
}

/* Remove leftover temp files of an interrupted checkpoint. */
static void remove_tmp(struct journal *j)
{
	int dfd = dup(j->dirfd);
	DIR *d;
	struct dirent *de;
	if (dfd < 0 || !(d = fdopendir(dfd))) {
		if (dfd >= 0)
			close(dfd);
		return;
	}
	rewinddir(d);
	while ((de = readdir(d))) {
		size_t l = strlen(de->d_name);
		if (l > 4 && strcmp(de->d_name + l - 4, ".tmp") == 0)
			unlinkat(j->dirfd, de->d_name, 0);
	}
	closedir(d);
}

struct apply_ctx {
	jrnl_rec_fn fn;
	void *arg;
	uint64_t records;
};

static int apply_one(void *arg, const struct jrec *r)
{
	struct apply_ctx *a = arg;
	a->records++;
	return a->fn(a->arg, r);
}

/* jrnl_for_each_in callback: -ERANGE for a record that does not fit a
 * filesystem of chunk size *arg (see jrnl_rec_fits). */
static int check_fits(void *arg, const struct jrec *r)
{
	return jrnl_rec_fits(r, *(const uint64_t *)arg) ? 0 : -ERANGE;
}

/* Is checkpoint `m` whole and consistent with this state dir? */
static int checkpoint_valid(struct journal *j, const struct mapped *m, uint64_t gen,
			    uint8_t uuid[16])
{
	size_t pos = 0;
	uint64_t count = 0, chunk_size;
	struct jrec r;
	ssize_t n;

	n = jrnl_decode(m->map, m->len, &r);
	if (n <= 0 || r.type != JR_HEADER || r.hdr.kind != JRNL_KIND_CHECKPOINT ||
	    r.hdr.version < JRNL_VERSION_MIN || r.hdr.version > JRNL_VERSION || r.hdr.gen != gen)
		return 0;
	memcpy(uuid, r.hdr.uuid, 16);
	/* its own chunk size: a mismatch with the mount's is reported later */
	chunk_size = r.hdr.chunk_size;
	pos = (size_t)n;
	while (pos < m->len) {
		n = jrnl_decode(m->map + pos, m->len - pos, &r);
		/* jrnl_emit writes neither a TX nor a second header */
		if (n <= 0 || r.type == JR_TX || r.type == JR_HEADER || !jrnl_rec_fits(&r, chunk_size))
			return 0;
		pos += (size_t)n;
		if (r.type == JR_END)
			return r.count == count && pos == m->len;
		count++;
	}
	return 0;
}

/* No checkpoint, and journals holding nothing but a header (a first
 * checkpoint that failed or was interrupted)? Takes the uuid from them. */
static int journals_empty(struct journal *j, const uint64_t *jns, size_t njns, uint8_t uuid[16])
{
	int have_uuid = 0;
	for (size_t i = 0; i < njns; i++) {
		struct mapped m;
		struct jrec r;
		char name[64];
		ssize_t n;
		jrnl_name_of(name, sizeof(name), "journal", jns[i], "");
		if (map_file(j, name, &m) < 0)
			return 0;
		n = m.len ? jrnl_decode(m.map, m.len, &r) : 0;
		if (m.len && n == 0) {
			/* a torn first header (power loss while the first mount
			 * wrote it): it is fdatasync'd before anything follows,
			 * so nothing else was ever there */
			unmap_file(&m);
			continue;
		}
		if (m.len && (n <= 0 || (size_t)n != m.len || r.type != JR_HEADER)) {
			unmap_file(&m);
			return 0;
		}
		if (n > 0 && !have_uuid) {
			memcpy(uuid, r.hdr.uuid, 16);
			have_uuid = 1;
		}
		unmap_file(&m);
	}
	if (!have_uuid && getrandom(uuid, 16, 0) != 16)
		return 0;
	return 1;
}

/* A state dir with nothing to replay: j->uuid is the new state's, generation
 * 0, a first checkpoint due. */
static void start_fresh(struct journal *j, struct jrnl_recovery *info)
{
	info->fresh = 1;
	memcpy(info->uuid, j->uuid, 16);
	j->gen = 0;
	j->need_checkpoint = 1;
}

/* Map the newest whole checkpoint of cks (ascending) into m and take its
 * uuid into j->uuid; its index in cks, or -1 when none is whole. */
static int find_checkpoint(struct journal *j, const uint64_t *cks, size_t ncks, struct mapped *m)
{
	char name[64];

	for (size_t i = ncks; i-- > 0;) {
		jrnl_name_of(name, sizeof(name), "checkpoint", cks[i], "");
		if (map_file(j, name, m) < 0)
			continue;
		if (checkpoint_valid(j, m, cks[i], j->uuid))
			return (int)i;
		log_warn("journal: %s/%s is damaged; trying an older checkpoint", j->dir, name);
		unmap_file(m);
	}
	return -1;
}

/* Hand every record of checkpoint m (checkpoint_valid said it is whole) to
 * a. 0, -EINVAL for a chunk size other than the mount's, or what a->fn
 * returned (err filled). */
static int replay_checkpoint(struct journal *j, const struct mapped *m, struct apply_ctx *a,
			     char *err, size_t errlen)
{
	size_t pos = 0;
	int ret;

	while (pos < m->len) {
		struct jrec r;
		ssize_t n = jrnl_decode(m->map + pos, m->len - pos, &r);
		if (r.type == JR_HEADER) {
			if (r.hdr.chunk_size != j->chunk_size) {
				snprintf(err, errlen,
					 "option 'chunk_size': %" PRIu64
					 " does not match state_dir '%s', made with "
					 "chunk_size=%" PRIu64,
					 j->chunk_size, j->dir, r.hdr.chunk_size);
				return -EINVAL;
			}
		} else if (r.type != JR_END && (ret = apply_one(a, &r)) != 0) {
			snprintf(err, errlen, "state_dir '%s': checkpoint: %s", j->dir,
				 strerror(ret < 0 ? -ret : EINVAL));
			return ret;
		}
		pos += (size_t)n;
	}
	return 0;
}

/* Hand the records of journal `name` (generation g, mapped in m) to a, up to
 * its first torn or bad record or a header not of this state; then *stop is
 * set and what follows is counted as truncated. *end: where the replayed part
 * ends. 0, or what a->fn returned (err filled). */
static int replay_journal(struct journal *j, uint64_t g, const char *name, const struct mapped *m,
			  struct apply_ctx *a, struct jrnl_recovery *info, uint64_t *end, int *stop,
			  char *err, size_t errlen)
{
	size_t pos = 0;
	int ret;

	while (pos < m->len) {
		struct jrec r;
		ssize_t n = jrnl_decode(m->map + pos, m->len - pos, &r);
		if (n > 0 &&
		    jrnl_for_each_in(m->map + pos, (size_t)n, &r, check_fits, &j->chunk_size) != 0)
			n = -EBADMSG; /* out of range: as bad as a bad crc */
		if (n > 0 && pos > 0 && (r.type == JR_HEADER || r.type == JR_END))
			n = -EBADMSG; /* a header or end mark only opens/closes a file */
		if (n <= 0) {
			log_warn("journal: %s/%s: %s at byte %zu; replay stops there (%zu "
				 "bytes dropped)",
				 j->dir, name, n == 0 ? "torn record" : "bad record", pos,
				 m->len - pos);
			info->truncated += m->len - pos;
			*stop = 1;
			break;
		}
		if (pos == 0) {
			if (r.type != JR_HEADER || r.hdr.kind != JRNL_KIND_JOURNAL ||
			    r.hdr.version < JRNL_VERSION_MIN || r.hdr.version > JRNL_VERSION ||
			    r.hdr.gen != g || memcmp(r.hdr.uuid, j->uuid, 16) != 0) {
				log_warn("journal: %s/%s: bad header; ignored", j->dir, name);
				info->truncated += m->len;
				*stop = 1;
				break;
			}
		} else if ((ret = jrnl_for_each_in(m->map + pos, (size_t)n, &r, apply_one, a))) {
			snprintf(err, errlen, "state_dir '%s': %s: %s", j->dir, name,
				 strerror(ret < 0 ? -ret : EINVAL));
			return ret;
		}
		pos += (size_t)n;
	}
	*end = pos;
	return 0;
}

/* Replay the journals from the checkpoint's generation ckgen on, in order,
 * up to the first gap or the first file replay stops in (*stop set). *last:
 * the last generation replayed (ckgen when none); *end: where its valid part
 * ends (0 when there was none). 0, or -errno / what a->fn returned (err
 * filled). */
static int replay_journals(struct journal *j, const uint64_t *jns, size_t njns, uint64_t ckgen,
			   struct apply_ctx *a, struct jrnl_recovery *info, uint64_t *last,
			   uint64_t *end, int *stop, char *err, size_t errlen)
{
	char name[64];
	int ret;

	*last = ckgen;
	for (uint64_t g = ckgen; !*stop; g++) {
		struct mapped m;
		int have = 0;

		for (size_t i = 0; i < njns; i++)
			have |= jns[i] == g;
		if (!have)
			break;
		jrnl_name_of(name, sizeof(name), "journal", g, "");
		if ((ret = map_file(j, name, &m)) < 0) {
			snprintf(err, errlen, "state_dir '%s': %s: %s", j->dir, name,
				 strerror(-ret));
			return ret;
		}
		info->journals++;
		*last = g;
		ret = replay_journal(j, g, name, &m, a, info, end, stop, err, errlen);
		unmap_file(&m);
		if (ret != 0)
			return ret;
	}
	return 0;
}

/* Remove the journals after generation last: after a bad record they would
 * be replayed on top of newer state. Counts them as truncated; 1 if any. */
static int drop_later_journals(struct journal *j, const uint64_t *jns, size_t njns, uint64_t last,
			       struct jrnl_recovery *info)
{
	char name[64];
	int dropped = 0;

	for (size_t i = 0; i < njns; i++)
		if (jns[i] > last) {
			struct stat st;
			jrnl_name_of(name, sizeof(name), "journal", jns[i], "");
			if (fstatat(j->dirfd, name, &st, 0) == 0)
				info->truncated += (uint64_t)st.st_size;
			unlinkat(j->dirfd, name, 0);
			dropped = 1;
		}
	return dropped;
}

/* Reopen journal.<last> for appends, cut at its valid end `end`; when it is
 * missing or headerless (end 0), write it anew with a header. 0 or -errno
 * (err filled). */
static int reopen_for_append(struct journal *j, uint64_t last, uint64_t end, char *err,
			     size_t errlen)
{
	char name[64];
	int ret;

	j->gen = last;
	jrnl_name_of(name, sizeof(name), "journal", last, "");
	j->fd = openat(j->dirfd, name, O_WRONLY | O_CLOEXEC | O_NOFOLLOW);
	if (j->fd >= 0 && end == 0) {
		close(j->fd);
		j->fd = -1;
	}
	if (j->fd < 0) {
		struct jrec h = {.type = JR_HEADER,
				 .hdr = {.version = JRNL_VERSION,
					 .kind = JRNL_KIND_JOURNAL,
					 .gen = last,
					 .chunk_size = j->chunk_size}};
		uint8_t hb[64];
		size_t hl;
		memcpy(h.hdr.uuid, j->uuid, 16);
		hl = jrnl_encode(&h, hb);
		j->fd = openat(j->dirfd, name,
			       O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
		if (j->fd < 0 || (ret = jrnl_write_at(j->fd, hb, hl, 0)) < 0) {
			ret = j->fd < 0 ? -errno : ret;
			snprintf(err, errlen, "state_dir '%s': %s: %s", j->dir, name,
				 strerror(-ret));
			return ret;
		}
		end = hl;
	}
	if (ftruncate(j->fd, (off_t)end) < 0) {
		ret = -errno;
		snprintf(err, errlen, "state_dir '%s': %s: cannot cut the torn tail: %s", j->dir,
			 name, strerror(-ret));
		return ret;
	}
	j->off = end;
	return 0;
}

int jrnl_recover(struct journal *j, jrnl_rec_fn fn, void *arg, struct jrnl_recovery *info,
		 char *err, size_t errlen)
{
	uint64_t *cks = NULL, *jns = NULL, last, valid_end = 0;
	size_t ncks = 0, njns = 0;
	struct apply_ctx a = {.fn = fn, .arg = arg};
	struct mapped m = {0};
	char name[64];
	int ret, found, stop = 0;

	memset(info, 0, sizeof(*info));
	remove_tmp(j);
	if ((ret = jrnl_list_gens(j, "checkpoint", &cks, &ncks)) < 0 ||
	    (ret = jrnl_list_gens(j, "journal", &jns, &njns)) < 0) {
		snprintf(err, errlen, "state_dir '%s': cannot list: %s", j->dir, strerror(-ret));
		goto out;
	}
	if (ncks == 0 && njns == 0) {
		if (getrandom(j->uuid, sizeof(j->uuid), 0) != sizeof(j->uuid)) {
			ret = -errno;
			snprintf(err, errlen, "getrandom: %s", strerror(-ret));
			info->fresh = 1;
			goto out;
		}
		start_fresh(j, info);
		ret = 0;
		goto out;
	}
	found = find_checkpoint(j, cks, ncks, &m);
	if (found < 0 && journals_empty(j, jns, njns, j->uuid)) {
		/* the first checkpoint never made it: nothing was ever appended */
		for (size_t i = 0; i < njns; i++) {
			jrnl_name_of(name, sizeof(name), "journal", jns[i], "");
			unlinkat(j->dirfd, name, 0);
		}
		start_fresh(j, info);
		ret = 0;
		goto out;
	}
	if (found < 0) {
		snprintf(err, errlen,
			 "state_dir '%s': no valid checkpoint (spillway-fsck --rebuild can "
			 "rebuild the index from the cold tier)",
			 j->dir);
		ret = -EBADMSG;
		goto out;
	}
	memcpy(info->uuid, j->uuid, 16);
	info->checkpoint_gen = cks[found];
	if ((ret = replay_checkpoint(j, &m, &a, err, errlen)) != 0)
		goto out;
	unmap_file(&m);
	if ((ret = replay_journals(j, jns, njns, cks[found], &a, info, &last, &valid_end, &stop,
				   err, errlen)) != 0)
		goto out;
	stop |= drop_later_journals(j, jns, njns, last, info);
	if (stop)
		fsync(j->dirfd);
	info->records = a.records;
	if ((ret = reopen_for_append(j, last, valid_end, err, errlen)) < 0)
		goto out;
	j->need_checkpoint = stop || info->journals > 1;
out:
	unmap_file(&m);
	free(cks);
	free(jns);
	return ret;
}
