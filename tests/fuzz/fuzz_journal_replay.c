/*
 * fuzz_journal_replay — a whole recovery (jrnl_recover into a real index via
 * idx_replay) of a state_dir holding a fuzzed checkpoint and journal.
 * Input: u32 LE length of the checkpoint, its bytes, then the journal's.
 * Invariants (replay.c): no TX, header or out-of-range record reaches the
 * index; no chunk map past the largest file; a refusal says why. Here:
 * recovery is idempotent — recovering the state it left (bad tail cut)
 * replays the same records and cuts nothing more.
 */
#include "fuzz.h"
#include "replay.h"

#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *dir = fuzz_scratch();
	struct replay_result a, b;
	uint32_t split;

	if (size < 4)
		return 0;
	memcpy(&split, data, 4);
	data += 4;
	size -= 4;
	if (split > size)
		split = (uint32_t)size;
	fuzz_empty_dir(dir);
	if (split)
		replay_put(dir, "checkpoint", data, split);
	if (size > split)
		replay_put(dir, "journal", data + split, size - split);
	replay_run(dir, &a);
	if (a.ret == 0) {
		replay_run(dir, &b);
		FUZZ_CHECK(b.ret == 0, "the state recovery left is refused");
		FUZZ_CHECK(b.calls == a.calls && b.inodes == a.inodes && b.truncated == 0,
			   "second recovery: %llu records (first %llu), %llu inodes (first %llu), "
			   "%llu bytes cut",
			   (unsigned long long)b.calls, (unsigned long long)a.calls,
			   (unsigned long long)b.inodes, (unsigned long long)a.inodes,
			   (unsigned long long)b.truncated);
	}
	return 0;
}
