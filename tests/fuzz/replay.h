/*
 * replay.h — a state_dir made of fuzzed files, recovered into a real index
 * (jrnl_recover + idx_replay + idx_replay_finish), for fuzz_journal_replay
 * and fuzz_checkpoint. Single-threaded.
 */
#ifndef SPW_FUZZ_REPLAY_H
#define SPW_FUZZ_REPLAY_H

#include <stddef.h>
#include <stdint.h>

#define REPLAY_CHUNK (4ull << 20)

struct replay_result {
	int ret;	     /* jrnl_recover's */
	int fresh;
	uint64_t calls;	     /* records handed to the callback */
	uint64_t truncated;  /* info.truncated */
	uint64_t inodes;     /* in the index after idx_replay_finish */
};

/* Name a fuzzed file after the generation in its header record, if any. */
void replay_put(const char *dir, const char *what, const uint8_t *buf, size_t len);
/* Recover dir into a fresh index; checks the per-record invariants. */
void replay_run(const char *dir, struct replay_result *res);

#endif
