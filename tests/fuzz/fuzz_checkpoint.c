/*
 * fuzz_checkpoint — checkpoint load: a state_dir holding one fuzzed
 * checkpoint file, recovered into a real index.
 * Invariants: a checkpoint is validated wholly before anything is applied,
 * so a rejected one (recovery refused, or treated as fresh) hands no record
 * to the index; an accepted one hands over at most its JR_END count.
 */
#include "fuzz.h"
#include "index/journal.h"
#include "replay.h"

#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *dir = fuzz_scratch();
	struct replay_result a;
	uint64_t end_count = 0;
	size_t pos = 0;
	struct jrec r;
	ssize_t n;

	fuzz_empty_dir(dir);
	replay_put(dir, "checkpoint", data, size);
	while (pos < size && (n = jrnl_decode(data + pos, size - pos, &r)) > 0) {
		pos += (size_t)n;
		if (r.type == JR_END)
			end_count = r.count;
	}
	replay_run(dir, &a);
	if (a.ret < 0 || a.fresh)
		FUZZ_CHECK(a.calls == 0, "a rejected checkpoint applied %llu records",
			   (unsigned long long)a.calls);
	else
		FUZZ_CHECK(a.calls <= end_count, "%llu records applied, END says %llu",
			   (unsigned long long)a.calls, (unsigned long long)end_count);
	return 0;
}
