/*
 * ROOM tier/hot/: the RAM tier: the hot files (hot.h), the elastic budget
 * from memory pressure (pressure.h) and the page-cache invalidations
 * (inval.c, its calls in tier_i.h). Uses segment/ below it; every room
 * above reserves, counts and drops RAM through it. Guarantees and
 * threading: per file, below and in pressure.h and inval.c.
 */
/*
 * hot — the RAM tier: one sparse file per inode in hot_dir (a tmpfs),
 * named by inode number, never by user path. Usage is what those files
 * allocate (st_blocks), tracked incrementally; reservations keep concurrent
 * writers from overshooting hot_size together.
 * Threading: usage counters are atomics; per-inode fields (hot_fd,
 * hot_users, hot_bytes) are guarded by the inode's lock.
 */
#ifndef SPW_HOT_H
#define SPW_HOT_H

#include <stddef.h>
#include <stdint.h>

struct inode;
struct hot;

/* The file that proves a directory is spillway's hot_dir. spillway only
 * ever chmods, empties or removes a directory that it made (hot_dir_make),
 * that holds this marker, or that was empty when it was given (then the
 * marker claims it, "adopted": emptied at unmount, never removed). The
 * marker is "spillway hot_dir\n", "created\n" or "adopted\n", then whose
 * it is: "filesystem <uuid>\n" (a mount with a state_dir: the state's uuid)
 * or "volatile <random id>\n"; a marker of an older spillway has no third
 * line. Any other content is not a marker. */
#define HOT_MARKER ".spillway-hot"
/* Would hot_new accept dir, as far as can be told before the filesystem is
 * open? 0, or -errno with a static *why: "/" -EINVAL; a directory holding
 * anything without a marker, a file named HOT_MARKER that is not a marker,
 * anything but hot files, the marker and spillway's .lock -ENOTEMPTY.
 * Touches nothing (the mount options check it before mounting). */
int hot_dir_check(const char *dir, const char **why);
/* mkdir(dir, 0700) and mark it as made by spillway (removed at unmount).
 * 0, or -errno (-EEXIST when it exists). */
int hot_dir_make(const char *dir);
/* Remove a directory hot_dir_make made, while it holds only the marker. */
void hot_dir_unmake(const char *dir);
/* Whose hot_dir it is (hot_new). */
struct hot_owner {
	uint8_t id[16];	  /* the filesystem's uuid; a volatile mount's random id */
	int persistent;	  /* the id is a state's uuid: hot files outlive the mount */
	const char *mountpoint; /* written into .lock (lockwait.h); may be NULL */
	/* a marker of an older spillway names no filesystem: its hot files are
	 * adopted only when known(arg, ino) says the index has that inode */
	int (*known)(void *arg, uint64_t ino);
	void *arg;
};
/* Create (0700) or adopt hot_dir and lock it against a second daemon,
 * waiting for one that is finishing its unmount (lockwait.h). Adopted: an
 * empty directory, or one whose marker names this owner (or a volatile
 * mount, or nobody, with every hot file known); refused untouched: anything
 * hot_dir_check refuses, a marker naming another filesystem. A persistent
 * owner's hot files stay for recovery; the rest are removed. Warns when dir
 * is not on tmpfs. own NULL: volatile, a random id. *why gets a static
 * reason on failure. */
int hot_new(const char *dir, uint64_t limit, const struct hot_owner *own, struct hot **out,
	    const char **why);
/* Recovery: call fn with the inode number, size and allocated bytes of every
 * hot file present. */
int hot_list(struct hot *hot, int (*fn)(void *arg, uint64_t ino, uint64_t size, uint64_t bytes),
	     void *arg);
/* Recovery: count a hot file found intact (`bytes` allocated) without
 * opening it. Caller holds in->lock. */
void hot_adopt_locked(struct hot *hot, struct inode *in, uint64_t bytes);
/* Remove the hot file of inode ino (recovery: orphans). */
void hot_remove(struct hot *hot, uint64_t ino);
void hot_free(struct hot *hot);
/* Inode numbers of the files that have a hot file now (the evictor's
 * candidates: O(hot files)). *out is malloc'ed, caller frees. 0 or -ENOMEM. */
int hot_list_inos(struct hot *hot, uint64_t **out, size_t *n);

/* Open the inode's hot file (created on first use) and count a user.
 * Returns the fd or -errno. Caller holds in->lock. */
int hot_fd_get_locked(struct hot *hot, struct inode *in);
/* Drop a user; the last one closes the fd and, when no chunk is in RAM
 * (all holes or cold), removes the hot file: the number of hot files is
 * bounded by files with hot data plus files in use. */
void hot_fd_put_locked(struct hot *hot, struct inode *in);
/* The inode is gone: unlink its hot file, give its bytes back. */
void hot_drop(struct hot *hot, struct inode *in);

/* Reserve room for writing [off, off+len) of `fd`. Returns the number of
 * bytes reserved (>= 0, to pass to hot_unreserve) or -ENOSPC. Never waits. */
int64_t hot_try_reserve(struct hot *hot, int fd, uint64_t off, uint64_t len);
void hot_unreserve(struct hot *hot, uint64_t bytes);
/* Reserve past the limit (bounded by the caller): restores of acknowledged
 * data when nothing can be spilled. Returns the bytes reserved. */
int64_t hot_force_reserve(struct hot *hot, uint64_t off, uint64_t len);
/* Re-read the hot file's allocation and adjust usage. Caller holds in->lock. */
void hot_account_locked(struct hot *hot, struct inode *in);
/* A file's hot bytes start (pin) or stop counting as pinned: passed through
 * to the kernel, which reads them itself (tier.h). in->lock held; call with
 * pin when in->pt_opens becomes non-zero, without pin just before it
 * becomes zero; hot_account_locked keeps the figure while it is. */
void hot_pin_locked(struct hot *hot, struct inode *in, int pin);
uint64_t hot_pinned(const struct hot *hot);
/* Reserve as hot_try_reserve, but with the pinned bytes left out of the
 * count: a writer that would otherwise wait for room nothing can free
 * (RAM held by passed-through files) overshoots the budget by at most the
 * pinned bytes. Bytes reserved, or -ENOSPC. */
int64_t hot_reserve_beside_pinned(struct hot *hot, uint64_t off, uint64_t len);

uint64_t hot_used(const struct hot *hot);
uint64_t hot_reserved(const struct hot *hot);
uint64_t hot_limit(const struct hot *hot);
/* The effective budget (memory pressure moves it between hot_min and
 * hot_size; tier/hot/pressure.c). Reservations see it at once; bytes already
 * allocated above it are the evictor's to spill. Thread-safe. */
void hot_set_limit(struct hot *hot, uint64_t limit);
const char *hot_dir(const struct hot *hot);
/* The host filesystem's free bytes under hot_dir. */
uint64_t hot_fs_avail(const struct hot *hot);

#endif
