/*
 * uring — the one I/O loop: every segment read and write goes through here.
 * Each calling thread lazily gets its own io_uring (queue depth URING_DEPTH,
 * freed by a thread-exit destructor); a transfer is split into pieces of at
 * most URING_PIECE bytes, up to URING_DEPTH in flight, and short transfers,
 * -EAGAIN and -EINTR are handled by advancing and resubmitting.
 * When io_uring cannot be set up (seccomp, old kernel) the same calls fall
 * back to pread/pwrite/fdatasync; that is logged once at warn.
 * Works with O_DIRECT fds: the caller keeps buffers, offsets and lengths
 * 4 KiB-aligned. Thread-safe (no shared state besides the fallback flag);
 * not reentrant from signal handlers.
 */
#ifndef SPW_URING_H
#define SPW_URING_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#define URING_DEPTH 8
#define URING_PIECE (1u << 20) /* largest single SQE transfer */

/* Write all len bytes of buf at off. 0 or -errno (e.g. -ENOSPC, -EIO). */
int uring_write_full(int fd, const void *buf, size_t len, uint64_t off);
/* Write the niov buffers of iov at off, one after another in the file, all
 * in flight at once (pieces of each as in uring_write_full). 0 or -errno. */
int uring_writev_full(int fd, const struct iovec *iov, int niov, uint64_t off);

/*
 * Read len bytes at off into buf. Returns the number of bytes read, which is
 * short only at end of file (0 when off is at or past EOF), or -errno.
 * With O_DIRECT, an end of file that is not 4 KiB-aligned is found correctly.
 */
ssize_t uring_read_full(int fd, void *buf, size_t len, uint64_t off);

/* fdatasync(fd) through the ring. 0 or -errno. Never retried after a real error. */
int uring_fdatasync(int fd);

/*
 * Force the pread/pwrite fallback for every thread from now on (tests, and
 * an escape hatch for hosts where io_uring misbehaves). Irreversible.
 */
void uring_disable(void);

/* I/O priority (ioprio_set encoding) of the calling thread's requests from
 * now on; 0 = the thread's own. Background work passes the idle class. */
void uring_set_ioprio(unsigned short prio);

/* "io_uring" or "pread": the backend the calling thread uses (sets it up). */
const char *uring_backend(void);

#endif
