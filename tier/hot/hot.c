#include "tier/hot/hot.h"

#include "common/lockwait.h"
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
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/vfs.h>
#include <linux/magic.h>
#include <unistd.h>

#define PAGE 4096ULL

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

/* ---- whose directory it is ---- */

enum { MK_NONE, MK_OLD, MK_FS, MK_VOLATILE }; /* marker kinds; MK_OLD names no one */
#define MK_HEAD "spillway hot_dir\n"
#define MK_HEAD_LEN 25 /* MK_HEAD plus "created\n" or "adopted\n" */
#define LOCK_HEAD "spillway hot_dir lock"

struct marker {
	int kind;
	int created;
	uint8_t id[16];
};

static void hex16(const uint8_t id[16], char out[33])
{
	for (int i = 0; i < 16; i++)
		snprintf(out + 2 * i, 3, "%02x", id[i]);
}

static int marker_parse(const char *b, struct marker *m)
{
	const char *p = b + MK_HEAD_LEN;

	memset(m, 0, sizeof(*m));
	if (!strncmp(b, MK_HEAD "created\n", MK_HEAD_LEN))
		m->created = 1;
	else if (strncmp(b, MK_HEAD "adopted\n", MK_HEAD_LEN))
		return -1;
	if (!*p) {
		m->kind = MK_OLD;
		return 0;
	}
	if (!strncmp(p, "filesystem ", 11)) {
		m->kind = MK_FS;
		p += 11;
	} else if (!strncmp(p, "volatile ", 9)) {
		m->kind = MK_VOLATILE;
		p += 9;
	} else
		return -1;
	for (int i = 0; i < 32; i++) {
		char c = p[i];
		int v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
		if (v < 0)
			return -1;
		m->id[i / 2] = (uint8_t)(m->id[i / 2] << 4 | v);
	}
	return strcmp(p + 32, "\n") ? -1 : 0;
}

/* Read name in dirfd (a regular file, not followed) into buf: its length,
 * -ENOENT, -EINVAL (not a regular file, or longer than buf holds), -errno. */
static int read_small(int dirfd, const char *name, char *buf, size_t len)
{
	int fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC), ret;
	struct stat st;
	ssize_t n;

	if (fd < 0)
		return errno == ELOOP ? -EINVAL : -errno;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || (size_t)st.st_size >= len) {
		close(fd);
		return -EINVAL;
	}
	n = read(fd, buf, len - 1);
	ret = n < 0 ? -errno : (int)n;
	buf[n < 0 ? 0 : n] = 0;
	close(fd);
	return ret;
}

/* The marker in dirfd: MK_NONE, its kind, or -EINVAL when a file of that
 * name is not a marker. */
static int marker_read(int dirfd, struct marker *m)
{
	char buf[128];
	int n = read_small(dirfd, HOT_MARKER, buf, sizeof(buf));

	memset(m, 0, sizeof(*m));
	if (n == -ENOENT)
		return MK_NONE;
	if (n < 0 || marker_parse(buf, m) < 0)
		return -EINVAL;
	return m->kind;
}

/* A .lock spillway wrote: empty (an older spillway's, or one that died before
 * writing it) or headed LOCK_HEAD: 1; 0 not; -ENOENT gone meanwhile. */
static int lock_is_ours(int dirfd)
{
	char buf[4800];
	int n = read_small(dirfd, ".lock", buf, sizeof(buf));

	if (n == -ENOENT)
		return n;
	return n == 0 || (n > 0 && !strncmp(buf, LOCK_HEAD "\n", sizeof(LOCK_HEAD)));
}

#define WHY_NOT_OURS                                                                               \
	"it holds files and is not a spillway hot_dir (no " HOT_MARKER " marker): name an "      \
	"empty or new directory"
#define WHY_BAD_MARKER                                                                             \
	"its " HOT_MARKER " is not a spillway marker (a file of someone else's?): name an empty " \
	"or new directory"
#define WHY_FOREIGN                                                                                \
	"it holds a file spillway did not make (not a hot file, its marker or its .lock): name "  \
	"an empty or new directory"
#define WHY_OTHER_FS                                                                               \
	"it is the hot_dir of another spillway filesystem (its " HOT_MARKER " names another "     \
	"uuid): name another directory"
#define WHY_UNKNOWN                                                                                \
	"it holds hot files of an older spillway that this filesystem's index does not know: "    \
	"remove them or name another directory"

/* Can every entry of dirfd be accounted for? The marker (*m), spillway's
 * .lock (*lock set), hot files (counted in *nhot; with an older marker only
 * those `own` knows, when own is given). 0, or -errno with *why. */
static int dir_account(int dirfd, const struct hot_owner *own, struct marker *m, int *lock,
		       uint64_t *nhot, const char **why)
{
	int fd, ret = 0, kind = marker_read(dirfd, m);
	DIR *d;
	struct dirent *de;

	*lock = 0;
	*nhot = 0;
	if (kind < 0) {
		*why = WHY_BAD_MARKER;
		return -ENOTEMPTY;
	}
	if ((fd = dup(dirfd)) < 0 || !(d = fdopendir(fd))) {
		ret = -errno;
		if (fd >= 0)
			close(fd);
		*why = "cannot list it";
		return ret;
	}
	rewinddir(d); /* the dup shares dirfd's offset */
	while ((de = readdir(d)) && !ret) {
		struct stat st;
		int r;
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..") ||
		    !strcmp(de->d_name, HOT_MARKER))
			continue;
		/* a daemon finishing its unmount removes hot files and its lock
		 * while this looks (without the directory's flock: hot_dir_check):
		 * what is gone does not count */
		if (kind == MK_NONE) {
			*why = WHY_NOT_OURS;
			ret = -ENOTEMPTY;
		} else if (!strcmp(de->d_name, ".lock")) {
			if ((r = lock_is_ours(dirfd)) == -ENOENT)
				continue;
			*lock = 1;
			if (!r) {
				*why = WHY_FOREIGN;
				ret = -ENOTEMPTY;
			}
		} else if (is_hot_name(de->d_name) &&
			   fstatat(dirfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 &&
			   errno == ENOENT) {
			continue;
		} else if (!is_hot_name(de->d_name) ||
			   fstatat(dirfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
			   !S_ISREG(st.st_mode)) {
			*why = WHY_FOREIGN;
			ret = -ENOTEMPTY;
		} else if (kind == MK_OLD && own &&
			   (!own->known || !own->known(own->arg, strtoull(de->d_name, NULL, 16)))) {
			*why = WHY_UNKNOWN;
			ret = -ENOTEMPTY;
		} else
			(*nhot)++;
	}
	closedir(d);
	return ret;
}

int hot_dir_check(const char *dir, const char **why)
{
	struct marker m;
	uint64_t nhot;
	int fd, lock, ret;

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
	ret = dir_account(fd, NULL, &m, &lock, &nhot, why);
	close(fd);
	return ret;
}

/* Write the marker: created only in an empty directory (O_EXCL); `replace`
 * rewrites the third line of one proven spillway's, in place (its first two
 * lines stay what they were: a torn rewrite leaves an older spillway's
 * marker). own NULL: an older spillway's two lines. */
static int marker_write(int dirfd, int created, const uint8_t *id, int persistent, int replace)
{
	char txt[128], hex[33];
	int fd, n = snprintf(txt, sizeof(txt), MK_HEAD "%s\n", created ? "created" : "adopted");
	int ret = 0;

	if (id) {
		hex16(id, hex);
		n += snprintf(txt + n, sizeof(txt) - (size_t)n, "%s %s\n",
			      persistent ? "filesystem" : "volatile", hex);
	}
	fd = openat(dirfd, HOT_MARKER,
		    replace ? O_WRONLY | O_NOFOLLOW | O_CLOEXEC
			    : O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
		    0600);
	if (fd < 0)
		return -errno;
	if (replace && ftruncate(fd, MK_HEAD_LEN) < 0)
		ret = -errno;
	else if (replace && pwrite(fd, txt + MK_HEAD_LEN, (size_t)n - MK_HEAD_LEN, MK_HEAD_LEN) !=
				n - MK_HEAD_LEN)
		ret = -EIO;
	else if (!replace && write(fd, txt, (size_t)n) != n)
		ret = -EIO;
	close(fd);
	return ret;
}

int hot_dir_make(const char *dir)
{
	int fd, ret;

	if (mkdir(dir, 0700) < 0)
		return -errno;
	fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	ret = fd < 0 ? -errno : marker_write(fd, 1, NULL, 0, 0);
	if (fd >= 0)
		close(fd);
	if (ret < 0)
		rmdir(dir);
	return ret;
}

void hot_dir_unmake(const char *dir)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC), lock;
	struct marker m;
	uint64_t nhot;
	const char *why;

	if (fd < 0)
		return;
	/* only the made marker (no lock, no hot file): nothing else in it */
	if (dir_account(fd, NULL, &m, &lock, &nhot, &why) == 0 && m.kind != MK_NONE && !lock &&
	    !nhot) {
		unlinkat(fd, HOT_MARKER, 0);
		rmdir(dir);
	}
	close(fd);
}

/* An existing .lock of a directory proven spillway's, with the directory
 * flocked (claim): 0 taken (a daemon that died left it), 1 it was held by a
 * daemon finishing its unmount, which is gone now (look again), -EBUSY. The
 * directory's flock is let go while waiting: the daemon before needs it to
 * clean up. */
static int lock_existing(struct hot *hot)
{
	char what[4200];
	int ret;

	hot->lockfd = openat(hot->dirfd, ".lock", O_RDWR | O_NOFOLLOW | O_CLOEXEC);
	if (hot->lockfd < 0)
		return -errno;
	if (flock(hot->lockfd, LOCK_EX | LOCK_NB) == 0)
		return 0;
	flock(hot->dirfd, LOCK_UN);
	snprintf(what, sizeof(what), "hot_dir '%s'", hot->dir);
	ret = lockwait_take(hot->lockfd, what);
	return ret < 0 ? ret : 1;
}

/* One attempt of hot_new at claiming hot->dir: 0, 1 (the directory changed
 * under a daemon finishing its unmount: try again), -errno with *why. */
static int claim(struct hot *hot, const struct hot_owner *own, const char **why)
{
	struct marker m;
	struct statfs sf;
	struct stat st;
	uint64_t nhot;
	int ret, made = 0, lock;

	if (mkdir(hot->dir, 0700) == 0)
		made = 1;
	else if (errno != EEXIST) {
		*why = "cannot create it";
		return -errno;
	}
	/* O_NOFOLLOW: in a shared /dev/shm another user could plant a symlink
	 * under the (predictable) default name and make us clean out its target */
	hot->dirfd = open(hot->dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (hot->dirfd < 0) {
		if (errno == ENOENT)
			return 1; /* removed by the daemon before */
		*why = errno == ELOOP || errno == ENOTDIR ? "it is a symbolic link or not a directory"
							  : "cannot open it";
		return -errno;
	}
	if (fstat(hot->dirfd, &st) < 0 || st.st_uid != geteuid()) {
		*why = "it exists and belongs to another user";
		return -EPERM;
	}
	/* Only a directory spillway can prove is its own is ever changed: one
	 * it made, one with its marker and nothing it cannot account for, or an
	 * empty one it is given (which the marker then claims). Anything else
	 * is refused untouched. The directory's flock keeps a daemon that is
	 * cleaning up at its unmount (hot_free) and this look apart. */
	if (flock(hot->dirfd, LOCK_EX) < 0) {
		*why = "cannot lock it";
		return -errno;
	}
	if ((ret = dir_account(hot->dirfd, own, &m, &lock, &nhot, why)) < 0)
		return ret;
	if (lock && (ret = lock_existing(hot)) != 0) {
		if (ret < 0)
			*why = "another spillway daemon is using it";
		return ret;
	}
	if (m.kind == MK_FS && (!own->persistent || memcmp(m.id, own->id, 16))) {
		*why = WHY_OTHER_FS;
		return -ENOTEMPTY;
	}
	if (m.kind == MK_NONE)
		ret = marker_write(hot->dirfd, made, own->id, own->persistent, 0);
	else if (m.kind != MK_FS || memcmp(m.id, own->id, 16)) {
		/* an older spillway's, a volatile mount's: this filesystem's now;
		 * a dead volatile mount's hot files are nobody's data */
		if (m.kind == MK_VOLATILE && nhot) {
			log_info("hot_dir %s: removing %llu hot files of an earlier volatile mount",
				 hot->dir, (unsigned long long)nhot);
			scan_dir(hot, NULL, NULL, why);
		}
		ret = marker_write(hot->dirfd, m.created, own->id, own->persistent, 1);
	}
	if (ret == -ENOENT)
		return 1; /* removed by the daemon before (dirfd is a deleted directory) */
	if (ret < 0) {
		*why = "cannot write its " HOT_MARKER " marker";
		return ret;
	}
	hot->created = m.kind == MK_NONE ? made : m.created;
	if ((st.st_mode & 0777) != 0700 && fchmod(hot->dirfd, 0700) < 0) {
		*why = "cannot make it mode 0700";
		return -errno;
	}
	if (fstatfs(hot->dirfd, &sf) == 0 && sf.f_type != TMPFS_MAGIC)
		log_warn("hot_dir %s is not on tmpfs: the hot tier will run at that "
			 "filesystem's speed, not RAM's", hot->dir);
	if (!lock) {
		hot->lockfd = openat(hot->dirfd, ".lock",
				     O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
		if (hot->lockfd < 0 && errno == ENOENT)
			return 1;
		if (hot->lockfd < 0) {
			*why = "cannot create its lock file";
			return -errno;
		}
		if (flock(hot->lockfd, LOCK_EX | LOCK_NB) < 0) {
			*why = "another spillway daemon is using it";
			return -EBUSY;
		}
	}
	hot->locked = 1;
	{
		char head[80], hex[33];
		hex16(own->id, hex);
		snprintf(head, sizeof(head), LOCK_HEAD "\nid %s\n", hex);
		lockwait_stamp(hot->lockfd, head, own->mountpoint);
	}
	flock(hot->dirfd, LOCK_UN);
	return 0;
}

int hot_new(const char *dir, uint64_t limit, const struct hot_owner *own, struct hot **out,
	    const char **why)
{
	struct hot *hot = calloc(1, sizeof(*hot));
	struct hot_owner volatile_owner = {.persistent = 0};
	int ret, tries = 0;

	*why = NULL;
	if (!hot)
		return -ENOMEM;
	hot->dirfd = hot->lockfd = -1;
	hot->limit = limit;
	pthread_mutex_init(&hot->lock, NULL);
	if (!own) {
		uint8_t *id = volatile_owner.id;
		if (getrandom(id, sizeof(volatile_owner.id), 0) != sizeof(volatile_owner.id))
			memset(id, 0x5a, sizeof(volatile_owner.id));
		own = &volatile_owner;
	}
	if (!(hot->dir = strdup(dir))) {
		ret = -ENOMEM;
		goto fail;
	}
	if ((ret = hot_dir_check(dir, why)) < 0)
		goto fail;
	while ((ret = claim(hot, own, why)) == 1 && ++tries < 100) {
		if (hot->lockfd >= 0)
			close(hot->lockfd);
		if (hot->dirfd >= 0)
			close(hot->dirfd);
		hot->lockfd = hot->dirfd = -1;
		*why = NULL;
	}
	if (ret == 1) {
		ret = -EBUSY;
		*why = "another spillway daemon keeps changing it";
	}
	if (ret < 0)
		goto fail;
	/* persistent: recovery decides file by file (recover.c); else a fresh start */
	if (!own->persistent && (ret = scan_dir(hot, NULL, NULL, why)) < 0)
		goto fail;
	*out = hot;
	return 0;
fail:
	hot_free(hot);
	return ret;
}

void hot_free(struct hot *hot)
{
	if (!hot)
		return;
	/* only the instance holding the lock may remove what it made, and only
	 * while it holds it: the marker (unless kept hot files need it), then
	 * the lock, then the directory if spillway made it. A daemon waiting
	 * for the lock finds the lock gone and looks again. */
	if (hot->locked) {
		struct marker m;
		uint64_t nhot;
		const char *why;
		int lock, keep;
		flock(hot->dirfd, LOCK_EX);
		keep = dir_account(hot->dirfd, NULL, &m, &lock, &nhot, &why) < 0 || nhot;
		unlinkat(hot->dirfd, ".lock", 0); /* never a state with a lock and no marker */
		if (!keep)
			unlinkat(hot->dirfd, HOT_MARKER, 0);
		if (hot->created)
			rmdir(hot->dir); /* only succeeds when empty (kept files stay) */
	}
	if (hot->lockfd >= 0)
		close(hot->lockfd);
	if (hot->dirfd >= 0)
		close(hot->dirfd); /* lets go of its flock */
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
