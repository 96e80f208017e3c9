/*
 * segname — the one spelling of a segment's name, "seg-<16 lowercase
 * hex>.spw", used by every store (a file in an NVMe directory, a key under
 * an S3 prefix). Pure, thread-safe.
 */
#ifndef SPW_SEGNAME_H
#define SPW_SEGNAME_H

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define SEGNAME_LEN 24 /* without the terminating NUL */

/* buf gets the name of segment id (SEGNAME_LEN + 1 bytes). */
static inline void segname_format(char buf[SEGNAME_LEN + 1], uint64_t id)
{
	snprintf(buf, SEGNAME_LEN + 1, "seg-%016" PRIx64 ".spw", id);
}

/* The id a segment name spells: 0, or -1 when s is not one. */
static inline int segname_parse(const char *s, uint64_t *id)
{
	uint64_t v = 0;

	if (strlen(s) != SEGNAME_LEN || strncmp(s, "seg-", 4) || strcmp(s + 20, ".spw"))
		return -1;
	for (int k = 4; k < 20; k++) {
		char c = s[k];

		if (c >= '0' && c <= '9')
			v = v << 4 | (uint64_t)(c - '0');
		else if (c >= 'a' && c <= 'f')
			v = v << 4 | (uint64_t)(c - 'a' + 10);
		else
			return -1;
	}
	*id = v;
	return 0;
}

#endif
