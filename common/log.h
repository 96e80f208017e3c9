/*
 * log — the one log module.
 * Syslog levels; the level is checked before formatting. Writes to stderr in
 * the foreground, to syslog once spw_log_to_syslog() was called. Identical
 * messages repeated within a second are folded ("... repeated N times").
 * Thread-safe.
 */
#ifndef SPW_LOG_H
#define SPW_LOG_H

#include <syslog.h>

extern int spw_log_level; /* LOG_ERR .. LOG_DEBUG; read without lock */

void spw_log_to_syslog(void);
int spw_log_parse_level(const char *s); /* -1 when unknown */
void spw_log_msg(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define spw_log(level, ...)                                                                        \
	do {                                                                                       \
		if ((level) <= spw_log_level)                                                      \
			spw_log_msg((level), __VA_ARGS__);                                         \
	} while (0)
#define log_err(...)   spw_log(LOG_ERR, __VA_ARGS__)
#define log_warn(...)  spw_log(LOG_WARNING, __VA_ARGS__)
#define log_info(...)  spw_log(LOG_INFO, __VA_ARGS__)
#define log_debug(...) spw_log(LOG_DEBUG, __VA_ARGS__)

#endif
