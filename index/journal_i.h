/*
 * journal_i.h — private to the journal (journal.c: files, appends,
 * checkpoints, the thread; journal_recover.c: recovery at open): struct
 * journal and the file helpers both use. The record codec
 * (journal_codec.c) needs none of it: it works on bytes only.
 * Threading: the fields say which lock guards them; recovery runs before
 * any append (journal.h).
 */
#ifndef SPW_JOURNAL_I_H
#define SPW_JOURNAL_I_H

#include "index/journal.h"

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

struct journal {
	char *dir;
	int dirfd, lockfd;
	uint64_t sync_ms, checkpoint_bytes, chunk_size;
	uint8_t uuid[16];

	pthread_mutex_t lock; /* guards the fields below */
	pthread_cond_t cond;  /* sync finished, thread wake-up */
	int fd;		      /* current journal.<gen>, -1 before start */
	uint64_t gen;	      /* generation of the current journal */
	uint64_t off;	      /* its size */
	uint64_t written;     /* LSN: bytes appended since open */
	uint64_t synced;      /* LSN known durable */
	int syncing;	      /* an fdatasync is in flight */
	int failed;	      /* read-only for good; set atomically (jrnl_failed) */
	int stop;
	uint64_t checkpoints, syncs;

	pthread_mutex_t ck_lock; /* one checkpoint at a time */
	int need_checkpoint;	 /* set by recovery: take one at start */
	jrnl_snapshot_fn snap;
	void *snap_arg;
	jrnl_checkpoint_fn on_ck;
	void *on_ck_arg;
	pthread_t th;
	int started;
};

/* "<what>.<gen as 16 hex><suffix>", the state dir's file names. */
void jrnl_name_of(char *buf, size_t len, const char *what, uint64_t gen, const char *suffix);
/* pwrite all of buf at off: 0 or -errno. */
int jrnl_write_at(int fd, const uint8_t *buf, size_t len, uint64_t off);
/* Generations of the files named `what`.<16 hex> in the state dir, ascending
 * (caller frees *out): 0 or -errno. */
int jrnl_list_gens(struct journal *j, const char *what, uint64_t **out, size_t *n);

#endif
