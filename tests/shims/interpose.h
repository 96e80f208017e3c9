/*
 * interpose.h — what the test's LD_PRELOAD shims (tests/crash/spw_record.c,
 * tests/shims/spw_faultdir.c) share: reaching the real libc function, and
 * the one open(2) family that every entry point of it funnels into.
 */
#ifndef SPW_TEST_INTERPOSE_H
#define SPW_TEST_INTERPOSE_H

#include <dlfcn.h>
#include <fcntl.h>
#include <stdarg.h>
#include <sys/types.h>

/* REAL(int, openat, int, const char *, int, ...) declares get_openat(),
 * the next definition of openat after the shim's own (dlsym RTLD_NEXT). */
#define REAL(ret, name, ...)                                                        \
	static ret (*real_##name)(__VA_ARGS__);                                     \
	static ret (*get_##name(void))(__VA_ARGS__)                                 \
	{                                                                           \
		if (!real_##name)                                                   \
			real_##name = (ret(*)(__VA_ARGS__))dlsym(RTLD_NEXT, #name); \
		return real_##name;                                                 \
	}

/* The mode argument of an open that creates (variadic otherwise absent). */
#define MODE_ARG(flags)                                        \
	mode_t mode = 0;                                        \
	if ((flags) & (O_CREAT | __O_TMPFILE)) {                 \
		va_list ap;                                     \
		va_start(ap, flags);                            \
		mode = (mode_t)va_arg(ap, int);                 \
		va_end(ap);                                     \
	}

/* Every open(2) entry point of glibc (the _FORTIFY_SOURCE __open_2 ones and
 * creat included), each calling fn(dirfd, name, flags, mode). */
#define INTERPOSE_OPENS(fn)                                                      \
	int openat(int dirfd, const char *name, int flags, ...)                  \
	{                                                                        \
		MODE_ARG(flags)                                                  \
		return fn(dirfd, name, flags, mode);                             \
	}                                                                        \
	int openat64(int dirfd, const char *name, int flags, ...)                \
	{                                                                        \
		MODE_ARG(flags)                                                  \
		return fn(dirfd, name, flags, mode);                             \
	}                                                                        \
	int open(const char *name, int flags, ...)                               \
	{                                                                        \
		MODE_ARG(flags)                                                  \
		return fn(AT_FDCWD, name, flags, mode);                          \
	}                                                                        \
	int open64(const char *name, int flags, ...)                             \
	{                                                                        \
		MODE_ARG(flags)                                                  \
		return fn(AT_FDCWD, name, flags, mode);                          \
	}                                                                        \
	int __open_2(const char *name, int flags)                                \
	{                                                                        \
		return fn(AT_FDCWD, name, flags, 0);                             \
	}                                                                        \
	int __open64_2(const char *name, int flags)                              \
	{                                                                        \
		return fn(AT_FDCWD, name, flags, 0);                             \
	}                                                                        \
	int __openat_2(int dirfd, const char *name, int flags)                   \
	{                                                                        \
		return fn(dirfd, name, flags, 0);                                \
	}                                                                        \
	int __openat64_2(int dirfd, const char *name, int flags)                 \
	{                                                                        \
		return fn(dirfd, name, flags, 0);                                \
	}                                                                        \
	int creat(const char *name, mode_t mode)                                 \
	{                                                                        \
		return fn(AT_FDCWD, name, O_WRONLY | O_CREAT | O_TRUNC, mode);   \
	}                                                                        \
	int creat64(const char *name, mode_t mode)                               \
	{                                                                        \
		return fn(AT_FDCWD, name, O_WRONLY | O_CREAT | O_TRUNC, mode);   \
	}

#endif
