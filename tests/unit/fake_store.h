/*
 * fake_store — an in-memory cold store (struct store_ops) for unit tests of
 * the policy code (evictor, GC, restore) without disks or servers. Segments
 * are byte arrays; every put, read and remove is logged; faults are
 * scripted: the next N put_finish calls fail with an errno, reads sleep a
 * while, a byte of a stored segment can be flipped, the device can be made
 * small (stat_total, for demotion). Gates (fake_gate_*) hold the next reads or
 * segment finishes until the test lets each go, so a test drives an
 * interleaving of the tier's threads on purpose instead of sleeping.
 * Threading: every call takes the store's lock; the tests read the log and
 * set the script under fake_lock()/fake_unlock().
 */
#ifndef SPW_FAKE_STORE_H
#define SPW_FAKE_STORE_H

#include "tier/store/store.h"

#include <stdint.h>

#define FAKE_MAX_SEGS 1024
#define FAKE_MAX_LOG  4096

struct fake_seg {
	uint8_t *data;
	uint64_t len;
	int live; /* finished and not removed */
};

/* One read: which segment, at which offset. */
struct fake_read {
	uint64_t seg_id, off, len;
};

struct fake_store {
	struct store base;
	struct fake_seg segs[FAKE_MAX_SEGS]; /* by segment id */
	/* log */
	unsigned puts_finished, puts_failed, removes;
	struct fake_read reads[FAKE_MAX_LOG];
	unsigned nreads;
	/* script */
	unsigned fail_puts; /* the next n put_finish calls fail ... */
	int fail_errno;	    /* ... with this (positive errno) */
	unsigned read_delay_ms;
	uint64_t stat_total; /* stat's device size (0: 1 TiB) */
};

/* The store the next fake_store_open() (or the wrapped store_nvme_open)
 * returns; reset by fake_store_open(). */
extern struct fake_store *fake_current;

int fake_store_open(struct store **out);
void fake_lock(void);
void fake_unlock(void);
/* Segments finished and not removed. */
unsigned fake_live_segments(void);
/* Flip one byte of segment id at off. 0 or -ENOENT. */
int fake_flip(uint64_t id, uint64_t off);

/* Gates. The next n calls of a kind (reads, put_finish: a segment made
 * durable, or put_append: a segment's bytes taken from the writer's memory,
 * before they are copied) block in the store, each with a ticket numbered
 * from 1 in the order they arrive (across kinds, since the last
 * fake_store_open). */
enum { FAKE_GATE_READ, FAKE_GATE_PUT, FAKE_GATE_APPEND };
void fake_gate_arm(int kind, unsigned n);
/* Wait until the call holding ticket is blocked at its gate: 0, or
 * -ETIMEDOUT after ms (a test failure, never a way to synchronise). */
int fake_gate_wait(unsigned ticket, unsigned ms);
/* Let ticket go; err > 0: the call fails with -err instead (a read before
 * reading anything; a put without keeping the segment). */
void fake_gate_release(unsigned ticket, int err);
/* Calls that arrived at a gate so far (the last ticket given). */
unsigned fake_gate_tickets(void);
/* Disarm, and let every call held go (a failed test's teardown). */
void fake_gate_open_all(void);

#endif
