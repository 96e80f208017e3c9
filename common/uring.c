/*
 * DESIGN
 * A transfer is a state machine over up to URING_DEPTH slots (struct xfer).
 * Each slot owns one contiguous piece [start + done, start + len) of the
 * caller's buffer, or of the caller's buffers laid end to end (a vector
 * write: a piece never crosses from one buffer to the next). xfer_take() hands out new pieces in buffer order; a
 * completion either finishes its slot, advances it (short transfer) and asks
 * to resubmit, or records EOF / an error. After the first error no new piece
 * is queued, but every submitted SQE is reaped before returning, so the
 * kernel never touches the caller's buffer after we return.
 * Two executors drive the same machine: the per-thread io_uring, and a
 * synchronous pread/pwrite one (depth 1) used when the ring is unavailable.
 * Per-thread state (struct uring_tl) lives in a pthread key so that the
 * ring is torn down when the thread exits.
 */
#include "common/uring.h"

#include "common/log.h"

#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <unistd.h>

/*
 * liburing maps and unmaps a ring's memory with raw system calls, which
 * ThreadSanitizer does not see: when a thread's ring is torn down (the
 * thread exits: libfuse ends idle workers) and a later ring is mapped at
 * the same address for another thread, the new owner's first SQE writes
 * look like a race with the old owner's. ring_gone() before the unmap and
 * ring_new() after the map tell it the order the kernel guarantees.
 */
#if defined(__SANITIZE_THREAD__)
#define URING_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define URING_TSAN 1
#endif
#endif
#ifdef URING_TSAN
#include <sanitizer/tsan_interface.h>
static char ring_recycled; /* the address the two calls meet at */
static void ring_gone(void)
{
	__tsan_release(&ring_recycled);
}
static void ring_new(void)
{
	__tsan_acquire(&ring_recycled);
}
#else
static void ring_gone(void)
{
}
static void ring_new(void)
{
}
#endif

enum { TL_NONE, TL_RING, TL_FALLBACK };

struct uring_tl {
	int state;
	struct io_uring ring; /* valid when state == TL_RING */
};

static pthread_key_t tl_key;
static pthread_once_t tl_once = PTHREAD_ONCE_INIT;
static _Thread_local struct uring_tl *tl_cache;
static _Thread_local unsigned short tl_ioprio; /* sqe->ioprio of this thread's I/O */

void uring_set_ioprio(unsigned short prio)
{
	tl_ioprio = prio;
}
static atomic_int forced_fallback;
static atomic_int warned;

static void tl_destroy(void *p)
{
	struct uring_tl *tl = p;

	if (tl->state == TL_RING) {
		ring_gone();
		io_uring_queue_exit(&tl->ring);
	}
	free(tl);
	tl_cache = NULL; /* a later destructor may still do I/O: start afresh */
}

static void tl_key_init(void)
{
	if (pthread_key_create(&tl_key, tl_destroy) != 0)
		abort();
}

/* Calling thread's state; NULL only when out of memory (then use fallback). */
static struct uring_tl *tl_get(void)
{
	struct uring_tl *tl = tl_cache;
	int ret;

	if (tl)
		goto out;
	pthread_once(&tl_once, tl_key_init);
	tl = calloc(1, sizeof(*tl));
	if (!tl)
		return NULL;
	if (pthread_setspecific(tl_key, tl) != 0) {
		free(tl);
		return NULL;
	}
	tl_cache = tl;
out:
	if (tl->state == TL_RING && atomic_load(&forced_fallback)) {
		ring_gone();
		io_uring_queue_exit(&tl->ring);
		tl->state = TL_FALLBACK;
	}
	if (tl->state != TL_NONE)
		return tl;
	if (atomic_load(&forced_fallback)) {
		tl->state = TL_FALLBACK;
		return tl;
	}
	ret = io_uring_queue_init(URING_DEPTH, &tl->ring, 0);
	if (ret < 0) {
		tl->state = TL_FALLBACK;
		if (atomic_exchange(&warned, 1) == 0)
			log_warn("io_uring unavailable (%s): using pread/pwrite", strerror(-ret));
	} else {
		ring_new();
		tl->state = TL_RING;
	}
	return tl;
}

/* Forget this thread's ring after a fatal submit error; next call makes a new one. */
static void tl_drop_ring(struct uring_tl *tl)
{
	ring_gone();
	io_uring_queue_exit(&tl->ring);
	tl->state = TL_NONE;
}

void uring_disable(void)
{
	atomic_store(&forced_fallback, 1);
}

const char *uring_backend(void)
{
	struct uring_tl *tl = tl_get();

	return tl && tl->state == TL_RING ? "io_uring" : "pread";
}

/* ---- the transfer state machine ---- */

enum { OP_READ, OP_WRITE };

struct slot {
	size_t start; /* piece start, relative to the buffer */
	size_t len;   /* piece length */
	size_t done;  /* bytes of the piece completed */
	int busy;
};

struct xfer {
	int op;
	int fd;
	char *buf;
	size_t len;
	const struct iovec *iov; /* NULL: buf alone; else niov buffers, len in all */
	int niov;
	uint64_t off;
	size_t next;  /* first byte not yet handed to a slot */
	size_t eof;   /* for reads: lowest buffer position at which EOF was seen */
	int err;      /* first error, 0 if none */
	int inflight; /* slots busy */
	struct slot slot[URING_DEPTH];
};

static void xfer_init(struct xfer *x, int op, int fd, void *buf, size_t len, uint64_t off)
{
	*x = (struct xfer){.op = op, .fd = fd, .buf = buf, .len = len, .off = off, .eof = len};
}

/* The caller's byte at transfer position pos, and how many bytes follow it
 * in the same buffer. */
static char *xfer_at(const struct xfer *x, size_t pos, size_t *room)
{
	if (!x->iov) {
		*room = x->len - pos;
		return x->buf + pos;
	}
	for (int i = 0; i < x->niov; i++) {
		if (pos < x->iov[i].iov_len) {
			*room = x->iov[i].iov_len - pos;
			return (char *)x->iov[i].iov_base + pos;
		}
		pos -= x->iov[i].iov_len;
	}
	*room = 0;
	return NULL;
}

/* Next slot to start (or -1): takes a fresh piece when there is room. */
static int xfer_take(struct xfer *x)
{
	if (x->err || x->next >= x->eof)
		return -1;
	for (int i = 0; i < URING_DEPTH; i++) {
		struct slot *s = &x->slot[i];
		size_t n;

		if (s->busy)
			continue;
		xfer_at(x, x->next, &n); /* to the end of its buffer */
		*s = (struct slot){
		    .start = x->next, .len = n < URING_PIECE ? n : URING_PIECE, .busy = 1};
		x->next += s->len;
		x->inflight++;
		return i;
	}
	return -1;
}

static int fd_is_direct(int fd)
{
	int fl = fcntl(fd, F_GETFL);

	return fl >= 0 && (fl & O_DIRECT);
}

/* An O_DIRECT write cut short and then refused at the unaligned remainder. */
static int short_direct_write_cause(int fd, size_t left)
{
	struct statvfs sv;

	if (fstatvfs(fd, &sv) == 0 && (uint64_t)sv.f_bavail * sv.f_frsize < left)
		return -ENOSPC;
	return -EIO;
}

static void slot_end(struct xfer *x, struct slot *s)
{
	s->busy = 0;
	x->inflight--;
}

/*
 * Account one completion of slot s with result res. Returns 1 when the slot
 * must be (re)submitted for its remaining bytes, 0 when it is finished.
 */
static int xfer_complete(struct xfer *x, struct slot *s, int res)
{
	if ((res == -EAGAIN || res == -EINTR) && !x->err)
		return 1;
	if (res == -EAGAIN || res == -EINTR)
		goto end;
	if (res < 0) {
		/* O_DIRECT cannot resume at an unaligned position: that was EOF. */
		if (res == -EINVAL && s->done > 0 && fd_is_direct(x->fd)) {
			if (x->op == OP_READ) {
				if (s->start + s->done < x->eof)
					x->eof = s->start + s->done;
				goto end;
			}
			res = short_direct_write_cause(x->fd, s->len - s->done);
		}
		if (!x->err)
			x->err = res;
		goto end;
	}
	if (res == 0) {
		if (x->op == OP_WRITE) {
			if (!x->err)
				x->err = -EIO;
		} else if (s->start + s->done < x->eof) {
			x->eof = s->start + s->done;
		}
		goto end;
	}
	s->done += (size_t)res;
	if (s->done < s->len && !x->err)
		return 1;
end:
	slot_end(x, s);
	return 0;
}

static void slot_prep(struct io_uring_sqe *sqe, struct xfer *x, int i)
{
	struct slot *s = &x->slot[i];
	size_t pos = s->start + s->done, room;
	unsigned n = (unsigned)(s->len - s->done);
	char *p = xfer_at(x, pos, &room);

	if (x->op == OP_READ)
		io_uring_prep_read(sqe, x->fd, p, n, x->off + pos);
	else
		io_uring_prep_write(sqe, x->fd, p, n, x->off + pos);
	sqe->ioprio = tl_ioprio;
	io_uring_sqe_set_data64(sqe, (uint64_t)i);
}

/*
 * Submit the n SQEs prepared. Returns how many the kernel took (n unless a
 * fatal error stopped it part way; then *err is set), never blocks for long.
 */
static int ring_submit(struct io_uring *ring, int n, int *err)
{
	int done = 0;

	*err = 0;
	while (done < n) {
		int ret = io_uring_submit(ring);

		if (ret == -EINTR)
			continue;
		if (ret <= 0) {
			*err = ret < 0 ? ret : -EBUSY;
			break;
		}
		done += ret;
	}
	return done;
}

static int xfer_run_ring(struct uring_tl *tl, struct xfer *x)
{
	struct io_uring *ring = &tl->ring;
	int submitted = 0; /* SQEs owned by the kernel */
	int resubmit[URING_DEPTH];
	int nresub = 0;
	int fatal = 0;

	for (;;) {
		struct io_uring_cqe *cqe;
		int prepped = 0, i, ret;

		while (nresub > 0 || (i = xfer_take(x)) >= 0) {
			struct io_uring_sqe *sqe = io_uring_get_sqe(ring);

			if (nresub > 0)
				i = resubmit[--nresub];
			if (!sqe) { /* cannot happen: depth == ring size */
				x->err = x->err ? x->err : -EBUSY;
				slot_end(x, &x->slot[i]);
				break;
			}
			slot_prep(sqe, x, i);
			prepped++;
		}
		if (prepped) {
			submitted += ring_submit(ring, prepped, &ret);
			if (ret < 0) {
				/*
				 * Reap what the kernel took, then drop the ring with
				 * the SQEs it refused, so none runs later.
				 */
				fatal = ret;
				x->err = x->err ? x->err : ret;
			}
		}
		if (submitted == 0)
			break;
		ret = io_uring_wait_cqe(ring, &cqe);
		if (ret == -EINTR)
			continue;
		if (ret < 0) {
			fatal = ret;
			x->err = x->err ? x->err : ret;
			break;
		}
		do {
			i = (int)io_uring_cqe_get_data64(cqe);
			ret = cqe->res;
			io_uring_cqe_seen(ring, cqe);
			submitted--;
			if (xfer_complete(x, &x->slot[i], ret))
				resubmit[nresub++] = i;
		} while (io_uring_peek_cqe(ring, &cqe) == 0);
	}
	if (fatal) {
		/* queue_exit cancels and waits for what the kernel still holds. */
		log_err("io_uring: %s; recreating the ring", strerror(-fatal));
		tl_drop_ring(tl);
	}
	return x->err;
}

static int xfer_run_sync(struct xfer *x)
{
	int i;

	while ((i = xfer_take(x)) >= 0) {
		struct slot *s = &x->slot[i];
		int again;

		do {
			size_t pos = s->start + s->done, room;
			size_t n = s->len - s->done;
			char *p = xfer_at(x, pos, &room);
			ssize_t r = x->op == OP_READ ? pread(x->fd, p, n, x->off + pos)
						     : pwrite(x->fd, p, n, x->off + pos);

			again = xfer_complete(x, s, r < 0 ? -errno : (int)r);
		} while (again);
	}
	return x->err;
}

static int xfer_run(struct xfer *x)
{
	struct uring_tl *tl = tl_get();

	if (x->len == 0)
		return 0;
	if (tl && tl->state == TL_RING)
		return xfer_run_ring(tl, x);
	return xfer_run_sync(x);
}

int uring_write_full(int fd, const void *buf, size_t len, uint64_t off)
{
	struct xfer x;

	xfer_init(&x, OP_WRITE, fd, (void *)buf, len, off);
	return xfer_run(&x);
}

int uring_writev_full(int fd, const struct iovec *iov, int niov, uint64_t off)
{
	struct xfer x;
	size_t len = 0;

	for (int i = 0; i < niov; i++)
		len += iov[i].iov_len;
	xfer_init(&x, OP_WRITE, fd, NULL, len, off);
	x.iov = iov;
	x.niov = niov;
	return xfer_run(&x);
}

ssize_t uring_read_full(int fd, void *buf, size_t len, uint64_t off)
{
	struct xfer x;
	int ret;

	xfer_init(&x, OP_READ, fd, buf, len, off);
	ret = xfer_run(&x);
	return ret < 0 ? ret : (ssize_t)x.eof;
}

int uring_fdatasync(int fd)
{
	struct uring_tl *tl = tl_get();
	struct io_uring_cqe *cqe;
	int ret;

	if (!tl || tl->state != TL_RING) {
		do
			ret = fdatasync(fd) < 0 ? -errno : 0;
		while (ret == -EINTR);
		return ret;
	}
	for (;;) {
		struct io_uring_sqe *sqe = io_uring_get_sqe(&tl->ring);

		if (!sqe)
			return -EBUSY;
		io_uring_prep_fsync(sqe, fd, IORING_FSYNC_DATASYNC);
		if (ring_submit(&tl->ring, 1, &ret) != 1)
			goto fatal;
		do
			ret = io_uring_wait_cqe(&tl->ring, &cqe);
		while (ret == -EINTR);
		if (ret < 0)
			goto fatal;
		ret = cqe->res;
		io_uring_cqe_seen(&tl->ring, cqe);
		/* Not executed at all: safe to ask again. A real error is final. */
		if (ret != -EAGAIN && ret != -EINTR)
			return ret;
	}
fatal:
	log_err("io_uring: %s; recreating the ring", strerror(-ret));
	tl_drop_ring(tl);
	return ret;
}
