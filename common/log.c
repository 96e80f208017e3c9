#include "common/log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>

int spw_log_level = LOG_INFO;

static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static int use_syslog;		   /* protected by log_lock */
static char last_msg[512];	   /* protected by log_lock */
static int last_level;		   /* protected by log_lock */
static unsigned long last_repeats; /* protected by log_lock */
static struct timespec last_time;  /* protected by log_lock */

void spw_log_to_syslog(void)
{
	pthread_mutex_lock(&log_lock);
	openlog("spillway", LOG_PID, LOG_DAEMON);
	use_syslog = 1;
	pthread_mutex_unlock(&log_lock);
}

int spw_log_parse_level(const char *s)
{
	static const struct {
		const char *name;
		int level;
	} names[] = {
	    {"error", LOG_ERR}, {"warn", LOG_WARNING}, {"info", LOG_INFO}, {"debug", LOG_DEBUG}};
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (strcasecmp(s, names[i].name) == 0)
			return names[i].level;
	return -1;
}

static void emit(int level, const char *msg)
{
	static const char *const tag[] = {"emerg", "alert",  "crit", "error",
					  "warn",  "notice", "info", "debug"};
	if (use_syslog) {
		syslog(level, "%s", msg);
		return;
	}
	fprintf(stderr, "spillway: %s: %s\n", tag[level & 7], msg);
}

void spw_log_msg(int level, const char *fmt, ...)
{
	char msg[512];
	va_list ap;
	struct timespec now;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	clock_gettime(CLOCK_MONOTONIC, &now);

	pthread_mutex_lock(&log_lock);
	if (level == last_level && strcmp(msg, last_msg) == 0 &&
	    now.tv_sec - last_time.tv_sec < 60) {
		/* Fold floods: count, print a summary on the next distinct line or
		 * every power of two so a stuck error still shows up. */
		last_repeats++;
		if ((last_repeats & (last_repeats - 1)) == 0 && last_repeats >= 64) {
			char sum[600];
			snprintf(sum, sizeof(sum), "%s ... repeated %lu times", msg, last_repeats);
			emit(level, sum);
		}
		pthread_mutex_unlock(&log_lock);
		return;
	}
	if (last_repeats > 0) {
		char sum[600];
		snprintf(sum, sizeof(sum), "%s ... repeated %lu times", last_msg, last_repeats);
		emit(last_level, sum);
	}
	last_repeats = 0;
	last_level = level;
	last_time = now;
	snprintf(last_msg, sizeof(last_msg), "%s", msg);
	emit(level, msg);
	pthread_mutex_unlock(&log_lock);
}
