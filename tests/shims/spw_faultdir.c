/*
 * spw_faultdir — an LD_PRELOAD shim that makes one directory fail like a dying
 * or full disk, switched on and off while the program runs, for the cold-tier
 * fault tests (tests/integration/test_cold_faults.py).
 *
 * Why a shim: this kernel has no device-mapper (no dm-error, dm-flakey), and
 * libfiu (test_faults_fiu.py) fails calls by name for the whole process, not
 * for one of the daemon's cold directories. The shim fails the calls on the
 * files under one directory only, so the other cold directories keep working.
 * Like libfiu it sees only calls through libc's symbols: the daemon runs with
 * -o io_engine=psync (io_uring's writes do not go through libc). With
 * io_uring, segment creation (openat) and renames still fail.
 *
 * Environment:
 *   SPW_FAULT_DIR=DIR   absolute, canonical (symlink-free) directory
 *   SPW_FAULT_CTL=FILE  read at every call on DIR: missing or empty = no fault;
 *                       "EIO" or "ENOSPC" (first word) = the calls that change
 *                       DIR fail with that errno; then, as further words:
 *                       "rw"   reads fail too (read, pread, preadv)
 *                       "data" only data writes and syncs fail: files are
 *                              still created and renamed (a failure in the
 *                              middle of a segment, not at its creation)
 * What fails while on: creating a file (openat with O_CREAT), renames into or
 * inside DIR, mkdir (all three not with "data"), write, pwrite, pwritev,
 * writev, fallocate, ftruncate, fsync, fdatasync. unlink and close never
 * fail (a disk that fails writes still lets the daemon clean up what it has,
 * as a real one mostly does).
 * With either variable unset the shim passes every call through.
 *
 * A file is "under DIR" when opened by an absolute path below (or equal to)
 * DIR, or by a name relative to a directory fd that is; the shim keeps one
 * flag per fd (set at open, cleared at close).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

#include "interpose.h"

#define MAX_FD 65536

static const char *dir, *ctl;
static size_t dir_len;
static unsigned char under[MAX_FD]; /* 1: the fd is a file or directory under dir */

__attribute__((constructor)) static void fault_init(void)
{
	const char *d = getenv("SPW_FAULT_DIR"), *c = getenv("SPW_FAULT_CTL");

	if (!d || !c || d[0] != '/' || !c[0])
		return;
	dir = d;
	dir_len = strlen(d);
	while (dir_len > 1 && dir[dir_len - 1] == '/')
		dir_len--;
	ctl = c;
}

enum { F_NS = 1, F_WRITE = 2, F_READ = 3 }; /* creates and renames; data; reads */

/* The errno the control file asks for the calls of kind `what`, or 0. Read
 * with raw syscalls: the shim's own calls are never intercepted. */
static int fault(int what)
{
	char buf[32] = {0};
	int fd, e;
	ssize_t n;

	if (!ctl)
		return 0;
	fd = (int)syscall(SYS_openat, AT_FDCWD, ctl, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	n = syscall(SYS_read, fd, buf, sizeof(buf) - 1);
	syscall(SYS_close, fd);
	if (n <= 0)
		return 0;
	if (!strncmp(buf, "EIO", 3))
		e = EIO;
	else if (!strncmp(buf, "ENOSPC", 6))
		e = ENOSPC;
	else
		return 0;
	if (what == F_READ && !strstr(buf, " rw"))
		return 0;
	if (what == F_NS && strstr(buf, " data"))
		return 0;
	return e;
}

static int fd_under(int fd)
{
	return dir && fd >= 0 && fd < MAX_FD && under[fd];
}

/* Is (dirfd, name) under dir? */
static int at_under(int dirfd, const char *name)
{
	if (!dir || !name)
		return 0;
	if (name[0] == '/')
		return !strncmp(name, dir, dir_len) && (name[dir_len] == '/' || !name[dir_len]);
	return dirfd != AT_FDCWD && fd_under(dirfd);
}

static void mark(int fd, int on)
{
	if (fd >= 0 && fd < MAX_FD)
		under[fd] = (unsigned char)on;
}

/* Fail with e: -1 and errno. */
static int fail(int e)
{
	errno = e;
	return -1;
}

#define CHECK_FD(fd, what, rv)                                   \
	do {                                                     \
		int e_;                                          \
		if (fd_under(fd) && (e_ = fault(what)) != 0) {   \
			errno = e_;                              \
			return rv;                               \
		}                                                \
	} while (0)

/* ---- open / close ---- */

REAL(int, openat, int, const char *, int, ...)
REAL(int, close, int)

static int do_openat(int dirfd, const char *name, int flags, mode_t mode)
{
	int in = at_under(dirfd, name), fd, e;

	if (in && (flags & O_CREAT) && (e = fault(F_NS)) != 0)
		return fail(e);
	fd = get_openat()(dirfd, name, flags, mode);
	if (fd >= 0)
		mark(fd, in);
	return fd;
}

INTERPOSE_OPENS(do_openat)

int close(int fd)
{
	mark(fd, 0);
	return get_close()(fd);
}

/* ---- writes and syncs; reads (only with "rw") ---- */

/* ret name(proto): fail on a file under dir while the fault is on, else
 * the real call with args */
#define WRAP(ret, name, what, proto, args, ...)   \
	REAL(ret, name, __VA_ARGS__)               \
	ret name proto                             \
	{                                          \
		CHECK_FD(fd, what, -1);            \
		return get_##name() args;          \
	}

typedef const struct iovec *iov_t;
WRAP(ssize_t, write, F_WRITE, (int fd, const void *b, size_t n), (fd, b, n), int, const void *, size_t)
WRAP(ssize_t, pwrite, F_WRITE, (int fd, const void *b, size_t n, off_t o), (fd, b, n, o), int,
     const void *, size_t, off_t)
WRAP(ssize_t, pwrite64, F_WRITE, (int fd, const void *b, size_t n, off_t o), (fd, b, n, o), int,
     const void *, size_t, off_t)
WRAP(ssize_t, writev, F_WRITE, (int fd, iov_t v, int n), (fd, v, n), int, iov_t, int)
WRAP(ssize_t, pwritev, F_WRITE, (int fd, iov_t v, int n, off_t o), (fd, v, n, o), int, iov_t, int,
     off_t)
WRAP(ssize_t, pwritev64, F_WRITE, (int fd, iov_t v, int n, off_t o), (fd, v, n, o), int, iov_t,
     int, off_t)
WRAP(ssize_t, pwritev2, F_WRITE, (int fd, iov_t v, int n, off_t o, int f), (fd, v, n, o, f), int,
     iov_t, int, off_t, int)
WRAP(int, fallocate, F_WRITE, (int fd, int m, off_t o, off_t l), (fd, m, o, l), int, int, off_t,
     off_t)
WRAP(int, fallocate64, F_WRITE, (int fd, int m, off_t o, off_t l), (fd, m, o, l), int, int, off_t,
     off_t)
WRAP(int, ftruncate, F_WRITE, (int fd, off_t l), (fd, l), int, off_t)
WRAP(int, ftruncate64, F_WRITE, (int fd, off_t l), (fd, l), int, off_t)
WRAP(int, fsync, F_WRITE, (int fd), (fd), int)
WRAP(int, fdatasync, F_WRITE, (int fd), (fd), int)
WRAP(ssize_t, read, F_READ, (int fd, void *b, size_t n), (fd, b, n), int, void *, size_t)
WRAP(ssize_t, pread, F_READ, (int fd, void *b, size_t n, off_t o), (fd, b, n, o), int, void *,
     size_t, off_t)
WRAP(ssize_t, pread64, F_READ, (int fd, void *b, size_t n, off_t o), (fd, b, n, o), int, void *,
     size_t, off_t)
WRAP(ssize_t, preadv, F_READ, (int fd, iov_t v, int n, off_t o), (fd, v, n, o), int, iov_t, int,
     off_t)
WRAP(ssize_t, preadv2, F_READ, (int fd, iov_t v, int n, off_t o, int f), (fd, v, n, o, f), int,
     iov_t, int, off_t, int)

/* ---- the namespace ---- */

REAL(int, renameat, int, const char *, int, const char *)
REAL(int, renameat2, int, const char *, int, const char *, unsigned)
REAL(int, rename, const char *, const char *)
REAL(int, mkdirat, int, const char *, mode_t)
REAL(int, mkdir, const char *, mode_t)

static int ns_fault(int d1, const char *n1, int d2, const char *n2)
{
	if (!at_under(d1, n1) && !at_under(d2, n2))
		return 0;
	return fault(F_NS);
}

int renameat(int d1, const char *n1, int d2, const char *n2)
{
	int e = ns_fault(d1, n1, d2, n2);
	return e ? fail(e) : get_renameat()(d1, n1, d2, n2);
}
int renameat2(int d1, const char *n1, int d2, const char *n2, unsigned flags)
{
	int e = ns_fault(d1, n1, d2, n2);
	return e ? fail(e) : get_renameat2()(d1, n1, d2, n2, flags);
}
int rename(const char *n1, const char *n2)
{
	int e = ns_fault(AT_FDCWD, n1, AT_FDCWD, n2);
	return e ? fail(e) : get_rename()(n1, n2);
}
int mkdirat(int d, const char *n, mode_t mode)
{
	int e = ns_fault(d, n, -1, NULL);
	return e ? fail(e) : get_mkdirat()(d, n, mode);
}
int mkdir(const char *n, mode_t mode)
{
	int e = ns_fault(AT_FDCWD, n, -1, NULL);
	return e ? fail(e) : get_mkdir()(n, mode);
}
