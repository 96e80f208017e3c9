/*
 * stores — open the cold stores a mount's options name: the NVMe
 * directories (one mount per directory: store_nvme_lock; leftovers of
 * interrupted puts swept) and the S3 bucket (store_s3_fs_url: under
 * <prefix>/<uuid>/, or the prefix itself for the state's copy).
 * Threading: mount and unmount only (single-threaded).
 */
#include "tier/tier_i.h"

#include "common/lockwait.h"
#include "common/log.h"
#include "tier/store/store.h"
#include "tier/store/store_s3.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* t->nvme_locks: the flock'ed .spillway.lock of each cold directory. */
struct nvme_locks {
	int n;
	int fd[64];
};

void stores_unlock_nvme(struct tier *t)
{
	struct nvme_locks *l = t->nvme_locks;

	if (!l)
		return;
	for (int i = 0; i < l->n; i++)
		close(l->fd[i]);
	free(l);
	t->nvme_locks = NULL;
}

static int remove_seg(void *arg, uint64_t id, uint32_t dev, uint64_t size)
{
	struct tier *t = arg;
	store_remove(t->store, id, dev);
	return 0;
}

static int count_seg(void *arg, uint64_t id, uint32_t dev, uint64_t size)
{
	(*(uint64_t *)arg)++;
	return 0;
}

void stores_remove_all(struct tier *t)
{
	store_list(t->store, remove_seg, t);
}

/* Open the NVMe store. Without a journal, segments left by an earlier mount
 * have no index to belong to: they are removed (with one, recovery keeps
 * what the index references and removes the rest). */
int stores_open_nvme(struct tier *t, char *err, size_t errlen)
{
	char *copy = strdup(t->cfg->nvme), *save = NULL, *d;
	const char *dirs[64];
	int n = 0, ret;
	uint64_t stale = 0;

	if (!copy || !(t->nvme_locks = calloc(1, sizeof(*t->nvme_locks)))) {
		free(copy);
		return -ENOMEM;
	}
	for (d = strtok_r(copy, ":", &save); d && n < 64; d = strtok_r(NULL, ":", &save))
		dirs[n++] = d;
	/* One mount per cold directory: the earlier-mount clean-up below would
	 * otherwise delete a live neighbour's segments. */
	for (int i = 0; i < n; i++) {
		if ((ret = store_nvme_lock(dirs[i], &t->nvme_locks->fd[i])) < 0) {
			snprintf(err, errlen, "option 'nvme': '%s': %s", dirs[i],
				 ret == -EBUSY ? "in use by another spillway mount"
					       : strerror(-ret));
			goto out;
		}
		t->nvme_locks->n = i + 1;
		lockwait_stamp(t->nvme_locks->fd[i], NULL, t->cfg->mountpoint);
	}
	/* partial segments of a put a crash interrupted: never listed, never
	 * referenced; the directory lock makes them ours to remove */
	for (int i = 0; i < n; i++) {
		DIR *dd = opendir(dirs[i]);
		struct dirent *de;
		while (dd && (de = readdir(dd)))
			if (!strncmp(de->d_name, ".tmp-", 5)) {
				char p[4400];
				snprintf(p, sizeof(p), "%s/%s", dirs[i], de->d_name);
				unlink(p);
			}
		if (dd)
			closedir(dd);
	}
	ret = store_nvme_open(dirs, n, &t->store);
	if (ret < 0) {
		snprintf(err, errlen, "option 'nvme': invalid value '%s': %s", t->cfg->nvme,
			 strerror(-ret));
		goto out;
	}
	if (!t->jrnl)
		store_list(t->store, count_seg, &stale);
	if (stale) {
		log_warn("nvme: removing %llu segments left by an earlier mount",
			 (unsigned long long)stale);
		stores_remove_all(t);
	}
out:
	free(copy);
	return ret;
}

/* Open the S3 store. Objects go under <prefix>/<filesystem uuid>/ so two
 * mounts sharing a bucket prefix never touch each other's segments. */
int stores_open_s3(struct tier *t, int with_uuid, struct store **out, char *err, size_t errlen)
{
	char url[2048], why[512];
	const char *base = t->cfg->s3;
	struct s3_config sc = {
	    .endpoint = t->cfg->s3_endpoint,
	    .region = t->cfg->s3_region,
	    .path_style = t->cfg->s3_path_style,
	    .part_size = t->cfg->s3_part_size,
	    .buffer_budget = t->cfg->s3_buffers,
	    .io_workers = t->cfg->io_workers,
	    .credentials_file = t->cfg->s3_credentials,
	    .ca_file = t->cfg->s3_ca_file,
	};
	int ret;

	store_s3_fs_url(url, sizeof(url), base, with_uuid ? t->uuid : NULL);
	sc.url = url;
	ret = store_s3_open(&sc, out, why, sizeof(why));
	if (ret < 0)
		snprintf(err, errlen, "option 's3': '%s': %s", base, why);
	return ret;
}
