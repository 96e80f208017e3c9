/*
 * lockwait.c — see lockwait.h. A holder is "finishing" when the pid its lock
 * file names is alive and the mountpoint it names is not in
 * /proc/self/mounts: umount(2) of a FUSE mount returns before its daemon has
 * spilled and released its locks. The wait polls (20 ms), since flock has no
 * timed form; the holder's state is read again each time, so a holder that
 * mounts meanwhile is refused at once.
 */
#include "common/lockwait.h"

#include "common/clock.h"
#include "common/log.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <time.h>
#include <unistd.h>

int lockwait_read(int fd, char *buf, int len)
{
	ssize_t n = pread(fd, buf, (size_t)len - 1, 0);

	if (n < 0) {
		buf[0] = 0;
		return -errno;
	}
	buf[n] = 0;
	return (int)n;
}

/* /proc/mounts escapes ' ', '\t', '\n' and '\\' as \ooo. */
static void unescape(char *s)
{
	char *o = s;
	for (; *s; s++, o++) {
		if (s[0] == '\\' && s[1] >= '0' && s[1] <= '3' && s[2] >= '0' && s[2] <= '7' &&
		    s[3] >= '0' && s[3] <= '7') {
			*o = (char)((s[1] - '0') * 64 + (s[2] - '0') * 8 + (s[3] - '0'));
			s += 3;
		} else
			*o = *s;
	}
	*o = 0;
}

/* Is a FUSE filesystem mounted on path (in this mount namespace)? */
static int fuse_mounted(const char *path)
{
	FILE *f = fopen("/proc/self/mounts", "re");
	char line[8192];
	int found = 0;

	if (!f)
		return 1; /* cannot tell: do not wait */
	while (!found && fgets(line, sizeof(line), f)) {
		char *save = NULL, *src = strtok_r(line, " ", &save);
		char *dir = src ? strtok_r(NULL, " ", &save) : NULL;
		char *type = dir ? strtok_r(NULL, " ", &save) : NULL;
		if (!type || strncmp(type, "fuse", 4))
			continue;
		unescape(dir);
		found = !strcmp(dir, path);
	}
	fclose(f);
	return found;
}

/* The holder named in the lock file is a live daemon whose mountpoint is
 * gone: 1 (worth waiting for), else 0. *pid and mnt get what it names. */
static int holder_finishing(int fd, long *pid, char *mnt, size_t mntlen)
{
	char buf[4600], *line, *save = NULL;

	*pid = 0;
	mnt[0] = 0;
	if (lockwait_read(fd, buf, sizeof(buf)) <= 0)
		return 0;
	for (line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		if (!strncmp(line, "pid ", 4))
			*pid = strtol(line + 4, NULL, 10);
		else if (!strncmp(line, "mountpoint ", 11))
			snprintf(mnt, mntlen, "%s", line + 11);
	}
	if (*pid <= 0 || *pid == (long)getpid() || !mnt[0])
		return 0;
	if (kill((pid_t)*pid, 0) < 0 && errno != EPERM)
		return 0;
	return !fuse_mounted(mnt);
}

/* The daemon the last wait was announced for: one log line per daemon
 * waited for, whichever of its directories is met first (the mounting
 * thread's alone). */
static long announced;

int lockwait_take(int fd, const char *what)
{
	uint64_t t0 = clock_now_ns();
	char mnt[4200];
	long pid;
	int logged = 0;

	for (;;) {
		if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
			if (logged)
				log_debug("%s: the daemon before is gone after %.1f s", what,
					  (clock_now_ns() - t0) / 1e9);
			return 0;
		}
		if (errno != EWOULDBLOCK)
			return -errno;
		if (!holder_finishing(fd, &pid, mnt, sizeof(mnt)) ||
		    clock_now_ns() - t0 > LOCKWAIT_MS * 1000000ULL)
			return -EBUSY;
		if (!logged++ && pid != announced)
			log_info("%s is held by spillway daemon %ld, which is finishing its "
				 "unmount of %s: waiting for it (at most %d s)",
				 what, pid, mnt, LOCKWAIT_MS / 1000);
		announced = pid;
		nanosleep(&(struct timespec){.tv_nsec = 20 * 1000000}, NULL);
	}
}

int lockwait_stamp(int fd, const char *head, const char *mountpoint)
{
	char buf[4600];
	int nl = head && *head && head[strlen(head) - 1] != '\n';
	int n = snprintf(buf, sizeof(buf), "%s%spid %ld\n", head ? head : "", nl ? "\n" : "",
			 (long)getpid());

	if (mountpoint && n < (int)sizeof(buf))
		n += snprintf(buf + n, sizeof(buf) - (size_t)n, "mountpoint %s\n", mountpoint);
	if (n >= (int)sizeof(buf))
		return -ENAMETOOLONG;
	if (ftruncate(fd, 0) < 0 || pwrite(fd, buf, (size_t)n, 0) != n)
		return errno ? -errno : -EIO;
	return 0;
}
