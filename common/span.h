/*
 * span — trimming a byte span [b, e) from both ends, and a NUL-terminated
 * string in place, so parsers do not each hand-roll the two loops. Pure,
 * thread-safe; never reads outside the span.
 */
#ifndef SPW_SPAN_H
#define SPW_SPAN_H

#include <string.h>

/* All C-locale whitespace: what isspace() accepts ("\f" and "\v" too). */
#define SPAN_SPACE " \t\n\v\f\r"

/* Move *b past every leading byte of [*b, e) found in set (never a NUL). */
static inline void span_ltrim(const char **b, const char *e, const char *set)
{
	while (*b < e && **b && strchr(set, **b))
		(*b)++;
}

/* Move *e back past every trailing byte of [b, *e) found in set (never a NUL). */
static inline void span_rtrim(const char *b, const char **e, const char *set)
{
	while (*e > b && (*e)[-1] && strchr(set, (*e)[-1]))
		(*e)--;
}

/* Narrow [*b, *e) past every leading and trailing byte found in set. */
static inline void span_trim(const char **b, const char **e, const char *set)
{
	span_ltrim(b, *e, set);
	span_rtrim(*b, e, set);
}

/* s without its leading and trailing SPAN_SPACE; the tail is cut in place. */
static inline char *str_trim(char *s)
{
	const char *b = s, *e = s + strlen(s);

	span_trim(&b, &e, SPAN_SPACE);
	s[e - s] = 0;
	return s + (b - s);
}

#endif
