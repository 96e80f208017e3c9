/*
 * scrub — the online scrub (user.spillway.scrub, `spillctl scrub`): one
 * thread re-reads every sealed extent (extent.h) from its cold directory
 * while the mount serves, and checks each JRNL_EXT_BLOCK against the crc32c
 * journaled at its seal. One run at a time; its status (scrub_json) says
 * how far it got and which files hold damaged blocks (by inode, offset and
 * path, the path resolved at the end of the run).
 * Guarantees: reads bypass the page cache (O_DIRECT; where the filesystem
 * refuses it, the pages a piece brought in are dropped after it), at idle
 * I/O priority and at most `limit` bytes/s when given; an extent unsealed
 * when reached (being written) is skipped and counted, one changed while
 * scrubbed (its wgen moved) too, never reported damaged; the inode lock is
 * held only to look at the extent and copy one piece's crcs; a damaged
 * block counts in extents.crc_errors and is logged. scrub_stop ends a run
 * within one piece (or one pacing wait) and joins its thread.
 * Threading: every call from any thread; start/stop/free as tier.c orders
 * them. The room's lock is a leaf, never held with an inode lock.
 */
#ifndef SPW_SCRUB_H
#define SPW_SCRUB_H

#include <stddef.h>
#include <stdint.h>

struct tier;

/* t->scrub (tier_new, last) and its end (tier_free). 0 or -ENOMEM. */
int scrub_new(struct tier *t);
void scrub_free(struct tier *t);
/* Start a run over every extent sealed now (limit: bytes/s, 0 none).
 * 0, -EBUSY while one runs, -ESHUTDOWN once stopped, -errno. */
int scrub_start(struct tier *t, uint64_t limit);
/* Cancel the run in progress (its status says "cancelled"); 0 either way. */
int scrub_cancel(struct tier *t);
/* Unmount (tier_stop): cancel and join; no run starts after it. */
void scrub_stop(struct tier *t);
/* The status as one JSON object (snprintf rules). */
int scrub_json(struct tier *t, char *buf, size_t len);

#endif
