/*
 * test_fs_acl — POSIX ACLs in their xattr form (fs/acl.c): what is well
 * formed, the mode an access ACL implies, a chmod's and a create's rules
 * (the VFS's posix_acl_equiv_mode, chmod_masq, create_masq).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "fs/acl.h"

#include <errno.h>
#include <string.h>
#include <sys/stat.h>

enum { UO = 1, U = 2, GO = 4, G = 8, M = 16, O = 32 };

/* An ACL value of n (tag, perm, id) entries into buf; its size. */
static size_t mk(unsigned char *buf, int n, const unsigned (*e)[3])
{
	memset(buf, 0, 4);
	buf[0] = 2; /* version */
	for (int i = 0; i < n; i++) {
		unsigned char *p = buf + 4 + 8 * i;
		p[0] = (unsigned char)e[i][0];
		p[1] = (unsigned char)(e[i][0] >> 8);
		p[2] = (unsigned char)e[i][1];
		p[3] = 0;
		p[4] = (unsigned char)e[i][2];
		p[5] = p[6] = p[7] = 0;
	}
	return 4 + 8 * (size_t)n;
}

static unsigned perm(const unsigned char *buf, int i)
{
	return buf[4 + 8 * i + 2];
}

static void test_well_formed(void **state)
{
	(void)state;
	unsigned char b[128];
	static const unsigned base[][3] = {{UO, 6, 0}, {GO, 4, 0}, {O, 4, 0}};
	static const unsigned named_no_mask[][3] = {{UO, 6, 0}, {U, 6, 65534}, {GO, 4, 0}, {O, 4, 0}};
	static const unsigned two_owners[][3] = {{UO, 6, 0}, {UO, 6, 0}, {GO, 4, 0}, {O, 4, 0}};
	static const unsigned bad_perm[][3] = {{UO, 8, 0}, {GO, 4, 0}, {O, 4, 0}};
	assert_int_equal(acl_entries(b, mk(b, 3, base)), 3);
	assert_int_equal(acl_entries(b, mk(b, 0, base)), 0); /* empty: none */
	assert_int_equal(acl_entries(b, mk(b, 4, named_no_mask)), -EINVAL);
	assert_int_equal(acl_entries(b, mk(b, 4, two_owners)), -EINVAL);
	assert_int_equal(acl_entries(b, mk(b, 3, bad_perm)), -EINVAL);
	assert_int_equal(acl_entries(b, 3), -EINVAL);
	assert_int_equal(acl_entries(b, mk(b, 3, base) - 1), -EINVAL);
	b[0] = 1; /* version */
	assert_int_equal(acl_entries(b, 4 + 24), -EINVAL);
}

static void test_equiv_mode(void **state)
{
	(void)state;
	unsigned char b[128];
	static const unsigned base[][3] = {{UO, 7, 0}, {GO, 5, 0}, {O, 1, 0}};
	static const unsigned named[][3] = {
	    {UO, 6, 0}, {U, 7, 65534}, {GO, 4, 0}, {M, 6, 0}, {O, 0, 0}};
	mode_t mode = S_IFREG | S_ISGID | 0644;
	assert_int_equal(acl_equiv_mode(b, mk(b, 3, base), &mode), 0);
	assert_int_equal(mode, S_IFREG | S_ISGID | 0751);
	/* the group bits show the mask, not the group entry */
	assert_int_equal(acl_equiv_mode(b, mk(b, 5, named), &mode), 1);
	assert_int_equal(mode, S_IFREG | S_ISGID | 0660);
}

static void test_chmod_sets_mask_not_group(void **state)
{
	(void)state;
	unsigned char b[128];
	static const unsigned named[][3] = {
	    {UO, 6, 0}, {U, 7, 65534}, {GO, 4, 0}, {M, 7, 0}, {O, 4, 0}};
	static const unsigned base[][3] = {{UO, 6, 0}, {GO, 4, 0}, {O, 4, 0}};
	size_t n = mk(b, 5, named);
	assert_int_equal(acl_chmod(b, n, 0750), 0);
	assert_int_equal(perm(b, 0), 7); /* owner */
	assert_int_equal(perm(b, 1), 7); /* named user: kept */
	assert_int_equal(perm(b, 2), 4); /* group entry: kept */
	assert_int_equal(perm(b, 3), 5); /* mask */
	assert_int_equal(perm(b, 4), 0); /* other */
	n = mk(b, 3, base);
	assert_int_equal(acl_chmod(b, n, 0570), 0);
	assert_int_equal(perm(b, 0), 5);
	assert_int_equal(perm(b, 1), 7); /* no mask: the group entry */
	assert_int_equal(perm(b, 2), 0);
}

static void test_create_masks_both_ways(void **state)
{
	(void)state;
	unsigned char b[128];
	/* a default ACL u::rwx,u:nobody:rwx,g::r-x,m::rwx,o::--- and a file made 0666 */
	static const unsigned def[][3] = {
	    {UO, 7, 0}, {U, 7, 65534}, {GO, 5, 0}, {M, 7, 0}, {O, 0, 0}};
	static const unsigned base[][3] = {{UO, 7, 0}, {GO, 5, 0}, {O, 5, 0}};
	mode_t mode = S_IFREG | 0666;
	size_t n = mk(b, 5, def);
	assert_int_equal(acl_create(b, n, &mode), 1);
	assert_int_equal(mode, S_IFREG | 0660);
	assert_int_equal(perm(b, 0), 6);
	assert_int_equal(perm(b, 1), 7); /* named: kept, the mask limits it */
	assert_int_equal(perm(b, 2), 5);
	assert_int_equal(perm(b, 3), 6);
	assert_int_equal(perm(b, 4), 0);
	/* only the three base entries: the mode says it all */
	mode = S_IFDIR | 0777;
	n = mk(b, 3, base);
	assert_int_equal(acl_create(b, n, &mode), 0);
	assert_int_equal(mode, S_IFDIR | 0755);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_well_formed),
	    cmocka_unit_test(test_equiv_mode),
	    cmocka_unit_test(test_chmod_sets_mask_not_group),
	    cmocka_unit_test(test_create_masks_both_ways),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
