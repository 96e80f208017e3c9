/*
 * fuzz_credentials — the AWS shared-credentials file parser
 * (s3_credentials_load in tier/s3/s3req.c, [default] profile), on a 0600 file.
 * Invariants: accepted keys are non-empty, one line each, trimmed, and
 * copied from the file; a rejected file leaves nothing in *out and says
 * why in one line that never quotes the secret.
 */
#include "fuzz.h"
#include "tier/s3/s3req.h"

#include <ctype.h>
#include <errno.h>
#include <string.h>

static void check_value(const char *v, const uint8_t *data, size_t size, const char *what)
{
	size_t n;

	if (!v)
		return;
	n = strlen(v);
	FUZZ_CHECK(n > 0 && !strchr(v, '\n'), "%s empty or multi-line", what);
	FUZZ_CHECK(!isspace((unsigned char)v[0]) && !isspace((unsigned char)v[n - 1]),
		   "%s not trimmed", what);
	FUZZ_CHECK(memmem(data, size, v, n) != NULL, "%s is not from the file", what);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *dir = fuzz_scratch();
	struct s3_creds c;
	char path[256], err[512] = "";
	int ret;

	unsetenv("AWS_PROFILE");
	snprintf(path, sizeof(path), "%s/credentials", dir);
	FUZZ_CHECK(fuzz_write_file(dir, "credentials", data, size) == 0, "write");
	ret = s3_credentials_load(path, &c, err, sizeof(err));
	if (ret == 0) {
		FUZZ_CHECK(c.access_key && c.secret_key, "accepted without both keys");
		check_value(c.access_key, data, size, "access key");
		check_value(c.secret_key, data, size, "secret key");
		check_value(c.session_token, data, size, "session token");
		s3_credentials_free(&c);
	} else {
		FUZZ_CHECK(ret == -ENOENT || ret == -EINVAL || ret == -ENOMEM, "ret %d", ret);
		FUZZ_CHECK(!c.access_key && !c.secret_key && !c.session_token,
			   "a rejected file left keys behind");
		FUZZ_CHECK(err[0] && !strchr(err, '\n'), "reason '%s'", err);
	}
	return 0;
}
