/* fuzz_util.c — scratch files for the targets that decode files. */
#include "fuzz.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char g_dir[64];

static void remove_scratch(void)
{
	fuzz_empty_dir(g_dir);
	rmdir(g_dir);
}

const char *fuzz_scratch(void)
{
	if (!g_dir[0]) {
		snprintf(g_dir, sizeof(g_dir), "/dev/shm/spw-fuzz.%d", (int)getpid());
		if (mkdir(g_dir, 0700) < 0 && errno != EEXIST) {
			perror(g_dir);
			abort();
		}
		atexit(remove_scratch);
	}
	return g_dir;
}

void fuzz_empty_dir(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	char p[512];

	if (!d)
		return;
	while ((de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		snprintf(p, sizeof(p), "%s/%s", dir, de->d_name);
		if (de->d_type == DT_DIR) {
			fuzz_empty_dir(p);
			rmdir(p);
		} else {
			unlink(p);
		}
	}
	closedir(d);
}

int fuzz_write_file(const char *dir, const char *name, const void *buf, size_t len)
{
	char p[512];
	int fd, ret = 0;

	snprintf(p, sizeof(p), "%s/%s", dir, name);
	fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	if (len && write(fd, buf, len) != (ssize_t)len)
		ret = -EIO;
	close(fd);
	return ret;
}
