#include "common/size.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

int size_parse(const char *s, uint64_t *out)
{
	char *end;
	unsigned long long v;
	uint64_t mult = 1;

	if (!s || !isdigit((unsigned char)s[0]))
		return -EINVAL; /* rejects "", "-5G", "+1", " 1" */
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno == ERANGE)
		return -ERANGE;
	switch (toupper((unsigned char)*end)) {
	case 'K':
		mult = 1ULL << 10;
		end++;
		break;
	case 'M':
		mult = 1ULL << 20;
		end++;
		break;
	case 'G':
		mult = 1ULL << 30;
		end++;
		break;
	case 'T':
		mult = 1ULL << 40;
		end++;
		break;
	}
	if (mult > 1 && strcasecmp(end, "iB") == 0)
		end += 2;
	else if (toupper((unsigned char)*end) == 'B')
		end++;
	if (*end != '\0')
		return -EINVAL;
	if (v > UINT64_MAX / mult)
		return -ERANGE;
	*out = v * mult;
	return 0;
}

int duration_parse_ms(const char *s, uint64_t *out_ms)
{
	char *end;
	double v;
	double mult = 1000;

	if (!s || !(isdigit((unsigned char)s[0]) || s[0] == '.'))
		return -EINVAL;
	errno = 0;
	v = strtod(s, &end);
	if (errno == ERANGE || !isfinite(v))
		return -ERANGE;
	if (strcmp(end, "ms") == 0)
		mult = 1;
	else if (strcmp(end, "s") == 0 || *end == '\0')
		mult = 1000;
	else if (strcmp(end, "m") == 0 || strcmp(end, "min") == 0)
		mult = 60000;
	else if (strcmp(end, "h") == 0)
		mult = 3600000;
	else
		return -EINVAL;
	if (v * mult > 1e15)
		return -ERANGE;
	*out_ms = (uint64_t)(v * mult + 0.5);
	return 0;
}

int fraction_parse(const char *s, double *out)
{
	char *end;
	double v;

	if (!s || !(isdigit((unsigned char)s[0]) || s[0] == '.'))
		return -EINVAL;
	errno = 0;
	v = strtod(s, &end);
	if (*end != '\0' || errno == ERANGE || !isfinite(v))
		return -EINVAL;
	if (v < 0 || v > 1)
		return -ERANGE;
	*out = v;
	return 0;
}

char *size_format(uint64_t v, char *buf, int len)
{
	static const char suf[] = "BKMGTP";
	double d = (double)v;
	int i = 0;

	while (d >= 1024 && i < 5) {
		d /= 1024;
		i++;
	}
	if (i == 0)
		snprintf(buf, len, "%llu", (unsigned long long)v);
	else
		snprintf(buf, len, "%.1f%c", d, suf[i]);
	return buf;
}
