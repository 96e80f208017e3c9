/*
 * fsck_stores.c — spillway-fsck's view of the cold tier: the cold
 * directories locked (store_nvme_lock: no mount runs meanwhile), the stores
 * opened as the daemon opens them (store_s3_fs_url), every segment listed
 * (struct found) with its header and footer read once, the footers indexed
 * by (ino, chunk), and chunk records read back and verified.
 * Guarantees: a segment is read only through tier/'s segment readers (every
 * byte crc-checked); no segment is written or removed here.
 * Single-threaded.
 */
#include "mount-helpers/fsck/fsck_i.h"

#include "tier/store/store_s3.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

struct list_ctx {
	struct fsck *f;
	int store;
	int err;
};

static int list_cb(void *arg, uint64_t id, uint32_t dev, uint64_t size)
{
	struct list_ctx *lc = arg;
	struct found *fd = calloc(1, sizeof(*fd));
	if (!fd)
		return -ENOMEM;
	fd->store = lc->store;
	fd->id = id;
	fd->dev = dev;
	fd->size = size;
	if (fsck_ht_add(&lc->f->found, &fd->h, mix64(id)) < 0) {
		free(fd);
		return -ENOMEM;
	}
	return 0;
}

static int lock_nvme_dirs(struct fsck *f)
{
	for (int i = 0; i < f->tiers.nnvme; i++) {
		struct stat sb;
		int fd, ret;
		if (stat(f->tiers.nvme_dir[i], &sb) < 0 || !S_ISDIR(sb.st_mode)) {
			fsck_oper_err(f, "cold directory %s: %s", f->tiers.nvme_dir[i],
				      errno ? strerror(errno) : "not a directory");
			return -ENOENT;
		}
		if ((ret = store_nvme_lock(f->tiers.nvme_dir[i], &fd)) < 0) {
			fsck_oper_err(f, "cold directory %s: %s", f->tiers.nvme_dir[i],
				      ret == -EBUSY ? "in use by a spillway mount"
						    : strerror(-ret));
			return -EBUSY;
		}
		f->lockfds[f->nlocks++] = fd;
	}
	return 0;
}

static int open_s3(struct fsck *f, struct store **out)
{
	char url[2048], why[512], us[33];
	const char *base = f->tiers.s3;
	const char *last = strrchr(base, '/');
	struct s3_config sc = {
	    .endpoint = f->tiers.s3_endpoint,
	    .region = f->tiers.s3_region,
	    .path_style = f->tiers.s3_path_style,
	    .part_size = f->tiers.s3_part_size,
	    .credentials_file = f->tiers.s3_credentials,
	    .ca_file = f->tiers.s3_ca_file,
	};
	int ret;

	fsck_uuid_str(f->uuid, us);
	/* the daemon keeps its objects under <s3>/<uuid>/ (a base naming
	 * the uuid already is taken as it is) */
	store_s3_fs_url(url, sizeof(url), base, last && !strcmp(last + 1, us) ? NULL : f->uuid);
	sc.url = url;
	ret = store_s3_open(&sc, out, why, sizeof(why));
	if (ret < 0)
		fsck_oper_err(f, "s3 %s: %s; s3 segments not checked", url, why);
	return ret;
}

int fsck_open_stores(struct fsck *f)
{
	int ret, s3_idx = f->tiers.nnvme ? 1 : 0;

	if (f->tiers.nnvme) {
		const char *dirs[MAX_NVME];
		if ((ret = lock_nvme_dirs(f)) < 0)
			return ret;
		for (int i = 0; i < f->tiers.nnvme; i++) {
			dirs[i] = f->tiers.nvme_dir[i];
			f->devname[i] = f->tiers.nvme_dir[i];
		}
		f->configured[0] = 1;
		f->st_name[0] = "nvme";
		if ((ret = store_nvme_open(dirs, f->tiers.nnvme, &f->st[0])) < 0) {
			fsck_oper_err(f, "cold directories: %s", strerror(-ret));
			return ret;
		}
		f->usable[0] = 1;
	}
	if (f->tiers.s3) {
		f->configured[s3_idx] = 1;
		f->st_name[s3_idx] = f->tiers.s3;
		if (open_s3(f, &f->st[s3_idx]) == 0)
			f->usable[s3_idx] = 1;
	}
	for (int s = 0; s < 2; s++) {
		struct list_ctx lc = {.f = f, .store = s};
		if (!f->usable[s])
			continue;
		ret = store_list(f->st[s], list_cb, &lc);
		if (ret < 0) {
			fsck_oper_err(f, "listing the segments of %s: %s", f->st_name[s],
				      strerror(-ret));
			f->usable[s] = 0;
			if (ret == -ENOMEM)
				return ret;
		}
	}
	return 0;
}

const char *fsck_dev_name(struct fsck *f, int store, uint32_t dev)
{
	if (store == 0 && f->tiers.nnvme && dev < (uint32_t)f->tiers.nnvme)
		return f->devname[dev];
	return f->st_name[store] ? f->st_name[store] : "?";
}

/* Read every listed segment's header and footer; index the footers. */
int fsck_read_manifests(struct fsck *f)
{
	size_t n, k = 0;
	struct found **all = (struct found **)fsck_ht_array(&f->found, &n);
	int ret = 0;

	if (f->found.n && !all)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		struct found *fd = all[i];
		fsck_progress(f, "reading segment footers", i, n);
		fd->mret = seg_read_manifest(f->st[fd->store], fd->id, fd->dev, fd->size, fd->uuid,
					     &fd->version, &fd->ents, &fd->n);
		if (fd->mret == -ENOMEM) {
			ret = -ENOMEM;
			break;
		}
		if (fd->mret < 0)
			continue;
		fd->ours = !f->have_uuid || !memcmp(fd->uuid, f->uuid, 16);
		if (!fd->ours)
			continue;
		if (fd->n && !(fd->copies = calloc(fd->n, sizeof(*fd->copies)))) {
			ret = -ENOMEM;
			break;
		}
		for (uint32_t e = 0; e < fd->n; e++) {
			fd->payload += fd->ents[e].len;
			fd->copies[e].f = fd;
			fd->copies[e].ei = e;
			k++;
			if ((ret = fsck_ht_add(&f->copies, &fd->copies[e].h,
					       key2(fd->ents[e].ino, fd->ents[e].chunk))) < 0)
				goto out;
		}
	}
	fsck_progress(f, "reading segment footers", n, n);
out:
	free(all);
	return ret;
}

/* The copy of segment id in `store` (preferring dev), or NULL. */
struct found *fsck_found_get(struct fsck *f, int store, uint64_t id, uint32_t dev)
{
	struct found *any = NULL;
	uint64_t k = mix64(id);
	for (struct hent *e = ht_bucket(&f->found, k); e; e = e->next) {
		struct found *fd = (struct found *)e;
		if (e->key != k || fd->id != id || fd->store != store || fd->removed)
			continue;
		if (fd->dev == dev)
			return fd;
		if (!any)
			any = fd;
	}
	return any;
}

/* Bind each segment-table entry to its copy in the store. */
void fsck_bind_segments(struct fsck *f)
{
	struct seg_where w;
	struct found *fd;

	for (uint64_t id = 0; segtab_next(f->segs, &id, &w);)
		if (w.store < 2 && (fd = fsck_found_get(f, w.store, id, w.dev)))
			fd->bound = 1;
}

/* A file uses segment id, which the table has but the store lacks: it is
 * reported with the file (check_segments says no more). 0, -ENOMEM. */
int fsck_seg_mark_reported(struct fsck *f, uint64_t id)
{
	if (id >= f->nseg_reported) {
		uint64_t n = id + 1 > 2 * f->nseg_reported ? id + 1 : 2 * f->nseg_reported;
		uint8_t *v = realloc(f->seg_reported, n);
		if (!v)
			return -ENOMEM;
		memset(v + f->nseg_reported, 0, n - f->nseg_reported);
		f->seg_reported = v;
		f->nseg_reported = n;
	}
	f->seg_reported[id] = 1;
	return 0;
}

int fsck_seg_reported(struct fsck *f, uint64_t id)
{
	return id < f->nseg_reported && f->seg_reported[id];
}

struct seg_entry *fsck_entry_for(struct found *fd, uint64_t ino, uint64_t chunk, uint64_t off)
{
	for (uint32_t i = 0; i < fd->n; i++)
		if (fd->ents[i].ino == ino && fd->ents[i].chunk == chunk && fd->ents[i].off == off)
			return &fd->ents[i];
	return NULL;
}

/* Read a chunk record and check it all (map, every block crc; any format
 * version), once per footer entry; in a v3 segment, also where the record
 * lies (a large record on 4 KiB, whole-page extents: counted in
 * layout_off when not, not damage). 0, 1 crc or map mismatch, or -errno
 * (read). */
int fsck_verify_chunk(struct fsck *f, struct found *fd, const struct seg_entry *e)
{
	size_t ei = (size_t)(e - fd->ents);
	int mine = e >= fd->ents && ei < fd->n, ret;
	struct seg_chunk sc;
	if (mine && fd->verified && fd->verified[ei])
		return 0;
	ret = seg_read_chunk(f->st[fd->store], fd->id, fd->dev, e, &sc);
	if (ret == 0 && fd->version >= 3 && !seg_layout_v3_ok(e, &sc))
		f->layout_off++;
	if (ret == 0)
		seg_chunk_free(&sc);
	else if (ret == -EBADMSG)
		ret = 1;
	f->bytes_verified += e->len;
	if (ret == 0 && mine && (fd->verified || (fd->verified = calloc(fd->n, 1))))
		fd->verified[ei] = 1;
	return ret;
}
