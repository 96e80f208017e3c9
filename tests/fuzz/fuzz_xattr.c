/*
 * fuzz_xattr — values written to user.spillway.* (xattr_vx_parse in
 * fs/ops_xattr.c). Input: the name after the prefix, a NUL, the value.
 * Invariants: exactly the documented requests are accepted — pin takes
 * "0" or "1", evict and warm take "1" (each optionally one '\n' or NUL
 * after it); every other name or value is -EINVAL; the value is never read
 * past its size (an exact-size copy under ASan).
 */
#include "fuzz.h"
#include "fs/fs_i.h"

#include <errno.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const uint8_t *nul = memchr(data, 0, size);
	size_t nlen, vlen;
	char *what;
	uint8_t *val;
	int got, want = -EINVAL;

	if (!nul)
		return 0;
	nlen = (size_t)(nul - data);
	vlen = size - nlen - 1;
	what = malloc(nlen + 1);
	memcpy(what, data, nlen + 1);
	val = malloc(vlen ? vlen : 1);
	memcpy(val, nul + 1, vlen);
	got = xattr_vx_parse(what, val, vlen);
	int b = (vlen == 1 || (vlen == 2 && (val[1] == '\n' || val[1] == 0))) &&
			(val[0] == '0' || val[0] == '1')
		    ? val[0] == '1'
		    : -1;
	if (!strcmp(what, "pin") && b >= 0)
		want = b ? VX_PIN : VX_UNPIN;
	else if (!strcmp(what, "evict") && b == 1)
		want = VX_EVICT;
	else if (!strcmp(what, "warm") && b == 1)
		want = VX_WARM;
	FUZZ_CHECK(got == want, "'%s' = %.*s: %d, want %d", what, (int)vlen, (const char *)val, got,
		   want);
	free(val);
	free(what);
	return 0;
}
