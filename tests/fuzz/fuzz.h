/*
 * fuzz.h — shared helpers of the libFuzzer targets (tests/fuzz/fuzz_*.c).
 * FUZZ_CHECK fails the run (abort, so libFuzzer saves the input) when an
 * invariant of the decoder under test does not hold.
 * Threading: targets are single-threaded.
 */
#ifndef SPW_FUZZ_H
#define SPW_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define FUZZ_CHECK(cond, ...)                                                                    \
	do {                                                                                     \
		if (!(cond)) {                                                                   \
			fprintf(stderr, "%s:%d: invariant failed: %s: ", __FILE__, __LINE__, #cond); \
			fprintf(stderr, __VA_ARGS__);                                            \
			fputc('\n', stderr);                                                     \
			abort();                                                                 \
		}                                                                                \
	} while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A private scratch dir on /dev/shm for this process (made once, emptied by
 * the caller); the path stays valid for the whole run. */
const char *fuzz_scratch(void);
/* Remove everything inside dir (not dir itself). */
void fuzz_empty_dir(const char *dir);
/* Write len bytes to dir/name (0600). 0 or -errno. */
int fuzz_write_file(const char *dir, const char *name, const void *buf, size_t len);

#endif
