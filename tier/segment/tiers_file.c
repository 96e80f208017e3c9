/*
 * tiers_file — STATE_DIR/tiers, written at mount and read by spillway-fsck
 * (see tiers_file.h). Stateless; every function works on the caller's struct.
 */
#include "tier/segment/tiers_file.h"

#include "common/atomic_file.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int tiers_file_write(const char *state_dir, const struct tiers_file *tf)
{
	char path[4200], *buf = NULL;
	size_t len = 0;
	FILE *f;
	int ret = 0;

	snprintf(path, sizeof(path), "%s/tiers", state_dir);
	if (!(f = open_memstream(&buf, &len)))
		return -errno;
	fprintf(f, "# written by spillway at mount: where this filesystem's segments are\n");
	if (tf->have_uuid) {
		fprintf(f, "uuid=");
		for (int i = 0; i < 16; i++)
			fprintf(f, "%02x", tf->uuid[i]);
		fprintf(f, "\n");
	}
	fprintf(f, "chunk_size=%llu\n", (unsigned long long)tf->chunk_size);
	if (tf->nvme)
		fprintf(f, "nvme=%s\n", tf->nvme);
	if (tf->s3) {
		fprintf(f, "s3=%s\n", tf->s3);
		if (tf->s3_endpoint)
			fprintf(f, "s3_endpoint=%s\n", tf->s3_endpoint);
		if (tf->s3_region)
			fprintf(f, "s3_region=%s\n", tf->s3_region);
		fprintf(f, "s3_path_style=%d\n", tf->s3_path_style);
		if (tf->s3_credentials)
			fprintf(f, "s3_credentials=%s\n", tf->s3_credentials);
		if (tf->s3_ca_file)
			fprintf(f, "s3_ca_file=%s\n", tf->s3_ca_file);
		if (tf->s3_part_size)
			fprintf(f, "s3_part_size=%llu\n", (unsigned long long)tf->s3_part_size);
	}
	if (fclose(f) != 0)
		ret = -errno;
	if (ret == 0)
		ret = atomic_file_write(path, buf, len);
	free(buf);
	return ret;
}

static int hexval(int c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

static int parse_uuid(const char *s, uint8_t out[16])
{
	if (strlen(s) != 32)
		return -1;
	for (int i = 0; i < 16; i++) {
		int hi = hexval(s[2 * i]), lo = hexval(s[2 * i + 1]);
		if (hi < 0 || lo < 0)
			return -1;
		out[i] = (uint8_t)(hi << 4 | lo);
	}
	return 0;
}

/* Replace *slot by a copy of v. 0 or -ENOMEM. */
static int set_str(char **slot, const char *v)
{
	char *c = strdup(v);
	if (!c)
		return -ENOMEM;
	free(*slot);
	*slot = c;
	return 0;
}

/* The nvme value: kept whole and split at ':'. */
static int set_nvme(struct tiers_file *tf, const char *v)
{
	char *save = NULL, *copy;
	int ret;
	for (int i = 0; i < tf->nnvme; i++)
		free(tf->nvme_dir[i]);
	tf->nnvme = 0;
	if ((ret = set_str(&tf->nvme, v)) < 0 || !(copy = strdup(v)))
		return -ENOMEM;
	for (char *d = strtok_r(copy, ":", &save); d && tf->nnvme < TIERS_MAX_NVME;
	     d = strtok_r(NULL, ":", &save)) {
		if (!(tf->nvme_dir[tf->nnvme] = strdup(d))) {
			free(copy);
			return -ENOMEM;
		}
		tf->nnvme++;
	}
	free(copy);
	return 0;
}

static int parse_line(struct tiers_file *tf, const char *k, const char *v)
{
	if (!strcmp(k, "nvme"))
		return set_nvme(tf, v);
	if (!strcmp(k, "s3"))
		return set_str(&tf->s3, v);
	if (!strcmp(k, "s3_endpoint"))
		return set_str(&tf->s3_endpoint, v);
	if (!strcmp(k, "s3_region"))
		return set_str(&tf->s3_region, v);
	if (!strcmp(k, "s3_credentials"))
		return set_str(&tf->s3_credentials, v);
	if (!strcmp(k, "s3_ca_file"))
		return set_str(&tf->s3_ca_file, v);
	if (!strcmp(k, "s3_path_style"))
		tf->s3_path_style = atoi(v) != 0;
	else if (!strcmp(k, "s3_part_size"))
		tf->s3_part_size = strtoull(v, NULL, 10);
	else if (!strcmp(k, "chunk_size"))
		tf->chunk_size = strtoull(v, NULL, 10);
	else if (!strcmp(k, "uuid")) {
		if (parse_uuid(v, tf->uuid) < 0)
			return -EINVAL;
		tf->have_uuid = 1;
	}
	return 0;
}

int tiers_file_read(const char *state_dir, struct tiers_file *tf, char *err, size_t errlen)
{
	char path[4200], line[8192];
	FILE *fp;
	int lineno = 0, ret = 0;

	memset(tf, 0, sizeof(*tf));
	snprintf(path, sizeof(path), "%s/tiers", state_dir);
	if (!(fp = fopen(path, "re"))) {
		ret = -errno;
		snprintf(err, errlen, "%s: %s (not a spillway state directory?)", path,
			 strerror(-ret));
		return ret;
	}
	while (ret == 0 && fgets(line, sizeof(line), fp)) {
		char *v, *k = line, *nl = strchr(line, '\n');
		lineno++;
		if (nl)
			*nl = 0;
		if (!*k || *k == '#')
			continue;
		if (!(v = strchr(k, '='))) {
			snprintf(err, errlen, "%s:%d: not key=value: '%s'", path, lineno, k);
			ret = -EINVAL;
			break;
		}
		*v++ = 0;
		if ((ret = parse_line(tf, k, v)) == -EINVAL)
			snprintf(err, errlen, "%s:%d: bad %s '%s'", path, lineno, k, v);
		else if (ret < 0)
			snprintf(err, errlen, "%s: %s", path, strerror(-ret));
	}
	fclose(fp);
	return ret;
}

void tiers_file_free(struct tiers_file *tf)
{
	for (int i = 0; i < tf->nnvme; i++)
		free(tf->nvme_dir[i]);
	free(tf->nvme);
	free(tf->s3);
	free(tf->s3_endpoint);
	free(tf->s3_region);
	free(tf->s3_credentials);
	free(tf->s3_ca_file);
	memset(tf, 0, sizeof(*tf));
}
