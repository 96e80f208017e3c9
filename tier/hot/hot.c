#include "tier/hot/hot.h"

#include "common/log.h"
#include "index/index.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/vfs.h>
#include <linux/magic.h>
#include <unistd.h>

#define PAGE 4096ULL
#define NOT_OURS "it holds files and is not a spillway hot_dir (no " HOT_MARKER \
		 " marker): name an empty or new directory"

struct hot {
	char *dir;
	int dirfd;
	int lockfd;
	int locked; /* this instance holds the lock: it may clean up */
	int created; /* the marker says spillway made the directory: rmdir it */
	uint64_t limit;	   /* atomic: the effective budget (hot_set_limit) */
	uint64_t used;	   /* atomic: bytes allocated by hot files */
	uint64_t reserved; /* atomic: bytes promised to writes in flight */
	uint64_t pinned;   /* atomic: bytes of hot files passed through (hot_pin_locked) */
	pthread_mutex_t lock; /* the list below; a leaf lock */
	/* inodes with a hot file, in no order; in->hot_slot is 1 + the
	 * inode's place here (0: not listed), so both ends are O(1) and an
	 * inode pays 4 bytes for being listable, not two pointers */
	struct inode **listed;
	uint32_t nlisted, cap;
};

/* The inodes with a hot file are the only ones the evictor needs to look
 * at: keep them in a set, so a round costs O(hot files), not O(files). */
static int list_add(struct hot *hot, struct inode *in)
{
	int ret = 0;
	pthread_mutex_lock(&hot->lock);
	if (!in->hot_slot) {
		if (hot->nlisted == hot->cap) {
			uint32_t ncap = hot->cap ? hot->cap * 2 : 256;
			struct inode **nv = ncap > hot->cap ? realloc(hot->listed, ncap * sizeof(*nv)) : NULL;
			if (!nv) {
				ret = -ENOMEM;
				goto out;
			}
			hot->listed = nv;
			hot->cap = ncap;
		}
		hot->listed[hot->nlisted++] = in;
		in->hot_slot = hot->nlisted;
	}
out:
	pthread_mutex_unlock(&hot->lock);
	return ret;
}

static void list_del(struct hot *hot, struct inode *in)
{
	pthread_mutex_lock(&hot->lock);
	if (in->hot_slot) {
		struct inode *last = hot->listed[--hot->nlisted];
		hot->listed[in->hot_slot - 1] = last;
		last->hot_slot = in->hot_slot;
		in->hot_slot = 0;
	}
	pthread_mutex_unlock(&hot->lock);
}

int hot_list_inos(struct hot *hot, uint64_t **out, size_t *n)
{
	uint64_t *v;
	size_t i = 0;

	pthread_mutex_lock(&hot->lock);
	v = malloc((hot->nlisted ? hot->nlisted : 1) * sizeof(*v));
	if (v)
		for (; i < hot->nlisted; i++)
			v[i] = hot->listed[i]->ino;
	pthread_mutex_unlock(&hot->lock);
	*out = v;
	*n = i;
	return v ? 0 : -ENOMEM;
}

static int is_hot_name(const char *n)
{
	if (strlen(n) != 16)
		return 0;
	for (int i = 0; i < 16; i++)
		if (!((n[i] >= '0' && n[i] <= '9') || (n[i] >= 'a' && n[i] <= 'f')))
			return 0;
	return 1;
}

/* Call fn for each hot file (fn may be NULL: remove them all); refuse a
 * directory with anything else. */
static int scan_dir(struct hot *hot, int (*fn)(void *, uint64_t, uint64_t, uint64_t), void *arg,
		    const char **why)
{
	int fd = dup(hot->dirfd), ret = 0;
	DIR *d;
	struct dirent *de;

	if (fd < 0 || !(d = fdopendir(fd))) {
		if (fd >= 0)
			close(fd);
		*why = "cannot list it";
		return -errno;
	}
	rewinddir(d); /* the dup shares dirfd's offset */
	while ((de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..") ||
		    !strcmp(de->d_name, ".lock") || !strcmp(de->d_name, HOT_MARKER))
			continue;
		if (!is_hot_name(de->d_name)) {
			*why = "it holds files that are not spillway's (use an empty or new "
			       "directory)";
			ret = -ENOTEMPTY;
			break;
		}
		if (fn) {
			struct stat st;
			if (fstatat(hot->dirfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
			    !S_ISREG(st.st_mode))
				continue;
			fn(arg, strtoull(de->d_name, NULL, 16), (uint64_t)st.st_size,
			   (uint64_t)st.st_blocks * 512);
		} else
			unlinkat(hot->dirfd, de->d_name, 0);
	}
	closedir(d);
	return ret;
}

int hot_list(struct hot *hot, int (*fn)(void *arg, uint64_t ino, uint64_t size, uint64_t bytes),
	     void *arg)
{
	const char *why = NULL;
	return scan_dir(hot, fn, arg, &why);
}

void hot_adopt_locked(struct hot *hot, struct inode *in, uint64_t bytes)
{
	__atomic_add_fetch(&hot->used, bytes, __ATOMIC_RELAXED);
	in->hot_bytes = bytes;
	if (list_add(hot, in) < 0) /* the evictor will not see it: say so */
		log_err("hot: no memory to list inode %llu; its RAM stays until it is opened",
			  (unsigned long long)in->ino);
}

void hot_remove(struct hot *hot, uint64_t ino)
{
	char name[17];
	snprintf(name, sizeof(name), "%016llx", (unsigned long long)ino);
	unlinkat(hot->dirfd, name, 0);
}

/* What a directory holds besides ".", "..", .lock and the marker (which
 * sets *marker): 0 nothing, 2 anything else; -errno when it cannot be listed. */
static int dir_contents(int dirfd, int *marker)
{
	int fd = dup(dirfd), what = 0;
	DIR *d;
	struct dirent *de;

	*marker = 0;
	if (fd < 0 || !(d = fdopendir(fd))) {
		int e = -errno;
		if (fd >= 0)
			close(fd);
		return e;
	}
	rewinddir(d); /* the dup shares dirfd's offset */
	while ((de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (!strcmp(de->d_name, HOT_MARKER))
			*marker = 1;
		else if (strcmp(de->d_name, ".lock"))
			what = 2;
	}
	closedir(d);
	return what;
}

int hot_dir_check(const char *dir, const char **why)
{
	int fd, marker, what;

	*why = NULL;
	if (!strcmp(dir, "/")) {
		*why = "the root directory can never be a hot_dir";
		return -EINVAL;
	}
	fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0) {
		if (errno == ENOENT)
			return 0; /* hot_new creates it */
		*why = errno == ELOOP || errno == ENOTDIR ? "it is a symbolic link or not a directory"
							  : "cannot open it";
		return -errno;
	}
	what = dir_contents(fd, &marker);
	close(fd);
	if (what < 0) {
		*why = "cannot list it";
		return what;
	}
	if (what == 2 && !marker) {
		*why = NOT_OURS;
		return -ENOTEMPTY;
	}
	return 0;
}

/* The marker records that the directory is spillway's, and whether spillway
 * created it ("created") or was given it empty ("adopted"): only the first
 * is removed at unmount. */
static int marker_write(struct hot *hot, int created)
{
	const char *txt = created ? "spillway hot_dir\ncreated\n" : "spillway hot_dir\nadopted\n";
	int fd = openat(hot->dirfd, HOT_MARKER, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	ssize_t n;

	if (fd < 0)
		return -errno;
	n = write(fd, txt, strlen(txt));
	close(fd);
	return n == (ssize_t)strlen(txt) ? 0 : -EIO;
}

int hot_dir_make(const char *dir)
{
	struct hot h = {.dir = (char *)dir};
	int ret;

	if (mkdir(dir, 0700) < 0)
		return -errno;
	h.dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	ret = h.dirfd < 0 ? -errno : marker_write(&h, 1);
	if (h.dirfd >= 0)
		close(h.dirfd);
	if (ret < 0)
		rmdir(dir);
	return ret;
}

void hot_dir_unmake(const char *dir)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC), marker;

	if (fd < 0)
		return;
	if (dir_contents(fd, &marker) == 0 && marker) { /* nothing but the marker */
		unlinkat(fd, HOT_MARKER, 0);
		rmdir(dir);
	}
	close(fd);
}

static int marker_created(struct hot *hot)
{
	char buf[64] = {0};
	int fd = openat(hot->dirfd, HOT_MARKER, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	if (read(fd, buf, sizeof(buf) - 1) < 0)
		buf[0] = 0;
	close(fd);
	return strstr(buf, "created") != NULL;
}

int hot_new(const char *dir, uint64_t limit, int keep, struct hot **out, const char **why)
{
	struct hot *hot = calloc(1, sizeof(*hot));
	struct stat st;
	struct statfs sf;
	int ret, made = 0, marker, what;

	*why = NULL;
	if (!hot)
		return -ENOMEM;
	hot->dirfd = hot->lockfd = -1;
	hot->limit = limit;
	pthread_mutex_init(&hot->lock, NULL);
	if (!(hot->dir = strdup(dir))) {
		ret = -ENOMEM;
		goto fail;
	}
	if ((ret = hot_dir_check(dir, why)) < 0)
		goto fail;
	if (mkdir(dir, 0700) == 0)
		made = 1;
	else if (errno != EEXIST) {
		ret = -errno;
		*why = "cannot create it";
		goto fail;
	}
	/* O_NOFOLLOW: in a shared /dev/shm another user could plant a symlink
	 * under the (predictable) default name and make us clean out its target */
	hot->dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (hot->dirfd < 0) {
		ret = -errno;
		*why = ret == -ELOOP || ret == -ENOTDIR ? "it is a symbolic link or not a directory"
							: "cannot open it";
		goto fail;
	}
	if (fstat(hot->dirfd, &st) < 0 || st.st_uid != geteuid()) {
		ret = -EPERM;
		*why = "it exists and belongs to another user";
		goto fail;
	}
	/* Only a directory spillway can prove is its own is ever changed: one
	 * it made, one with its marker, or an empty one it is given (which the
	 * marker then claims). Anything else is refused untouched. */
	if ((what = dir_contents(hot->dirfd, &marker)) < 0) {
		ret = what;
		*why = "cannot list it";
		goto fail;
	}
	if (what == 2 && !marker) {
		ret = -ENOTEMPTY;
		*why = NOT_OURS;
		goto fail;
	}
	if (!marker && (ret = marker_write(hot, made)) < 0) {
		*why = "cannot write its " HOT_MARKER " marker";
		goto fail;
	}
	hot->created = marker ? marker_created(hot) : made;
	if ((st.st_mode & 0777) != 0700 && fchmod(hot->dirfd, 0700) < 0) {
		ret = -errno;
		*why = "cannot make it mode 0700";
		goto fail;
	}
	if (fstatfs(hot->dirfd, &sf) == 0 && sf.f_type != TMPFS_MAGIC)
		log_warn("hot_dir %s is not on tmpfs: the hot tier will run at that "
			 "filesystem's speed, not RAM's", dir);
	hot->lockfd = openat(hot->dirfd, ".lock", O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (hot->lockfd < 0) {
		ret = -errno;
		*why = "cannot create its lock file";
		goto fail;
	}
	if (flock(hot->lockfd, LOCK_EX | LOCK_NB) < 0) {
		ret = -EBUSY;
		*why = "another spillway daemon is using it";
		goto fail;
	}
	hot->locked = 1;
	/* keep: recovery decides file by file (recover.c); else a fresh start */
	if (!keep && (ret = scan_dir(hot, NULL, NULL, why)) < 0)
		goto fail;
	*out = hot;
	return 0;
fail:
	/* a directory made here and still empty goes again (hot_free does it
	 * once the lock is held; before that, nothing else can be in it) */
	if (made && !hot->locked) {
		if (hot->dirfd >= 0)
			unlinkat(hot->dirfd, HOT_MARKER, 0);
		rmdir(dir);
	}
	hot_free(hot);
	return ret;
}

void hot_free(struct hot *hot)
{
	if (!hot)
		return;
	/* only the instance holding the lock may remove what it made; the
	 * marker stays while kept hot files need it */
	if (hot->locked) {
		int marker;
		unlinkat(hot->dirfd, ".lock", 0);
		if (dir_contents(hot->dirfd, &marker) == 0 && marker)
			unlinkat(hot->dirfd, HOT_MARKER, 0);
	}
	if (hot->lockfd >= 0)
		close(hot->lockfd);
	if (hot->dirfd >= 0)
		close(hot->dirfd);
	if (hot->locked && hot->created && hot->dir)
		rmdir(hot->dir); /* only succeeds when empty (kept files stay) */
	free(hot->dir);
	free(hot->listed);
	pthread_mutex_destroy(&hot->lock);
	free(hot);
}

static void hot_name(uint64_t ino, char name[17])
{
	snprintf(name, 17, "%016llx", (unsigned long long)ino);
}

int hot_fd_get_locked(struct hot *hot, struct inode *in)
{
	if (in->hot_fd < 0) {
		char name[17];
		int fd;
		hot_name(in->ino, name);
		fd = openat(hot->dirfd, name, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
		if (fd < 0)
			return -errno;
		/* the hot file mirrors the logical size; holes cost nothing */
		if (ftruncate(fd, (off_t)in->size) < 0) {
			int e = -errno;
			close(fd);
			return e;
		}
		if (list_add(hot, in) < 0) {
			close(fd);
			return -ENOMEM;
		}
		in->hot_fd = fd;
	}
	in->hot_users++;
	return in->hot_fd;
}

/* Does any chunk of `in` have bytes in RAM (or on their way there)? */
static int has_hot_chunk_locked(const struct inode *in)
{
	for (uint64_t c = 0; c < in->nchunks; c++)
		if (in->chunks[c].state != CHUNK_ABSENT && in->chunks[c].state != CHUNK_COLD)
			return 1;
	return 0;
}

void hot_fd_put_locked(struct hot *hot, struct inode *in)
{
	if (in->hot_users == 0)
		abort(); /* unbalanced put */
	if (--in->hot_users == 0) {
		close(in->hot_fd);
		in->hot_fd = -1;
		/* A file with nothing in RAM keeps nothing in RAM: no tmpfs inode
		 * (kernel memory outside hot_size, a million of them for a million
		 * cold files) and no stray page. Its chunks are holes or cold, so
		 * a hot file recreated sparse at the next use reads the same. */
		if (S_ISREG(idx_type(in)) && !has_hot_chunk_locked(in)) {
			char name[17];
			hot_name(in->ino, name);
			if (unlinkat(hot->dirfd, name, 0) < 0 && errno != ENOENT)
				log_warn("hot: cannot remove hot file %s: %s", name, strerror(errno));
			__atomic_sub_fetch(&hot->used, in->hot_bytes, __ATOMIC_RELAXED);
			in->hot_bytes = 0;
			list_del(hot, in);
		}
	}
}

void hot_drop(struct hot *hot, struct inode *in)
{
	char name[17];
	if (!S_ISREG(idx_type(in)))
		return;
	hot_name(in->ino, name);
	if (unlinkat(hot->dirfd, name, 0) < 0 && errno != ENOENT)
		log_warn("hot: cannot remove hot file %s: %s", name, strerror(errno));
	if (in->hot_fd >= 0) {
		close(in->hot_fd);
		in->hot_fd = -1;
	}
	__atomic_sub_fetch(&hot->used, in->hot_bytes, __ATOMIC_RELAXED);
	in->hot_bytes = 0;
	list_del(hot, in);
}

/* Bytes of [off, off+len) not yet allocated in fd, rounded to pages. */
static uint64_t unallocated(int fd, uint64_t off, uint64_t len)
{
	uint64_t pos = off & ~(PAGE - 1), end = (off + len + PAGE - 1) & ~(PAGE - 1), need = 0;
	while (pos < end) {
		off_t data = lseek(fd, (off_t)pos, SEEK_DATA);
		if (data < 0 || (uint64_t)data >= end) {
			need += end - pos;
			break;
		}
		need += (uint64_t)data - pos;
		off_t hole = lseek(fd, data, SEEK_HOLE);
		if (hole < 0)
			break;
		pos = (uint64_t)hole;
	}
	return need;
}

static int take(struct hot *hot, uint64_t bytes)
{
	uint64_t r = __atomic_add_fetch(&hot->reserved, bytes, __ATOMIC_RELAXED);
	if (__atomic_load_n(&hot->used, __ATOMIC_RELAXED) + r <=
	    __atomic_load_n(&hot->limit, __ATOMIC_RELAXED))
		return 0;
	__atomic_sub_fetch(&hot->reserved, bytes, __ATOMIC_RELAXED);
	return -ENOSPC;
}

int64_t hot_try_reserve(struct hot *hot, int fd, uint64_t off, uint64_t len)
{
	uint64_t worst = ((off + len + PAGE - 1) & ~(PAGE - 1)) - (off & ~(PAGE - 1));
	uint64_t need;

	if (take(hot, worst) == 0)
		return (int64_t)worst;
	/* Near the limit: an overwrite of allocated pages needs no room. */
	need = unallocated(fd, off, len);
	if (need == 0)
		return 0;
	if (take(hot, need) == 0)
		return (int64_t)need;
	return -ENOSPC;
}

int64_t hot_reserve_beside_pinned(struct hot *hot, uint64_t off, uint64_t len)
{
	uint64_t worst = ((off + len + PAGE - 1) & ~(PAGE - 1)) - (off & ~(PAGE - 1));
	uint64_t r = __atomic_add_fetch(&hot->reserved, worst, __ATOMIC_RELAXED);
	if (__atomic_load_n(&hot->used, __ATOMIC_RELAXED) + r <=
	    __atomic_load_n(&hot->limit, __ATOMIC_RELAXED) + __atomic_load_n(&hot->pinned, __ATOMIC_RELAXED))
		return (int64_t)worst;
	__atomic_sub_fetch(&hot->reserved, worst, __ATOMIC_RELAXED);
	return -ENOSPC;
}

int64_t hot_force_reserve(struct hot *hot, uint64_t off, uint64_t len)
{
	uint64_t worst = ((off + len + PAGE - 1) & ~(PAGE - 1)) - (off & ~(PAGE - 1));
	__atomic_add_fetch(&hot->reserved, worst, __ATOMIC_RELAXED);
	return (int64_t)worst;
}

void hot_unreserve(struct hot *hot, uint64_t bytes)
{
	__atomic_sub_fetch(&hot->reserved, bytes, __ATOMIC_RELAXED);
}

void hot_account_locked(struct hot *hot, struct inode *in)
{
	struct stat st;
	uint64_t now;
	if (in->hot_fd < 0 || fstat(in->hot_fd, &st) < 0)
		return;
	now = (uint64_t)st.st_blocks * 512;
	if (now >= in->hot_bytes) {
		__atomic_add_fetch(&hot->used, now - in->hot_bytes, __ATOMIC_RELAXED);
		if (in->pt_opens)
			__atomic_add_fetch(&hot->pinned, now - in->hot_bytes, __ATOMIC_RELAXED);
	} else {
		__atomic_sub_fetch(&hot->used, in->hot_bytes - now, __ATOMIC_RELAXED);
		if (in->pt_opens)
			__atomic_sub_fetch(&hot->pinned, in->hot_bytes - now, __ATOMIC_RELAXED);
	}
	in->hot_bytes = now;
}

void hot_pin_locked(struct hot *hot, struct inode *in, int pin)
{
	if (pin)
		__atomic_add_fetch(&hot->pinned, in->hot_bytes, __ATOMIC_RELAXED);
	else
		__atomic_sub_fetch(&hot->pinned, in->hot_bytes, __ATOMIC_RELAXED);
}

uint64_t hot_pinned(const struct hot *hot)
{
	return __atomic_load_n(&hot->pinned, __ATOMIC_RELAXED);
}

uint64_t hot_used(const struct hot *hot)
{
	return __atomic_load_n(&hot->used, __ATOMIC_RELAXED);
}

uint64_t hot_reserved(const struct hot *hot)
{
	return __atomic_load_n(&hot->reserved, __ATOMIC_RELAXED);
}

uint64_t hot_limit(const struct hot *hot)
{
	return __atomic_load_n(&hot->limit, __ATOMIC_RELAXED);
}

void hot_set_limit(struct hot *hot, uint64_t limit)
{
	__atomic_store_n(&hot->limit, limit, __ATOMIC_RELAXED);
}

const char *hot_dir(const struct hot *hot)
{
	return hot->dir;
}

uint64_t hot_fs_avail(const struct hot *hot)
{
	struct statvfs sv;
	if (fstatvfs(hot->dirfd, &sv) < 0)
		return 0;
	return (uint64_t)sv.f_bavail * sv.f_frsize;
}
