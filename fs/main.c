/*
 * spillway — a FUSE filesystem whose files live in RAM (a tmpfs hot tier)
 * and spill to NVMe directories in large segments when RAM runs short.
 * main() builds the one context (struct spw), validates the options, mounts,
 * and runs libfuse's multi-threaded session loop.
 */
#include "common/heap.h"
#include "common/log.h"
#include "fs/fs_i.h"
#include "fs/options.h"
#include "tier/hot/hot.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <unistd.h>
#include <linux/capability.h>

static void inval_cb(void *arg, uint64_t ino, uint64_t off, uint64_t len)
{
	struct spw *s = arg;
	fuse_lowlevel_notify_inval_inode(s->se, ino, (off_t)off, (off_t)len);
}

#ifdef SPW_PASSTHROUGH
/* tier_pt_ops: the hot file handed to the kernel under a backing id (an
 * ioctl on /dev/fuse; it never waits for a request). ctx is the request. */
static int pt_open_cb(void *ctx, int fd)
{
	int id;
	errno = 0;
	id = fuse_passthrough_open((fuse_req_t)ctx, fd);
	return id > 0 ? id : -(errno ? errno : EIO);
}

static void pt_close_cb(void *ctx, int32_t id)
{
	fuse_passthrough_close((fuse_req_t)ctx, id);
}

static const struct tier_pt_ops pt_ops = {.open = pt_open_cb, .close = pt_close_cb};

/* The kernel registers backing files only for CAP_SYS_ADMIN. */
static int has_cap_sys_admin(void)
{
	struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3};
	struct __user_cap_data_struct d[2];
	if (syscall(SYS_capget, &h, d) < 0)
		return 0;
	return (d[CAP_SYS_ADMIN / 32].effective >> (CAP_SYS_ADMIN % 32)) & 1;
}
#endif

/* Hand hot files to the kernel where it can take them (FUSE passthrough:
 * kernel 6.9+, libfuse 3.17+, CAP_SYS_ADMIN), else say once why not. */
static void init_passthrough(struct spw *s, struct fuse_conn_info *conn)
{
	const char *why = NULL;
	if (!s->cfg.passthrough)
		why = "passthrough=off";
#ifdef SPW_PASSTHROUGH
	else if (!(conn->capable & FUSE_CAP_PASSTHROUGH))
		why = "the kernel offers no FUSE passthrough (6.9 or newer has it)";
	else if (!has_cap_sys_admin())
		why = "the daemon lacks CAP_SYS_ADMIN (a user mount)";
	if (!why) {
		conn->want |= FUSE_CAP_PASSTHROUGH;
		/* the kernel takes no passthrough with a writeback cache */
		conn->want &= ~FUSE_CAP_WRITEBACK_CACHE;
		conn->max_backing_stack_depth = FUSE_BACKING_STACKED_UNDER;
		tier_set_passthrough(s->tier, &pt_ops);
		s->passthrough = 1;
		log_info("passthrough on: files all in RAM are read by the kernel from the hot tier");
		return;
	}
#else
	else
		why = "built with libfuse older than 3.17";
#endif
	log_info("passthrough off (%s): every read goes through the daemon", why);
}

/* Whether libfuse can take requests over io_uring: built against 3.18+
 * headers and running with a 3.18+ library; why not, or NULL. */
static const char *uring_lib_why(void)
{
#ifdef FUSE_CAP_OVER_IO_URING
	if (fuse_version() < 318)
		return "libfuse older than 3.18 at run time";
	return NULL;
#else
	return "built with libfuse older than 3.18";
#endif
}

/* FUSE over io_uring (io_uring=on): the session was created with libfuse's
 * -o io_uring (main); it starts its rings after this INIT when the kernel
 * offers them. Says once why it stays off. */
static void init_uring(struct spw *s, struct fuse_conn_info *conn)
{
	const char *why = uring_lib_why();

	if (!s->cfg.io_uring)
		return;
#ifdef FUSE_CAP_OVER_IO_URING
	if (!why && !(conn->capable_ext & FUSE_CAP_OVER_IO_URING)) {
		char param[8] = "";
		FILE *f;
		if ((f = fopen("/sys/module/fuse/parameters/enable_uring", "r"))) {
			if (!fgets(param, sizeof(param), f))
				param[0] = '\0';
			fclose(f);
		}
		why = param[0] == 'N' ? "the kernel's FUSE io_uring is disabled: "
					"/sys/module/fuse/parameters/enable_uring is N"
					: "the kernel has no FUSE io_uring (Linux 6.14+, "
					  "CONFIG_FUSE_IO_URING)";
	}
	if (!why) {
		conn->want_ext |= FUSE_CAP_OVER_IO_URING;
		log_info("io_uring on: FUSE requests over one ring per CPU (libfuse %s)",
			 fuse_pkgversion());
		return;
	}
#endif
	log_info("io_uring off (%s): requests go through /dev/fuse", why);
}

/*
 * The largest FUSE request to ask for: what fs.fuse.max_pages_limit allows
 * (Linux 6.13+; 256 pages, 1 MiB, by default), at most SPW_REQUEST_MAX. An
 * administrator who raised it gets larger writes and reads where the daemon
 * serves (bench/bench_reqsize.py measures what they give); spillway never
 * changes it. libfuse (3.17+) sizes its buffers from the same limit and
 * caps max_write to them.
 */
#define SPW_REQUEST_MAX (4u << 20)
static unsigned request_max(void)
{
	unsigned long pages = 0;
	FILE *f = fopen("/proc/sys/fs/fuse/max_pages_limit", "r");

	if (f) {
		if (fscanf(f, "%lu", &pages) != 1)
			pages = 0;
		fclose(f);
	}
	if (pages * 4096 <= (1u << 20))
		return 1u << 20;
	return pages * 4096 < SPW_REQUEST_MAX ? (unsigned)(pages * 4096) : SPW_REQUEST_MAX;
}

/* Raise the mount's readahead so sequential reads arrive in requests of
 * request_max() (1 MiB by default). Runs in its own thread: stat() of the
 * mountpoint needs the session loop. */
static void *tune_readahead(void *arg)
{
	struct spw *s = arg;
	struct stat st;
	char path[128];
	FILE *f;

	if (stat(s->cfg.mountpoint, &st) < 0)
		return NULL;
	snprintf(path, sizeof(path), "/sys/class/bdi/%u:%u/read_ahead_kb", major(st.st_dev),
		 minor(st.st_dev));
	f = fopen(path, "w");
	if (!f) {
		log_debug("readahead: cannot open %s: %s", path, strerror(errno));
		return NULL;
	}
	fprintf(f, "%u\n", request_max() >> 10);
	if (fclose(f) != 0)
		log_debug("readahead: cannot set %s: %s", path, strerror(errno));
	return NULL;
}

/*
 * The read size to mount with (max_read), given the FUSE options in args:
 * the user's max_read when set, else the largest reply libfuse can splice
 * from the hot file (one copy) instead of reading it into a malloc'ed buffer
 * and writing that (two copies, page faults on a fresh buffer): its pipe
 * must hold the reply plus 3 pages and a header, and F_SETPIPE_SZ may stop at
 * fs.pipe-max-size (1 MiB by default), so the kernel's 1 MiB read requests
 * all took the copy path. 0: no cap needed (the pipe can grow enough).
 */
/* Whether a pipe of this process can grow to hold n bytes. */
static int pipe_can_hold(size_t n)
{
	int p[2], ok;
	if (pipe(p) < 0)
		return 0;
	ok = fcntl(p[0], F_SETPIPE_SZ, (int)n) >= (int)n;
	close(p[0]);
	close(p[1]);
	return ok;
}

static unsigned mount_max_read(const struct fuse_args *args, int *given)
{
	unsigned long pmax = 0;
	FILE *f;

	*given = 0;
	for (int i = 0; i < args->argc; i++) {
		const char *m = strstr(args->argv[i], "max_read=");
		if (m && (m == args->argv[i] || m[-1] == ',' || m[-1] == 'o')) {
			*given = 1;
			return (unsigned)strtoul(m + 9, NULL, 10);
		}
	}
	if (pipe_can_hold((1 << 20) + 4 * 4096) || !(f = fopen("/proc/sys/fs/pipe-max-size", "r")))
		return 0;
	if (fscanf(f, "%lu", &pmax) != 1)
		pmax = 0;
	fclose(f);
	if (pmax < (256u << 10) || pmax >= (1u << 20) + 4 * 4096)
		return 0;
	return (unsigned)((pmax - 4 * 4096) / 4096 * 4096);
}

static void op_init(void *userdata, struct fuse_conn_info *conn)
{
	struct spw *s = userdata;
	pthread_t th;
	unsigned req = request_max();

	conn->max_write = req;
	conn->max_read = s->max_read; /* libfuse wants the mount option's value */
	conn->max_readahead = conn->max_readahead > req ? conn->max_readahead : req;
	if (conn->capable & FUSE_CAP_SPLICE_WRITE)
		conn->want |= FUSE_CAP_SPLICE_WRITE | FUSE_CAP_SPLICE_MOVE;
	/* libfuse splices requests in (its default with write_buf) through a
	 * per-thread pipe that must hold max_write and a page: past
	 * fs.pipe-max-size (1 MiB) that needs CAP_SYS_RESOURCE. When the pipe
	 * cannot grow so far, libfuse (3.17, 3.18) then gives up growing it at
	 * all (grow_pipe_to_max trips on the newline of pipe-max-size): the
	 * thread's pipe stays at 64 KiB and every larger read reply took the
	 * copy path, a malloc'ed 1 MiB buffer and a pread per request. Receive
	 * with read() then, and the replies splice. */
	if (!pipe_can_hold(conn->max_write + 4096))
		conn->want &= ~FUSE_CAP_SPLICE_READ;
	if (conn->capable & FUSE_CAP_PARALLEL_DIROPS)
		conn->want |= FUSE_CAP_PARALLEL_DIROPS;
	/* all changes pass through us: no need to compare mtimes */
	conn->want &= ~FUSE_CAP_AUTO_INVAL_DATA;
	/* file handles (open_by_handle_at, NFS export) name the inode number,
	 * which the index keeps for the file's life and never reuses, across
	 * remounts too: the kernel looks up "." of it, and ".." of a
	 * directory (idx_lookup) */
	if (conn->capable & FUSE_CAP_EXPORT_SUPPORT)
		conn->want |= FUSE_CAP_EXPORT_SUPPORT;
	/* POSIX ACLs: the kernel enforces them (it needs default_permissions,
	 * so only when that was asked for); the daemon stores them and
	 * applies the umask itself, which a default ACL replaces */
	if (s->cfg.default_permissions && (conn->capable & FUSE_CAP_POSIX_ACL) &&
	    (conn->capable & FUSE_CAP_DONT_MASK)) {
		conn->want |= FUSE_CAP_POSIX_ACL | FUSE_CAP_DONT_MASK;
		s->acl = 1;
	}
	init_passthrough(s, conn);
	init_uring(s, conn);
	if (pthread_create(&th, NULL, tune_readahead, s) == 0)
		pthread_detach(th);
}


static void usage(const char *prog)
{
	printf("usage: %s [options] MOUNTPOINT\n\n", prog);
	printf("    -f                     stay in the foreground\n"
	       "    -d                     debug output (implies -f)\n"
	       "    -s                     single-threaded\n"
	       "    -o opt,[opt...]        mount options\n"
	       "    -h, --help             this help\n"
	       "    -V, --version          version\n\n");
	opt_help();
	printf("\nFUSE options:\n");
	fuse_lowlevel_help();
}

/*
 * mount(8) runs helpers as "spillway SOURCE MOUNTPOINT -o ...": drop the
 * source word. And say plainly when the mountpoint does not exist, before
 * libfuse reports it its own way. Returns 0, or 1 after printing the error.
 */
static int fix_argv(int *argc, char *argv[])
{
	int pos[3], npos = 0;
	for (int i = 1; i < *argc; i++) {
		if (strcmp(argv[i], "-o") == 0) {
			i++; /* its value */
			continue;
		}
		if (argv[i][0] == '-')
			continue;
		if (npos < 3)
			pos[npos] = i;
		npos++;
	}
	if (npos == 2) {
		for (int i = pos[0]; i < *argc - 1; i++)
			argv[i] = argv[i + 1];
		(*argc)--;
		argv[*argc] = NULL;
		pos[0] = pos[1] - 1;
		npos = 1;
	}
	if (npos == 1) {
		char real[PATH_MAX];
		if (!realpath(argv[pos[0]], real)) {
			fprintf(stderr, "spillway: mountpoint '%s': %s\n", argv[pos[0]],
				strerror(errno));
			return 1;
		}
	} else if (npos > 2) {
		fprintf(stderr, "spillway: too many arguments (usage: spillway [options] "
				"MOUNTPOINT)\n");
		return 1;
	}
	return 0;
}

int main(int argc, char *argv[])
{
	/* the option lists of man/spillway.8 and README.md, from the options table */
	if (argc == 2 && !strcmp(argv[1], "--help-man")) {
		opt_doc(stdout, OPT_DOC_MAN);
		return 0;
	}
	if (argc == 2 && !strcmp(argv[1], "--help-readme")) {
		opt_doc(stdout, OPT_DOC_README);
		return 0;
	}
	if (fix_argv(&argc, argv))
		return 1;
	heap_tune(); /* before any thread: common/heap.h */
	struct fuse_args args = FUSE_ARGS_INIT(argc, argv);
	struct fuse_cmdline_opts opts = {0};
	struct fuse_loop_config *lcfg = NULL;
	struct spw s = {.entry_timeout = 10.0, .attr_timeout = 10.0,
			.files_lock = PTHREAD_MUTEX_INITIALIZER};
	sigset_t stop_sigs, old_mask;
	char err[1024];
	int ret = 1;

	if (fuse_parse_cmdline(&args, &opts) != 0) {
		fprintf(stderr, "spillway: cannot parse the command line (see spillway --help)\n");
		goto out_args;
	}
	if (opts.show_help) {
		usage(argv[0]);
		ret = 0;
		goto out_args;
	}
	if (opts.show_version) {
		printf("spillway %s (libfuse %s)\n", SPW_VERSION, fuse_pkgversion());
		ret = 0;
		goto out_args;
	}
	if (opt_parse(&args, opts.mountpoint, &s.cfg, err, sizeof(err)) < 0) {
		fprintf(stderr, "spillway: %s\n", err);
		goto out_cfg;
	}
	spw_log_level = opts.debug ? LOG_DEBUG : s.cfg.log_level;
	/* Our background threads must not take SIGTERM/SIGINT/SIGHUP: libfuse's
	 * handler would end the session, but the loop's main thread would sleep
	 * on. They inherit this mask; the main thread unblocks them below. */
	sigemptyset(&stop_sigs);
	sigaddset(&stop_sigs, SIGTERM);
	sigaddset(&stop_sigs, SIGINT);
	sigaddset(&stop_sigs, SIGHUP);
	pthread_sigmask(SIG_BLOCK, &stop_sigs, &old_mask);

	if (idx_new(s.cfg.chunk_size, &s.idx) < 0) {
		fprintf(stderr, "spillway: out of memory\n");
		goto out_cfg;
	}
	if (tier_new(&s.cfg, s.idx, &s.tier, err, sizeof(err)) < 0) {
		fprintf(stderr, "spillway: %s\n", err);
		if (s.cfg.hot_dir_made) /* a failed mount leaves nothing behind */
			hot_dir_unmake(s.cfg.hot_dir);
		goto out_idx;
	}
	tier_set_inval(s.tier, inval_cb, &s);

	struct fuse_lowlevel_ops ops = {.init = op_init};
	fs_fill_ops(&ops); /* every op timed (ops_timed.c) */
	{
		int given;
		char mr[32];
		s.max_read = mount_max_read(&args, &given);
		if (s.max_read && !given) {
			snprintf(mr, sizeof(mr), "-omax_read=%u", s.max_read);
			if (fuse_opt_add_arg(&args, mr) != 0)
				goto out_tier;
		}
	}
	/* libfuse's own switch for its rings (3.18+); init_uring says whether
	 * they run */
	if (s.cfg.io_uring && !uring_lib_why() && fuse_opt_add_arg(&args, "-oio_uring") != 0)
		goto out_tier;
	s.se = fuse_session_new(&args, &ops, sizeof(ops), &s);
	if (!s.se) {
		fprintf(stderr, "spillway: cannot create the FUSE session (bad FUSE option?)\n");
		goto out_tier;
	}
	if (fuse_set_signal_handlers(s.se) != 0)
		goto out_session;
	if (fuse_session_mount(s.se, s.cfg.mountpoint) != 0) {
		fprintf(stderr, "spillway: cannot mount on '%s'\n", s.cfg.mountpoint);
		goto out_signals;
	}
	if (!opts.foreground)
		spw_log_to_syslog();
	if (fuse_daemonize(opts.foreground) != 0)
		goto out_unmount;
	if (tier_start(s.tier) < 0) {
		log_err("cannot start background workers");
		goto out_unmount;
	}
	pthread_sigmask(SIG_SETMASK, &old_mask, NULL);
	log_info("mounted %s (hot_dir %s, hot_size %lluM, chunk_size %lluM)", s.cfg.mountpoint,
		 s.cfg.hot_dir, (unsigned long long)(s.cfg.hot_size >> 20),
		 (unsigned long long)(s.cfg.chunk_size >> 20));

	if (opts.singlethread) {
		ret = fuse_session_loop(s.se);
	} else {
		lcfg = fuse_loop_cfg_create();
		fuse_loop_cfg_set_clone_fd(lcfg, opts.clone_fd);
		if (opts.max_idle_threads != UINT_MAX)
			fuse_loop_cfg_set_idle_threads(lcfg, opts.max_idle_threads);
		if (opts.max_threads > 0 && opts.max_threads <= 100000)
			fuse_loop_cfg_set_max_threads(lcfg, opts.max_threads);
		ret = fuse_session_loop_mt(s.se, lcfg);
		fuse_loop_cfg_destroy(lcfg);
	}
	/* a loop ended by SIGTERM/SIGINT/SIGHUP returns the signal: that is a
	 * requested stop, the same clean unmount as umount(8) */
	if (ret == SIGTERM || ret == SIGINT || ret == SIGHUP) {
		log_info("signal %d: unmounting as umount does", ret);
		ret = 0;
	}
	/* the kernel aborts the connection when the last reference to a
	 * lazily unmounted mount goes (fuse_sb_destroy): the read then fails
	 * with ECONNABORTED instead of ENODEV, as it happens to race; the
	 * same unmount either way (the flush below is the same) */
	if (ret == -ECONNABORTED) {
		log_info("the kernel ended the connection: unmounting");
		ret = 0;
	}
	ret = ret != 0;
	log_info("unmounting %s", s.cfg.mountpoint);
	tier_stop(s.tier); /* before the session goes: workers send notifications */
out_unmount:
	fuse_session_unmount(s.se);
out_signals:
	fuse_remove_signal_handlers(s.se);
out_session:
	fuse_session_destroy(s.se);
	fs_files_free_all(&s);
out_tier:
	tier_stop(s.tier);
	/* The flush to the cold tier is bounded; a stray SIGTERM now (systemd
	 * signals what is left of a mount unit after umount) must not cut it
	 * short. SIGKILL still ends it: the hot files stay, as after kill -9. */
	pthread_sigmask(SIG_BLOCK, &stop_sigs, NULL);
	tier_detach(s.tier); /* with a journal: last checkpoint, keep the data */
	idx_free(s.idx);     /* without: drops hot files through the release hook */
	s.idx = NULL;
	tier_free(s.tier);
out_idx:
	idx_free(s.idx);
out_cfg:
	opt_free(&s.cfg);
out_args:
	free(opts.mountpoint);
	fuse_opt_free_args(&args);
	return ret;
}
