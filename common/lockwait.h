/*
 * lockwait — one spillway daemon per directory, and a remount that waits for
 * the daemon before it. A daemon holds an flock on a lock file in each
 * directory it owns (state_dir, hot_dir, each nvme directory) and writes its
 * pid and mountpoint into it (lockwait_stamp). A new daemon that finds the
 * lock held by a live daemon whose mountpoint is no longer mounted (it is
 * flushing after umount returned, or still starting) waits for it, at most
 * LOCKWAIT_MS, with one log line per daemon waited for (info; the end of the
 * wait at debug); a holder that is mounted, or that names no
 * mountpoint (spillway-fsck) or no live process, is refused at once.
 * Threading: the mounting thread alone (it keeps the last pid announced).
 */
#ifndef SPW_LOCKWAIT_H
#define SPW_LOCKWAIT_H

#define LOCKWAIT_MS 60000

/* flock(fd, LOCK_EX), waiting for a holder that is finishing its unmount as
 * above. `what` names the directory for the log line ("state_dir '/x'").
 * 0, -EBUSY (held by another daemon or fsck), or -errno. */
int lockwait_take(int fd, const char *what);
/* Replace the content of the lock file fd (held) with `head` (may be NULL),
 * then "pid N" and "mountpoint PATH" lines (mountpoint may be NULL: fsck).
 * 0 or -errno. */
int lockwait_stamp(int fd, const char *head, const char *mountpoint);
/* Read at most len - 1 bytes of the lock file fd from its start into buf (NUL
 * terminated). The count, or -errno. */
int lockwait_read(int fd, char *buf, int len);

#endif
