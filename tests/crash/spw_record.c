/*
 * spw_record — an LD_PRELOAD recorder of what spillway does to its cold and
 * state directories, for the crash-state tests (tests/crash/README.md).
 *
 * Why LD_PRELOAD and not a link-time wrap (-Wl,--wrap): the recorded program
 * is the unmodified build/spillway that users run, not a relinked test
 * binary; interposing at the dynamic-symbol level catches every call into
 * libc from the daemon's own code and from any library (a --wrap catches only
 * the references of the objects on the link line, so a call made by a
 * library, or one added later in a new file, would silently go unrecorded).
 * Copies inside the kernel into a recorded file (copy_file_range, sendfile)
 * are recorded as writes of the bytes that landed, read back afterwards.
 * What it cannot see is I/O that does not go through libc's symbols:
 * io_uring (hence -o io_engine=psync) and raw syscall(2); nor the kernel's
 * own writes into a recorded file through FUSE passthrough (the test logs
 * those itself: test_crash_extents.py). The replayer checks
 * that nothing slipped past: replaying the whole log must reproduce the
 * directories the daemon left, byte for byte.
 *
 * Environment:
 *   SPW_REC_LOG=FILE        the log (appended to; O_APPEND so the test can
 *                           add its own MARK records between the daemon's)
 *   SPW_REC_ROOTS=DIR:DIR   absolute, symlink-free directories to record
 * With either unset, the shim only passes calls through.
 *
 * Log: a sequence of records, each one write(2) to the O_APPEND log, so a
 * record's byte offset orders it against every other record, including the
 * test's marks. Every mutating call runs under one mutex together with its
 * record, so the log order is an order in which the calls took effect. A
 * sync call (fsync, fdatasync, sync_file_range, syncfs, sync) notes the
 * log's size when it starts, outside the mutex it then drops: it makes
 * durable only what was recorded before it began (a write racing with the
 * sync on another thread may or may not be covered, so it is not counted).
 *
 * Record: header (little endian) then path, path2, data:
 *   u32 magic 'SPWR', u32 type, u32 path_len, u32 path2_len, u64 data_len,
 *   i64 fd, i64 a, i64 b, i64 c
 * See the REC_* types for what fd/a/b/c mean. Data is stored whole: the
 * workloads that use this are small (a few tens of MiB in all).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sendfile.h>
#include <sys/uio.h>
#include <unistd.h>

#include "../shims/interpose.h"

enum {
	REC_OPEN = 1,	/* path; fd; a = flags; b = 1 if created by this call */
	REC_CLOSE = 2,	/* fd */
	REC_WRITE = 3,	/* fd; a = offset; data */
	REC_TRUNC = 4,	/* fd (or -1 and path); a = length */
	REC_FALLOC = 5, /* fd; a = mode; b = offset; c = length */
	REC_RENAME = 6, /* path -> path2; a = renameat2 flags */
	REC_UNLINK = 7, /* path; a = 1 for a directory (rmdir) */
	REC_MKDIR = 8,	/* path */
	REC_LINK = 9,	/* path -> path2 (new name) */
	REC_SYNC = 10,	/* fd (-1: every file); a = kind; b = log size at start; c = result */
	REC_MARK = 11,	/* data: the test's note (written by the test, not here) */
	REC_UNKNOWN = 12, /* path; a call on a recorded path the shim cannot model */
};
enum { SYNC_FSYNC = 1, SYNC_FDATASYNC = 2, SYNC_RANGE = 3, SYNC_FS = 4, SYNC_ALL = 5 };

struct rec_hdr {
	uint32_t magic, type, path_len, path2_len;
	uint64_t data_len;
	int64_t fd, a, b, c;
};

#define MAGIC 0x52575053u /* "SPWR" */
#define MAX_FD 65536
#define MAX_ROOTS 16

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int log_fd = -1;
static char *roots[MAX_ROOTS];
static size_t root_len[MAX_ROOTS];
static int nroots;
/* path of each recorded fd (files and directories under a root); under mu */
static char *fd_path[MAX_FD];

static void die(const char *what)
{
	char buf[256];
	int n = snprintf(buf, sizeof(buf), "spw_record: %s: %s\n", what, strerror(errno));
	syscall(SYS_write, 2, buf, (size_t)n);
	abort();
}

__attribute__((constructor)) static void rec_init(void)
{
	const char *lp = getenv("SPW_REC_LOG"), *rp = getenv("SPW_REC_ROOTS");
	char *s, *save = NULL, *tok;
	int fd;

	if (!lp || !rp || !*lp || !*rp)
		return;
	fd = (int)syscall(SYS_openat, AT_FDCWD, lp, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC,
			  0600);
	if (fd < 0)
		die("opening SPW_REC_LOG");
	/* out of the way of the daemon's own descriptors */
	log_fd = fcntl(fd, F_DUPFD_CLOEXEC, 900);
	if (log_fd < 0)
		die("moving the log fd");
	syscall(SYS_close, fd);
	s = strdup(rp);
	for (tok = strtok_r(s, ":", &save); tok && nroots < MAX_ROOTS; tok = strtok_r(NULL, ":", &save)) {
		size_t n = strlen(tok);
		while (n > 1 && tok[n - 1] == '/')
			tok[--n] = 0;
		roots[nroots] = tok;
		root_len[nroots++] = n;
	}
}

static int active(void)
{
	return log_fd >= 0;
}

/* Normalize an absolute path in place: no "//", "/./", trailing "/"; ".."
 * resolved lexically (the recorded trees have no symlinks). */
static void normalize(char *p)
{
	char *out = p, *in = p;

	while (*in) {
		if (*in == '/') {
			while (*in == '/')
				in++;
			if (in[0] == '.' && (in[1] == '/' || !in[1])) {
				in++;
				continue;
			}
			if (in[0] == '.' && in[1] == '.' && (in[2] == '/' || !in[2])) {
				in += 2;
				while (out > p && *--out != '/')
					;
				continue;
			}
			*out++ = '/';
		} else {
			*out++ = *in++;
		}
	}
	if (out > p + 1 && out[-1] == '/')
		out--;
	if (out == p)
		*out++ = '/';
	*out = 0;
}

/* The absolute path of (dirfd, name) into buf, or 0 when it cannot be told. */
static int resolve(int dirfd, const char *name, char *buf, size_t len)
{
	char base[PATH_MAX];

	if (!name)
		return 0;
	if (name[0] == '/') {
		if (strlen(name) >= len)
			return 0;
		strcpy(buf, name);
	} else {
		if (dirfd == AT_FDCWD) {
			if (!getcwd(base, sizeof(base)))
				return 0;
		} else {
			char link[64];
			ssize_t n;
			snprintf(link, sizeof(link), "/proc/self/fd/%d", dirfd);
			n = readlink(link, base, sizeof(base) - 1);
			if (n < 0)
				return 0;
			base[n] = 0;
		}
		if ((size_t)snprintf(buf, len, "%s/%s", base, name) >= len)
			return 0;
	}
	normalize(buf);
	return 1;
}

static int under_root(const char *p)
{
	for (int i = 0; i < nroots; i++)
		if (!strncmp(p, roots[i], root_len[i]) && (p[root_len[i]] == '/' || !p[root_len[i]]))
			return 1;
	return 0;
}

/* A recorded path for (dirfd, name) in buf, or 0. */
static int tracked_at(int dirfd, const char *name, char *buf, size_t len)
{
	return active() && resolve(dirfd, name, buf, len) && under_root(buf);
}

static int tracked_fd(int fd)
{
	return active() && fd >= 0 && fd < MAX_FD && fd_path[fd];
}

/* Append one record; mu held (or the log's O_APPEND makes it atomic anyway). */
static void emit(uint32_t type, int64_t fd, int64_t a, int64_t b, int64_t c, const char *path,
		 const char *path2, const struct iovec *data, int ndata)
{
	struct rec_hdr h = {.magic = MAGIC, .type = type, .fd = fd, .a = a, .b = b, .c = c};
	struct iovec v[3 + 64];
	size_t total;
	int n = 0;

	if (ndata > 64) {
		errno = E2BIG;
		die("too many iovecs");
	}
	h.path_len = path ? (uint32_t)strlen(path) : 0;
	h.path2_len = path2 ? (uint32_t)strlen(path2) : 0;
	for (int i = 0; i < ndata; i++)
		h.data_len += data[i].iov_len;
	v[n++] = (struct iovec){&h, sizeof(h)};
	if (h.path_len)
		v[n++] = (struct iovec){(void *)path, h.path_len};
	if (h.path2_len)
		v[n++] = (struct iovec){(void *)path2, h.path2_len};
	total = sizeof(h) + h.path_len + h.path2_len + h.data_len;
	for (int i = 0; i < ndata; i++)
		if (data[i].iov_len)
			v[n++] = data[i];
	/* one writev: O_APPEND places it whole (the inode lock covers the
	 * write), so the test's marks never land inside a record */
	ssize_t w = syscall(SYS_writev, log_fd, v, n);
	if (w != (ssize_t)total) {
		if (w >= 0)
			errno = EIO;
		die("writing the log");
	}
}

static int64_t log_size(void)
{
	struct stat st;
	if (syscall(SYS_fstat, log_fd, &st) < 0)
		die("fstat of the log");
	return (int64_t)st.st_size;
}

static void set_fd(int fd, const char *p)
{
	if (fd < 0 || fd >= MAX_FD)
		return;
	free(fd_path[fd]);
	fd_path[fd] = p ? strdup(p) : NULL;
}

/* ---- open / close ---- */

REAL(int, openat, int, const char *, int, ...)
REAL(int, close, int)

static int do_openat(int dirfd, const char *name, int flags, mode_t mode)
{
	char p[PATH_MAX];
	struct stat st;
	int fd, existed;

	if (!tracked_at(dirfd, name, p, sizeof(p)))
		return get_openat()(dirfd, name, flags, mode);
	pthread_mutex_lock(&mu);
	existed = stat(p, &st) == 0;
	fd = get_openat()(dirfd, name, flags, mode);
	if (fd >= 0) {
		int e = errno;
		set_fd(fd, p);
		emit(REC_OPEN, fd, flags, (flags & O_CREAT) && !existed, 0, p, NULL, NULL, 0);
		errno = e;
	}
	pthread_mutex_unlock(&mu);
	return fd;
}

INTERPOSE_OPENS(do_openat)

int close(int fd)
{
	int r;
	if (!tracked_fd(fd))
		return get_close()(fd);
	pthread_mutex_lock(&mu);
	r = get_close()(fd);
	{
		int e = errno;
		emit(REC_CLOSE, fd, 0, 0, 0, NULL, NULL, NULL, 0);
		set_fd(fd, NULL);
		errno = e;
	}
	pthread_mutex_unlock(&mu);
	return r;
}

/* dup of a recorded fd: refused loudly (the replayer tracks fds by number). */
REAL(int, dup, int)
int dup(int fd)
{
	int r = get_dup()(fd);
	if (r >= 0 && tracked_fd(fd)) {
		pthread_mutex_lock(&mu);
		set_fd(r, fd_path[fd]);
		emit(REC_OPEN, r, O_RDONLY, 0, 0, fd_path[fd], NULL, NULL, 0);
		pthread_mutex_unlock(&mu);
	}
	return r;
}

/* ---- data ---- */

REAL(ssize_t, write, int, const void *, size_t)
REAL(ssize_t, pwrite, int, const void *, size_t, off_t)
REAL(ssize_t, pwrite64, int, const void *, size_t, off_t)
REAL(ssize_t, writev, int, const struct iovec *, int)
REAL(ssize_t, pwritev, int, const struct iovec *, int, off_t)
REAL(ssize_t, pwritev64, int, const struct iovec *, int, off_t)
REAL(ssize_t, pwritev2, int, const struct iovec *, int, off_t, int)
REAL(ssize_t, pwritev64v2, int, const struct iovec *, int, off_t, int)

/* Record n bytes of iov written at off; mu held. */
static void emit_write(int fd, const struct iovec *iov, int cnt, ssize_t n, off_t off)
{
	struct iovec v[64];
	int k = 0;
	size_t left = (size_t)n;

	for (int i = 0; i < cnt && left && k < 64; i++) {
		size_t l = iov[i].iov_len < left ? iov[i].iov_len : left;
		v[k++] = (struct iovec){iov[i].iov_base, l};
		left -= l;
	}
	if (left) {
		errno = E2BIG;
		die("writev with more than 64 parts");
	}
	emit(REC_WRITE, fd, off, 0, 0, NULL, NULL, v, k);
}

/* A write at the fd's own offset: its place is told afterwards (lseek - n). */
static ssize_t wr_cur(int fd, const struct iovec *iov, int cnt, int vec)
{
	ssize_t n;
	if (!tracked_fd(fd))
		return vec ? get_writev()(fd, iov, cnt) : get_write()(fd, iov[0].iov_base, iov[0].iov_len);
	pthread_mutex_lock(&mu);
	n = vec ? get_writev()(fd, iov, cnt) : get_write()(fd, iov[0].iov_base, iov[0].iov_len);
	if (n > 0) {
		int e = errno;
		off_t end = lseek(fd, 0, SEEK_CUR);
		emit_write(fd, iov, cnt, n, end - n);
		errno = e;
	}
	pthread_mutex_unlock(&mu);
	return n;
}

static ssize_t wr_at(int fd, const struct iovec *iov, int cnt, off_t off, int flags, int kind)
{
	ssize_t n;
#define CALL()                                                                                    \
	(kind == 0 ? get_pwrite()(fd, iov[0].iov_base, iov[0].iov_len, off)                      \
	 : kind == 1 ? get_pwrite64()(fd, iov[0].iov_base, iov[0].iov_len, off)                   \
	 : kind == 2 ? get_pwritev()(fd, iov, cnt, off)                                          \
	 : kind == 3 ? get_pwritev64()(fd, iov, cnt, off)                                        \
	 : kind == 4 ? get_pwritev2()(fd, iov, cnt, off, flags)                                  \
		     : get_pwritev64v2()(fd, iov, cnt, off, flags))
	if (!tracked_fd(fd))
		return CALL();
	if (kind >= 4 && (off == -1 || (flags & (RWF_APPEND | RWF_DSYNC | RWF_SYNC)))) {
		/* not modelled: the replayer fails on it */
		pthread_mutex_lock(&mu);
		emit(REC_UNKNOWN, fd, flags, 0, 0, fd_path[fd], "pwritev2 flags", NULL, 0);
		pthread_mutex_unlock(&mu);
	}
	pthread_mutex_lock(&mu);
	n = CALL();
	if (n > 0) {
		int e = errno;
		emit_write(fd, iov, cnt, n, off);
		errno = e;
	}
	pthread_mutex_unlock(&mu);
	return n;
#undef CALL
}

ssize_t write(int fd, const void *buf, size_t len)
{
	struct iovec v = {(void *)buf, len};
	return wr_cur(fd, &v, 1, 0);
}
ssize_t writev(int fd, const struct iovec *iov, int cnt)
{
	return wr_cur(fd, iov, cnt, 1);
}
ssize_t pwrite(int fd, const void *buf, size_t len, off_t off)
{
	struct iovec v = {(void *)buf, len};
	return wr_at(fd, &v, 1, off, 0, 0);
}
ssize_t pwrite64(int fd, const void *buf, size_t len, off_t off)
{
	struct iovec v = {(void *)buf, len};
	return wr_at(fd, &v, 1, off, 0, 1);
}
ssize_t pwritev(int fd, const struct iovec *iov, int cnt, off_t off)
{
	return wr_at(fd, iov, cnt, off, 0, 2);
}
ssize_t pwritev64(int fd, const struct iovec *iov, int cnt, off_t off)
{
	return wr_at(fd, iov, cnt, off, 0, 3);
}
ssize_t pwritev2(int fd, const struct iovec *iov, int cnt, off_t off, int flags)
{
	return wr_at(fd, iov, cnt, off, flags, 4);
}
ssize_t pwritev64v2(int fd, const struct iovec *iov, int cnt, off_t off, int flags)
{
	return wr_at(fd, iov, cnt, off, flags, 5);
}

/* Copies into a recorded file inside the kernel (tier/extent's move of a
 * stream into its extent: copy_file_range, sendfile across filesystems):
 * recorded as a write of the bytes that landed, read back from the
 * destination (the recorded fds of the daemon are O_RDWR; a write-only one
 * is a call the replayer cannot model). */
REAL(ssize_t, copy_file_range, int, loff_t *, int, loff_t *, size_t, unsigned)
REAL(ssize_t, sendfile, int, int, off_t *, size_t)
REAL(ssize_t, sendfile64, int, int, off_t *, size_t)

/* n bytes landed at off of the recorded fd; mu held. */
static void emit_copied(int fd, off_t off, ssize_t n)
{
	struct iovec v;
	char *buf = malloc((size_t)n ? (size_t)n : 1);
	ssize_t got = buf ? pread(fd, buf, (size_t)n, off) : -1;

	if (got != n) {
		emit(REC_UNKNOWN, fd, 0, 0, 0, fd_path[fd], "copy into a file it cannot read back",
		     NULL, 0);
		free(buf);
		return;
	}
	v = (struct iovec){buf, (size_t)n};
	emit(REC_WRITE, fd, off, 0, 0, NULL, NULL, &v, 1);
	free(buf);
}

ssize_t copy_file_range(int in, loff_t *in_off, int out, loff_t *out_off, size_t len,
			unsigned flags)
{
	ssize_t n;
	off_t at;

	if (!tracked_fd(out))
		return get_copy_file_range()(in, in_off, out, out_off, len, flags);
	pthread_mutex_lock(&mu);
	at = out_off ? *out_off : lseek(out, 0, SEEK_CUR);
	n = get_copy_file_range()(in, in_off, out, out_off, len, flags);
	if (n > 0) {
		int e = errno;
		emit_copied(out, at, n);
		errno = e;
	}
	pthread_mutex_unlock(&mu);
	return n;
}

static ssize_t do_sendfile(int out, int in, off_t *off, size_t len, int is64)
{
	ssize_t n;
	off_t at;
#define CALL() (is64 ? get_sendfile64()(out, in, off, len) : get_sendfile()(out, in, off, len))
	if (!tracked_fd(out))
		return CALL();
	pthread_mutex_lock(&mu);
	at = lseek(out, 0, SEEK_CUR); /* sendfile writes at out's own offset */
	n = CALL();
	if (n > 0) {
		int e = errno;
		emit_copied(out, at, n);
		errno = e;
	}
	pthread_mutex_unlock(&mu);
	return n;
#undef CALL
}
ssize_t sendfile(int out, int in, off_t *off, size_t len)
{
	return do_sendfile(out, in, off, len, 0);
}
ssize_t sendfile64(int out, int in, off_t *off, size_t len)
{
	return do_sendfile(out, in, off, len, 1);
}

REAL(int, ftruncate, int, off_t)
REAL(int, ftruncate64, int, off_t)
REAL(int, truncate, const char *, off_t)
REAL(int, truncate64, const char *, off_t)

static int ftrunc(int fd, off_t len, int is64)
{
	int r;
	if (!tracked_fd(fd))
		return is64 ? get_ftruncate64()(fd, len) : get_ftruncate()(fd, len);
	pthread_mutex_lock(&mu);
	r = is64 ? get_ftruncate64()(fd, len) : get_ftruncate()(fd, len);
	if (r == 0)
		emit(REC_TRUNC, fd, len, 0, 0, NULL, NULL, NULL, 0);
	pthread_mutex_unlock(&mu);
	return r;
}
int ftruncate(int fd, off_t len)
{
	return ftrunc(fd, len, 0);
}
int ftruncate64(int fd, off_t len)
{
	return ftrunc(fd, len, 1);
}
static int ptrunc(const char *name, off_t len, int is64)
{
	char p[PATH_MAX];
	int r;
	if (!tracked_at(AT_FDCWD, name, p, sizeof(p)))
		return is64 ? get_truncate64()(name, len) : get_truncate()(name, len);
	pthread_mutex_lock(&mu);
	r = is64 ? get_truncate64()(name, len) : get_truncate()(name, len);
	if (r == 0)
		emit(REC_TRUNC, -1, len, 0, 0, p, NULL, NULL, 0);
	pthread_mutex_unlock(&mu);
	return r;
}
int truncate(const char *name, off_t len)
{
	return ptrunc(name, len, 0);
}
int truncate64(const char *name, off_t len)
{
	return ptrunc(name, len, 1);
}

REAL(int, fallocate, int, int, off_t, off_t)
REAL(int, fallocate64, int, int, off_t, off_t)
REAL(int, posix_fallocate, int, off_t, off_t)
REAL(int, posix_fallocate64, int, off_t, off_t)

static int falloc(int fd, int mode, off_t off, off_t len, int kind)
{
	int r;
#define CALL()                                                                  \
	(kind == 0 ? get_fallocate()(fd, mode, off, len)                        \
	 : kind == 1 ? get_fallocate64()(fd, mode, off, len)                    \
	 : kind == 2 ? get_posix_fallocate()(fd, off, len)                      \
		     : get_posix_fallocate64()(fd, off, len))
	if (!tracked_fd(fd))
		return CALL();
	pthread_mutex_lock(&mu);
	r = CALL();
	if ((kind < 2 && r == 0) || (kind >= 2 && r == 0))
		emit(REC_FALLOC, fd, mode, off, len, NULL, NULL, NULL, 0);
	pthread_mutex_unlock(&mu);
	return r;
#undef CALL
}
int fallocate(int fd, int mode, off_t off, off_t len)
{
	return falloc(fd, mode, off, len, 0);
}
int fallocate64(int fd, int mode, off_t off, off_t len)
{
	return falloc(fd, mode, off, len, 1);
}
int posix_fallocate(int fd, off_t off, off_t len)
{
	return falloc(fd, 0, off, len, 2);
}
int posix_fallocate64(int fd, off_t off, off_t len)
{
	return falloc(fd, 0, off, len, 3);
}

/* ---- namespace ---- */

REAL(int, renameat2, int, const char *, int, const char *, unsigned)
REAL(int, renameat, int, const char *, int, const char *)
REAL(int, rename, const char *, const char *)

static int do_rename(int ofd, const char *o, int nfd, const char *n, unsigned flags, int kind)
{
	char po[PATH_MAX], pn[PATH_MAX];
	int to = tracked_at(ofd, o, po, sizeof(po)), tn = tracked_at(nfd, n, pn, sizeof(pn)), r;
#define CALL()                                                                  \
	(kind == 0 ? get_rename()(o, n)                                         \
	 : kind == 1 ? get_renameat()(ofd, o, nfd, n)                           \
		     : get_renameat2()(ofd, o, nfd, n, flags))
	if (!to && !tn)
		return CALL();
	pthread_mutex_lock(&mu);
	r = CALL();
	if (r == 0) {
		int e = errno;
		if (to && tn)
			emit(REC_RENAME, -1, flags, 0, 0, po, pn, NULL, 0);
		else
			emit(REC_UNKNOWN, -1, 0, 0, 0, to ? po : pn, "rename across the roots' edge",
			     NULL, 0);
		errno = e;
	}
	pthread_mutex_unlock(&mu);
	return r;
#undef CALL
}
int rename(const char *o, const char *n)
{
	return do_rename(AT_FDCWD, o, AT_FDCWD, n, 0, 0);
}
int renameat(int ofd, const char *o, int nfd, const char *n)
{
	return do_rename(ofd, o, nfd, n, 0, 1);
}
int renameat2(int ofd, const char *o, int nfd, const char *n, unsigned flags)
{
	return do_rename(ofd, o, nfd, n, flags, 2);
}

REAL(int, unlinkat, int, const char *, int)
REAL(int, unlink, const char *)
REAL(int, rmdir, const char *)

static int do_unlink(int dirfd, const char *name, int flags, int kind)
{
	char p[PATH_MAX];
	int r;
#define CALL()                                                                  \
	(kind == 0 ? get_unlinkat()(dirfd, name, flags)                         \
	 : kind == 1 ? get_unlink()(name)                                       \
		     : get_rmdir()(name))
	if (!tracked_at(dirfd, name, p, sizeof(p)))
		return CALL();
	pthread_mutex_lock(&mu);
	r = CALL();
	if (r == 0) {
		int e = errno;
		emit(REC_UNLINK, -1, kind == 2 || (flags & AT_REMOVEDIR), 0, 0, p, NULL, NULL, 0);
		errno = e;
	}
	pthread_mutex_unlock(&mu);
	return r;
#undef CALL
}
int unlinkat(int dirfd, const char *name, int flags)
{
	return do_unlink(dirfd, name, flags, 0);
}
int unlink(const char *name)
{
	return do_unlink(AT_FDCWD, name, 0, 1);
}
int rmdir(const char *name)
{
	return do_unlink(AT_FDCWD, name, AT_REMOVEDIR, 2);
}

REAL(int, mkdirat, int, const char *, mode_t)
REAL(int, mkdir, const char *, mode_t)

static int do_mkdir(int dirfd, const char *name, mode_t mode, int kind)
{
	char p[PATH_MAX];
	int r;
	if (!tracked_at(dirfd, name, p, sizeof(p)))
		return kind ? get_mkdir()(name, mode) : get_mkdirat()(dirfd, name, mode);
	pthread_mutex_lock(&mu);
	r = kind ? get_mkdir()(name, mode) : get_mkdirat()(dirfd, name, mode);
	if (r == 0) {
		int e = errno;
		emit(REC_MKDIR, -1, mode, 0, 0, p, NULL, NULL, 0);
		errno = e;
	}
	pthread_mutex_unlock(&mu);
	return r;
}
int mkdirat(int dirfd, const char *name, mode_t mode)
{
	return do_mkdir(dirfd, name, mode, 0);
}
int mkdir(const char *name, mode_t mode)
{
	return do_mkdir(AT_FDCWD, name, mode, 1);
}

REAL(int, linkat, int, const char *, int, const char *, int)
REAL(int, link, const char *, const char *)
REAL(int, symlinkat, const char *, int, const char *)
REAL(int, symlink, const char *, const char *)

static int do_link(int ofd, const char *o, int nfd, const char *n, int flags, int kind)
{
	char po[PATH_MAX], pn[PATH_MAX];
	int tn = tracked_at(nfd, n, pn, sizeof(pn)), r;
#define CALL() (kind ? get_link()(o, n) : get_linkat()(ofd, o, nfd, n, flags))
	if (!tn)
		return CALL();
	pthread_mutex_lock(&mu);
	r = CALL();
	if (r == 0) {
		int e = errno;
		if (tracked_at(ofd, o, po, sizeof(po)))
			emit(REC_LINK, -1, 0, 0, 0, po, pn, NULL, 0);
		else
			emit(REC_UNKNOWN, -1, 0, 0, 0, pn, "link from outside the roots", NULL, 0);
		errno = e;
	}
	pthread_mutex_unlock(&mu);
	return r;
#undef CALL
}
int linkat(int ofd, const char *o, int nfd, const char *n, int flags)
{
	return do_link(ofd, o, nfd, n, flags, 0);
}
int link(const char *o, const char *n)
{
	return do_link(AT_FDCWD, o, AT_FDCWD, n, 0, 1);
}
static int do_symlink(const char *target, int nfd, const char *n, int kind)
{
	char pn[PATH_MAX];
	int r = kind ? get_symlink()(target, n) : get_symlinkat()(target, nfd, n);
	if (r == 0 && tracked_at(nfd, n, pn, sizeof(pn))) {
		pthread_mutex_lock(&mu);
		emit(REC_UNKNOWN, -1, 0, 0, 0, pn, "symlink", NULL, 0);
		pthread_mutex_unlock(&mu);
	}
	return r;
}
int symlinkat(const char *target, int nfd, const char *n)
{
	return do_symlink(target, nfd, n, 0);
}
int symlink(const char *target, const char *n)
{
	return do_symlink(target, AT_FDCWD, n, 1);
}

/* ---- sync points ---- */

REAL(int, fsync, int)
REAL(int, fdatasync, int)
REAL(int, sync_file_range, int, off_t, off_t, unsigned)
REAL(int, syncfs, int)
REAL(void, sync, void)

/* The sync runs outside mu; it covers what was logged before it began. */
static int do_sync(int fd, int kind, off_t off, off_t len, unsigned flags)
{
	int64_t start;
	int r;
#define CALL()                                                                  \
	(kind == SYNC_FSYNC ? get_fsync()(fd)                                   \
	 : kind == SYNC_FDATASYNC ? get_fdatasync()(fd)                         \
	 : kind == SYNC_RANGE ? get_sync_file_range()(fd, off, len, flags)      \
			      : get_syncfs()(fd))
	if (!tracked_fd(fd))
		return CALL();
	pthread_mutex_lock(&mu);
	start = log_size();
	pthread_mutex_unlock(&mu);
	r = CALL();
	{
		int e = errno;
		pthread_mutex_lock(&mu);
		/* sync_file_range: its range in the path2 slot would be odd; kind
		 * tells, and it is recorded as a sync of the whole file only when
		 * it waits (WAIT_BEFORE|WRITE|WAIT_AFTER) */
		emit(REC_SYNC, fd, kind == SYNC_RANGE && (flags & 7) != 7 ? 0 : kind, start,
		     r < 0 ? -e : 0, NULL, NULL, NULL, 0);
		pthread_mutex_unlock(&mu);
		errno = e;
	}
	return r;
#undef CALL
}
int fsync(int fd)
{
	return do_sync(fd, SYNC_FSYNC, 0, 0, 0);
}
int fdatasync(int fd)
{
	return do_sync(fd, SYNC_FDATASYNC, 0, 0, 0);
}
int sync_file_range(int fd, off_t off, off_t len, unsigned flags)
{
	return do_sync(fd, SYNC_RANGE, off, len, flags);
}
int syncfs(int fd)
{
	return do_sync(fd, SYNC_FS, 0, 0, 0);
}
void sync(void)
{
	int64_t start = 0;
	if (active()) {
		pthread_mutex_lock(&mu);
		start = log_size();
		pthread_mutex_unlock(&mu);
	}
	get_sync()();
	if (active()) {
		pthread_mutex_lock(&mu);
		emit(REC_SYNC, -1, SYNC_ALL, start, 0, NULL, NULL, NULL, 0);
		pthread_mutex_unlock(&mu);
	}
}
