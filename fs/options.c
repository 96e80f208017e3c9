/*
 * options.c — the mount options' table, their parsing (steps 1-3 below),
 * the rules between options, and the option lists rendered as --help, man
 * page and README text. The checks that look at the world (step 4) are in
 * options_check.c; options_i.h carries what the two share.
 *
 * DESIGN. Every mount option is one row of opt_table[] below: its name, its
 * kind (how the value is spelled), the field of struct spw_config it fills,
 * its bounds, its default, and its help, README and man text. opt_parse
 * runs in four steps, each driven by the table:
 *   1. collect: opt_proc files each "name=value" / "name" under its row
 *      (the rest is libfuse's, or an fstab word, or unknown);
 *   2. defaults: each row's default, parsed as if the user had written it;
 *   3. values: each given value parsed and bounded by its kind (pure);
 *   4. world: rows with a check hook look at the filesystem in table order
 *      (hot_dir first: it may be created, and is removed on any failure);
 *      then computed defaults (those two: options_check.c) and the
 *      cross-field rules (opt_cross).
 * A failure is one line: "option 'NAME': invalid value 'VALUE': ACCEPTED".
 * --help, the man page's option list and the README's options table are
 * rendered from the same rows by opt_doc().
 */
#include "fs/options_i.h"

#include "common/log.h"
#include "common/size.h"
#include "tier/hot/hot.h"
#include "tier/hot/pressure.h"
#include "tier/store/store_s3.h"

#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/statvfs.h>
#include <unistd.h>

#define FIELD(f) .off = offsetof(struct spw_config, f), .width = sizeof(((struct spw_config *)0)->f)
#define WORDS(...)                                                                                 \
	.words = (const struct opt_word[])                                                         \
	{                                                                                          \
		__VA_ARGS__,                                                                       \
		{                                                                                  \
			NULL, 0, 0                                                                 \
		}                                                                                  \
	}

/* The fraction kind's range is fixed: (0, 1]. */
#define FRACTION_ACCEPTED "expected a fraction above 0 and at most 1"

const struct opt_spec opt_table[] = {
    /* ---- hot tier ---- */
    {.name = "hot_dir",
     .kind = OPT_PATH,
     FIELD(hot_dir),
     .check = opt_check_hot_dir,
     .section = "Hot tier",
     .meta = "DIR",
     .def_doc = "/dev/shm/spillway-<uid>-<hash>",
     .help = "tmpfs directory for hot data (created 0700, locked; an existing one "
	     "only if empty or spillway's)",
     .man_tag = ".BI %s= dir",
     .man = "The tmpfs directory for hot data; created with mode 0700 if missing, and\n"
	    "locked so that two daemons never share it (a mount waits, at most 60 s,\n"
	    "for a daemon that is still finishing its unmount of it).\n"
	    "An existing directory is taken only when it is empty or spillway can prove\n"
	    "it is this filesystem's: its marker file\n"
	    ".B .spillway-hot\n"
	    "names this filesystem's uuid (or a volatile mount's id, or is an older\n"
	    "spillway's and the index knows every hot file in it), and it holds nothing\n"
	    "but hot files, the marker and spillway's\n"
	    ".BR .lock ;\n"
	    "anything else (and\n"
	    ".BR / )\n"
	    "is refused untouched, with one line saying why.\n"
	    "Must not lie inside the mountpoint.\n"
	    "The default's hash is derived from the mountpoint.\n"},
    {.name = "hot_size",
     .kind = OPT_SIZE,
     FIELD(hot_size),
     .max = UINT64_MAX,
     .meta = "SIZE",
     .def_doc = "half of hot_dir's filesystem",
     .help = "RAM budget: the ceiling (less under memory pressure)",
     .man_tag = ".BI %s= size",
     .man = "The RAM budget: hot data never takes more.\n"
	    "At least two chunks, at most the size of the filesystem holding\n"
	    ".IR hot_dir .\n"},
    {.name = "hot_min",
     .kind = OPT_SIZE,
     FIELD(hot_min),
     .max = UINT64_MAX,
     .meta = "SIZE",
     .def_doc = "hot_size/8, at least two chunks",
     .help = "the budget never shrinks below this under memory pressure (2 chunks..hot_size)",
     .man_tag = ".BI %s= size",
     .man = "The floor of the budget under memory pressure: it never shrinks below this.\n"
	    "Two chunks to\n"
	    ".BR hot_size .\n"},
    {.name = "mem_reserve",
     .kind = OPT_SIZE,
     FIELD(mem_reserve),
     .max = UINT64_MAX,
     .flags = OPT_OFF_IS_ZERO,
     .meta = "SIZE",
     .def_doc = "5% of the daemon's memory cgroup limit, or of RAM; at most 1G",
     .help = "keep this much of the node's, or the daemon's cgroup's, memory available "
	     "(at most half of it); 0/off: only PSI shrinks the budget",
     .man_tag = ".BI %s= size",
     .man = "Keep at least this much of the node's memory (or of the daemon's memory\n"
	    "cgroup, whichever is less) available: the budget is\n"
	    ".RB \"hot used + available \\- \" mem_reserve ,\n"
	    "between\n"
	    ".B hot_min\n"
	    "and\n"
	    ".BR hot_size .\n"
	    ".B 0\n"
	    "or\n"
	    ".BR off :\n"
	    "only PSI memory pressure shrinks the budget.\n"
	    "The cgroup's limit (v1 or v2) is the tightest of the daemon's memory\n"
	    "cgroup and its ancestors, read at mount.\n"
	    "A given value above half of that limit (or of the node's RAM, when\n"
	    "smaller) is refused.\n"},
    {.name = "mem_pressure",
     .kind = OPT_ENUM,
     FIELD(mem_pressure),
     WORDS({"on", 1, 0}, {"off", 0, 0}),
     .def = "on",
     .meta = "on|off",
     .help = "off: the budget stays hot_size whatever the node needs",
     .man_tag = ".BR %s= on | off",
     .man = "Follow memory pressure (PSI, MemAvailable, the cgroup's limit): shrink the\n"
	    "budget at once when the node needs memory (the evictor spills down to it,\n"
	    "writers wait), grow it back by 10% of\n"
	    ".B hot_size\n"
	    "every 2 s after 10 s without pressure.\n"
	    "Each change is logged and shown in the stats.\n"},
    {.name = "passthrough",
     .kind = OPT_ENUM,
     FIELD(passthrough),
     WORDS({"on", 1, 0}, {"off", 0, 0}),
     .def = "on",
     .meta = "on|off",
     .help = "on: the kernel reads files all in RAM from the hot tier itself (needs CAP_SYS_ADMIN)",
     .man_tag = ".BR %s= on | off",
     .man = "Files whose data is all in RAM are opened for reading with FUSE passthrough:\n"
	    "the kernel reads (and maps) the hot file itself, at tmpfs speed, with one\n"
	    "copy in RAM. Needs Linux 6.9, libfuse 3.17 and CAP_SYS_ADMIN; without them,\n"
	    "or with\n"
	    ".BR off ,\n"
	    "every read goes through the daemon (said once at mount).\n"},
    {.name = "extents",
     .kind = OPT_ENUM,
     FIELD(extents),
     WORDS({"on", 1, 0}, {"off", 0, 0}),
     .def = "on",
     .meta = "on|off",
     .help = "on: a file written while RAM is full goes to one file on a cold directory, served by the kernel",
     .man_tag = ".BR %s= on | off",
     .man = "A stream of 16 MiB or more written while the hot tier is above\n"
	    ".B low_watermark\n"
	    "(or written around it) moves into an extent: one file in\n"
	    ".IB nvme /extents/\n"
	    "holding its bytes at their own offsets; so does a file opened for writing\n"
	    "while empty within 10 s of that, and a closed file of 16 MiB or more all in\n"
	    "RAM when the evictor (or an evict) takes it. The kernel reads and writes an\n"
	    "extent itself\n"
	    "(FUSE passthrough), as for a plain directory on that disk. Needs\n"
	    ".B nvme\n"
	    "and passthrough; granted only on a directory with room beyond 1 GiB and 10%\n"
	    "of its size (and, with\n"
	    ".B s3\n"
	    "below, under\n"
	    ".BR nvme_threshold ).\n"
	    "Sealed with a crc32c per 64 KiB at the last writer's close; reads the daemon\n"
	    "serves and spillway-fsck --verify-data check it. Existing extents are served\n"
	    "with\n"
	    ".B off\n"
	    "too.\n"},
    {.name = "extent_min",
     .kind = OPT_SIZE,
     FIELD(extent_min),
     .min = 1 * MiB,
     .max = 1024 * GiB,
     .def = "16M",
     .meta = "SIZE",
     .accepted = "must be between 1M and 1T",
     .help = "the smallest stream or cold file moved whole into an extent (1M..1T)",
     .man_tag = ".BI %s= size",
     .man = "The smallest file that moves whole into an extent: a stream written under\n"
	    "pressure, a closed file the evictor takes or an evict asks for (smaller ones\n"
	    "are packed into segments); between 1M and 1T.\n"},
    {.name = "seal_delay",
     .kind = OPT_DURATION,
     FIELD(seal_delay_ms),
     .max = 3600000,
     .def = "30s",
     .meta = "DURATION",
     .accepted = "expected a duration like 0, 500ms, 30s or 5m (at most 1h)",
     .help = "seal an extent (sync, crcs) this long after its last writer's close; 0: at it",
     .man_tag = ".BI %s= duration",
     .man = "How long after its last writer's close an extent is sealed: its bytes synced\n"
	    "to the disk and a crc32c taken of every 64 KiB (what reads through the\n"
	    "daemon, the scrub and demotion check). Until then the kernel writes it back\n"
	    "when it would for a plain file, and a file deleted before is never synced\n"
	    "nor read again for its crcs, as in a plain directory; an fsync is durable\n"
	    "either way. 0: at the close. At most 1h.\n"},
    {.name = "cold_writes",
     .kind = OPT_ENUM,
     FIELD(cold_writes),
     WORDS({"overlay", 1, 0}, {"restore", 0, 0}),
     .def = "overlay",
     .meta = "overlay|restore",
     .help = "overlay: a write into cold data goes over it, not restoring the chunk first",
     .man_tag = ".BR %s= overlay | restore",
     .man = "A write into a chunk that is in the cold tier goes into RAM over its cold\n"
	    "copy (overlay): only the written 4 KiB blocks are held and spilled, and a read\n"
	    "takes each block from RAM or from the newest record that has it. With\n"
	    ".BR restore ,\n"
	    "the whole chunk is read back first (the pre-0.3 behaviour).\n"},
    {.name = "admit",
     .kind = OPT_ENUM,
     FIELD(admit_reread),
     WORDS({"reread", 1, 0}, {"always", 0, 0}),
     .def = "reread",
     .meta = "reread|always",
     .help = "reread: cold data read once is read from its segment, it enters RAM when read again",
     .man_tag = ".BR %s= reread | always",
     .man = "What deserves RAM. With\n"
	    ".BR reread ,\n"
	    "a cold chunk read for the first time is read from its segment straight into\n"
	    "the reply and stays cold (data read once, such as a Ray restore or a scan,\n"
	    "is not staged in RAM); a second read of it soon enough that it would still\n"
	    "be in RAM (for a random reader, its 8th read of the chunk), a warm, a pin\n"
	    "or a write brings it into RAM. With\n"
	    ".BR always ,\n"
	    "every cold chunk read comes back into RAM (random readers excepted: the\n"
	    "pre-0.4 behaviour).\n"},
    {.name = "keep_hot",
     .kind = OPT_FLAG,
     FIELD(keep_hot),
     .def_doc = "off",
     .help = "unmount keeps the hot files in RAM for a fast remount (the pre-0.2 behaviour)",
     .man_tag = ".B %s",
     .man = "A clean unmount keeps the hot files in\n"
	    ".I hot_dir\n"
	    "for a fast remount instead of spilling them to the cold tier first.\n"},
    {.name = "chunk_size",
     .kind = OPT_SIZE,
     FIELD(chunk_size),
     .min = 1 * MiB,
     .max = 64 * MiB,
     .flags = OPT_POW2,
     .def = "4M",
     .meta = "SIZE",
     .accepted = "must be a power of two between 1M and 64M",
     .help = "residency granularity, power of two 1M..64M",
     .man_tag = ".BI %s= size",
     .man = "Residency granularity: the unit that is spilled, dropped and restored.\n"
	    "A power of two from 1M to 64M.\n"},

    /* ---- cold tier ---- */
    {.name = "nvme",
     .kind = OPT_PATH,
     FIELD(nvme),
     .check = opt_check_nvme,
     .section = "Cold tier",
     .meta = "DIR[:DIR...]",
     .def_doc = "none",
     .help = "colon-separated cold directories",
     .man_tag = ".BI %s= dir\\fR[\\fP:dir\\fR.\\|.\\|.]\\fP",
     .man = "Colon-separated absolute directories that hold segment files.\n"
	    "Each must exist and be writable.\n"
	    "A segment goes to the directory with the most free space (weighted); a full\n"
	    "or failing directory is skipped for a while.\n"},
    {.name = "s3",
     .kind = OPT_STRING,
     FIELD(s3),
     .check = opt_check_s3,
     .meta = "s3://BUCKET/PREFIX",
     .def_doc = "none",
     .help = "S3 cold tier (alone, or below nvme)",
     .man_tag = ".BI %s= s3://bucket/prefix",
     .man = "An S3 bucket (and key prefix) for segments: alone, or below\n"
	    ".B nvme\n"
	    "as a third tier.\n"},
    {.name = "s3_endpoint",
     .kind = OPT_STRING,
     FIELD(s3_endpoint),
     .check = opt_check_s3_endpoint,
     .meta = "URL",
     .def_doc = "AWS for s3_region",
     .help = "http(s)://host[:port]",
     .man_tag = ".BI %s= url",
     .man = ".BI http:// host\\fR[\\fP:port\\fR]\\fP\n"
	    "or\n"
	    ".BI https:// host\\fR[\\fP:port\\fR]\\fP\n"
	    "of an S3-compatible service.\n"},
    {.name = "s3_region",
     .kind = OPT_STRING,
     FIELD(s3_region),
     .check = opt_check_s3_region,
     .meta = "REGION",
     .def_doc = "us-east-1",
     .help = "signing region (SigV4)",
     .man_tag = ".BI %s= region",
     .man = "The signing region (SigV4).\n"},
    {.name = "s3_path_style",
     .kind = OPT_ENUM,
     FIELD(s3_path_style),
     .flags = OPT_BARE,
     WORDS({"0", 0, 0}, {"1", 1, 0}, {"false", 0, 1}, {"true", 1, 1}),
     .def = "0",
     .def_doc = "off",
     .meta = "[=0|1]",
     .help = "path-style URLs (MinIO, Ceph RGW, local servers)",
     .man_tag = ".BR %s [ =0 | =1 ]",
     .man = "Use path-style URLs (bucket in the path, not the host name), as MinIO,\n"
	    "Ceph RGW and local servers want.\n"},
    {.name = "s3_part_size",
     .kind = OPT_SIZE,
     FIELD(s3_part_size),
     .min = S3_MIN_PART_SIZE,
     .max = S3_MAX_PART_SIZE,
     .flags = OPT_ALIGN4K,
     .def = "16M",
     .meta = "SIZE",
     .accepted = "must be between 5M and 5G, a multiple of 4K",
     .help = "PUT up to this, multipart above (5M..5G)",
     .man_tag = ".BI %s= size",
     .man = "Segments up to this size are sent with one PUT, larger ones as multipart\n"
	    "uploads with parts of this size, sent in parallel.\n"
	    "From 5M to 5G, a multiple of 4K.\n"},
    {.name = "s3_buffers",
     .kind = OPT_SIZE,
     FIELD(s3_buffers),
     .max = 64 * GiB,
     .meta = "SIZE",
     .def_doc = "48M, at least 2 parts",
     .accepted = "must be between s3_part_size and 64G",
     .help = "part buffers of all uploads together, whole parts (s3_part_size..64G)",
     .man_tag = ".BI %s= size",
     .man = "Memory for the part buffers of all segment uploads together, in whole\n"
	    "parts (rounded down): a part being filled or in flight holds one; an\n"
	    "upload that finds none free waits for one.\n"
	    "This bounds the daemon's extra memory with an S3 tier.\n"
	    "From s3_part_size to 64G.\n"},
    {.name = "s3_credentials",
     .kind = OPT_PATH,
     FIELD(s3_credentials),
     .check = opt_check_s3_credentials,
     .meta = "FILE",
     .def_doc = "the AWS_* environment",
     .help = "AWS credentials file, mode 0600",
     .man_tag = ".BI %s= file",
     .man = "An AWS shared-credentials file (absolute path), refused unless its mode is\n"
	    "0600.\n"
	    "Without it, the credentials come from the environment (see\n"
	    ".BR ENVIRONMENT ).\n"
	    "Credentials are never accepted as mount options, which anyone can read in\n"
	    ".IR /proc/mounts .\n"},
    {.name = "s3_ca_file",
     .kind = OPT_PATH,
     FIELD(s3_ca_file),
     .check = opt_check_s3_ca_file,
     .meta = "FILE",
     .def_doc = "the system's CA store",
     .help = "CA bundle for a private TLS endpoint",
     .man_tag = ".BI %s= file",
     .man = "A CA bundle for a private TLS endpoint.\n"},
    {.name = "nvme_threshold",
     .kind = OPT_FRACTION,
     FIELD(nvme_threshold),
     .def = "0.90",
     .meta = "F",
     .help = "with nvme and s3: demote LRU segments and closed extents to S3 above this fill",
     .man_tag = ".BI %s= fraction",
     .man = "With both\n"
	    ".B nvme\n"
	    "and\n"
	    ".BR s3 :\n"
	    "above this fill of the NVMe directories, the least recently used segments\n"
	    "and closed extents are moved (demoted) to S3, until the fill is 0.05 below it\n"
	    "(an extent goes as one segment holding the file's chunks).\n"},

    /* ---- spilling and restoring ---- */
    {.name = "spill_threshold",
     .kind = OPT_FRACTION,
     FIELD(spill_threshold),
     .def = "0.75",
     .section = "Spilling and restoring",
     .meta = "F",
     .help = "start spilling above this fraction of hot_size",
     .man_tag = ".BI %s= fraction",
     .man = "Start spilling when hot data exceeds this fraction of\n"
	    ".BR hot_size .\n"},
    {.name = "low_watermark",
     .kind = OPT_FRACTION,
     FIELD(low_watermark),
     .def = "0.60",
     .meta = "F",
     .help = "spill until usage is below this (below spill_threshold)",
     .man_tag = ".BI %s= fraction",
     .man = "Spill until hot data is below this fraction of\n"
	    ".BR hot_size .\n"
	    "Must be below\n"
	    ".BR spill_threshold .\n"},
    {.name = "hard_watermark",
     .kind = OPT_FRACTION,
     FIELD(hard_watermark),
     .def = "0.95",
     .meta = "F",
     .help = "above this (or with a writer waiting), write partial segments",
     .man_tag = ".BI %s= fraction",
     .man = "Above this fraction (or whenever a writer is waiting for room), write\n"
	    "partial segments rather than wait to fill\n"
	    ".BR min_spill_size .\n"
	    "At least\n"
	    ".BR spill_threshold .\n"},
    {.name = "min_spill_size",
     .kind = OPT_SIZE,
     FIELD(min_spill_size),
     .max = 16 * GiB,
     .def = "64M",
     .meta = "SIZE",
     .accepted = "must be between chunk_size and 16G",
     .help = "smallest segment written when not under pressure (chunk_size..16G)",
     .man_tag = ".BI %s= size",
     .man = "The smallest segment written when not under pressure; between\n"
	    ".B chunk_size\n"
	    "and 16G.\n"},
    {.name = "io_workers",
     .kind = OPT_COUNT,
     FIELD(io_workers),
     .min = 1,
     .max = 256,
     .def = "8",
     .meta = "N",
     .help = "parallel segment writes / restore reads / S3 connections",
     .man_tag = ".BI %s= n",
     .man = "Parallel segment writes, restore reads and S3 connections, 1 to 256.\n"},
    {.name = "restore",
     .kind = OPT_ENUM,
     FIELD(restore),
     WORDS({"open", RESTORE_OPEN, 0}, {"lazy", RESTORE_LAZY, 0}),
     .def = "lazy",
     .meta = "open|lazy",
     .help = "lazy: cold chunks come back as they are read; open: also in the background on open",
     .man_tag = ".BR %s= { lazy | open }",
     .man = ".BR lazy :\n"
	    "cold chunks come back only as they are read (and as\n"
	    ".B admit\n"
	    "lets them: with\n"
	    ".BR admit=reread ,\n"
	    "a first read reads them from their segments).\n"
	    ".BR open :\n"
	    "opening a file also restores in the background its cold chunks that\n"
	    ".B admit\n"
	    "lets into RAM: with\n"
	    ".BR admit=reread ,\n"
	    "those read before (a working set opened again); with\n"
	    ".BR admit=always ,\n"
	    "all of them (reads of chunks not yet back are served first). Ray, which\n"
	    "reopens its spill file for every object, wants\n"
	    ".BR lazy .\n"},
    {.name = "write_wait",
     .kind = OPT_DURATION,
     FIELD(write_wait_ms),
     .max = 86400000,
     .def = "60s",
     .meta = "DURATION",
     .accepted = "expected a duration like 500ms, 60s or 5m (at most 24h)",
     .help = "longest a writer waits for room before ENOSPC",
     .man_tag = ".BI %s= duration",
     .man = "The longest a write waits for the evictor to make room before it fails with\n"
	    ".BR ENOSPC ;\n"
	    "at most 24h.\n"},
    {.name = "gc_threshold",
     .kind = OPT_FRACTION,
     FIELD(gc_threshold),
     .def = "0.5",
     .meta = "F",
     .help = "compact segments below this live fraction",
     .man_tag = ".BI %s= fraction",
     .man = "Segments whose live fraction drops below this are compacted (their live\n"
	    "chunks rewritten); segments with no live bytes are deleted.\n"},

    /* ---- metrics, durability, logging ---- */
    {.name = "metrics",
     .kind = OPT_PATH,
     FIELD(metrics),
     .check = opt_check_metrics,
     .section = "Metrics and logging",
     .meta = "FILE",
     .def_doc = "none",
     .help = "Prometheus text file, rewritten atomically",
     .man_tag = ".BI %s= file",
     .man = "Write the daemon's counters to\n"
	    ".I file\n"
	    "(absolute path, in an existing directory) in the Prometheus text format,\n"
	    "rewritten atomically (written to a temporary file and renamed) every\n"
	    ".BR metrics_interval ,\n"
	    "for node_exporter's textfile collector.\n"},
    {.name = "metrics_interval",
     .kind = OPT_DURATION,
     FIELD(metrics_interval_ms),
     .min = 100,
     .max = 3600000,
     .def = "5s",
     .meta = "DURATION",
     .accepted = "expected a duration from 100ms to 1h",
     .help = "how often (100ms..1h)",
     .man_tag = ".BI %s= duration",
     .man = "How often\n"
	    ".B metrics\n"
	    "is rewritten, from 100ms to 1h.\n"},
    {.name = "state_dir",
     .kind = OPT_PATH,
     FIELD(state_dir),
     .check = opt_check_state_dir,
     .meta = "DIR|none",
     .def_doc = "<first nvme>/.spillway",
     .help = "journal + checkpoints (0700, locked); required with s3 alone; none: volatile",
     .man_tag = ".BI %s= dir\\fR|\\fBnone",
     .man = "Where the journal and the checkpoints live (created mode 0700, locked\n"
	    "against a second daemon).\n"
	    "Required with\n"
	    ".B s3\n"
	    "as the only cold tier (then the checkpoint and the journal are also\n"
	    "uploaded next to the segments, so another node can take the filesystem\n"
	    "over).\n"
	    ".B none\n"
	    "keeps nothing past the mount: files are gone at unmount, and so are their\n"
	    "hot files.\n"
	    "Without\n"
	    ".BR nvme ,\n"
	    ".B s3\n"
	    "and\n"
	    ".B state_dir\n"
	    "there is no journal either.\n"},
    {.name = "journal_sync_ms",
     .kind = OPT_COUNT,
     FIELD(journal_sync_ms),
     .max = 60000,
     .def = "1000",
     .meta = "N",
     .help = "group-commit period in ms, 0..60000 (0: sync every change before its reply)",
     .man_tag = ".BI %s= n",
     .man = "Group commit period: the journal is made durable\n"
	    ".RB ( fdatasync (2))\n"
	    "at least this often, and on every\n"
	    ".BR fsync (2).\n"
	    "0 syncs every change before its reply.\n"
	    "From 0 to 60000.\n"},
    {.name = "checkpoint_size",
     .kind = OPT_SIZE,
     FIELD(checkpoint_size),
     .min = 64 * KiB,
     .max = 4 * GiB,
     .def = "64M",
     .meta = "SIZE",
     .accepted = "expected a size from 64K to 4G",
     .help = "journal size that triggers a checkpoint (64K..4G)",
     .man_tag = ".BI %s= size",
     .man = "When the journal passes this size, a checkpoint (a full snapshot) is\n"
	    "written and the journal starts again. From 64K to 4G.\n"},
    {.name = "takeover",
     .kind = OPT_FLAG,
     FIELD(takeover),
     .def_doc = "off",
     .help = "with s3: attach a prefix whose lease another (dead) node still holds",
     .man_tag = ".B %s",
     .man = "With\n"
	    ".BR s3 :\n"
	    "attach a bucket prefix whose lease is still held by another node (that\n"
	    "node is gone; a live one would be corrupted).\n"},
    {.name = "s3_state",
     .kind = OPT_FLAG,
     FIELD(s3_state),
     .def_doc = "on with s3 alone, off with nvme",
     .help = "with nvme and s3: copy the state to the bucket too (a replacement node)",
     .man_tag = ".B %s",
     .man = "With\n"
	    ".B nvme\n"
	    "and\n"
	    ".BR s3 :\n"
	    "copy the checkpoint and the journal to the bucket as well, as\n"
	    ".B s3\n"
	    "alone always does, after each demotion, each checkpoint and before\n"
	    "segments are deleted from S3, and at unmount (never in an\n"
	    ".BR fsync (2)).\n"
	    "A replacement node (an empty\n"
	    ".BR state_dir ,\n"
	    "with\n"
	    ".B s3\n"
	    "alone or with its own\n"
	    ".BR nvme )\n"
	    "then mounts the prefix and gets every file whose bytes were all in S3 at\n"
	    "the last copy; a file some of whose bytes were on the old node's disk or\n"
	    "in its RAM is removed, or kept in\n"
	    ".I /lost+found\n"
	    "with holes where they were (logged by path).\n"},
    {.name = "io_engine",
     .kind = OPT_ENUM,
     FIELD(io_psync),
     WORDS({"uring", 0, 0}, {"psync", 1, 0}),
     .def = "uring",
     .meta = "uring|psync",
     .help = "psync: cold-tier I/O with pread/pwrite (fault injection, odd hosts)",
     .man_tag = ".BI %s= engine",
     .man = ".B uring\n"
	    "or\n"
	    ".BR psync :\n"
	    "cold-tier I/O through io_uring or through\n"
	    ".BR pread (2)/ pwrite (2)\n"
	    "(for hosts where io_uring misbehaves, and for fault injection with\n"
	    "libfiu).\n"},
    {.name = "io_uring",
     .kind = OPT_ENUM,
     FIELD(io_uring),
     WORDS({"on", 1, 0}, {"off", 0, 0}),
     .flags = OPT_BARE,
     .def = "off",
     .meta = "on|off",
     .help = "on: FUSE requests over io_uring (libfuse 3.18+, kernel fuse enable_uring=Y)",
     .man_tag = ".BR %s= on | off",
     .man = "Take FUSE requests over io_uring rings (one per CPU) instead of reading\n"
	    ".IR /dev/fuse .\n"
	    "Needs libfuse 3.18 or newer and a kernel with FUSE over io_uring (Linux\n"
	    "6.14+, CONFIG_FUSE_IO_URING) whose module parameter\n"
	    ".I /sys/module/fuse/parameters/enable_uring\n"
	    "is Y; without them the mount says why in its log and runs as with\n"
	    ".BR off .\n"},
    {.name = "log_level",
     .kind = OPT_ENUM,
     FIELD(log_level),
     .flags = OPT_NOCASE,
     WORDS({"error", LOG_ERR, 0}, {"warn", LOG_WARNING, 0}, {"info", LOG_INFO, 0},
	   {"debug", LOG_DEBUG, 0}),
     .def = "info",
     .meta = "LEVEL",
     .help = "error, warn, info, debug (stderr with -f, syslog otherwise; repeats folded)",
     .man_tag = ".BI %s= level",
     .man = ".BR error ,\n"
	    ".BR warn ,\n"
	    ".B info\n"
	    "or\n"
	    ".BR debug .\n"},

    /* standard mount options spillway looks at: passed on to the kernel,
     * documented with the standard options */
    {.name = "allow_other", .kind = OPT_FLAG, FIELD(allow_other), .flags = OPT_KEEP | OPT_HIDDEN},
    {.name = "default_permissions",
     .kind = OPT_FLAG,
     FIELD(default_permissions),
     .flags = OPT_KEEP | OPT_HIDDEN},
};
const size_t opt_count = sizeof(opt_table) / sizeof(opt_table[0]);
_Static_assert(sizeof(opt_table) / sizeof(opt_table[0]) <= OPT_COUNT_MAX, "raise OPT_COUNT_MAX");

/* Options libfuse, the kernel or mount(8)/fstab understand: passed on. */
static const char *const fuse_known[] = {
    "allow_root", "auto_unmount", "fsname=",	   "subtype=",	 "max_read=",
    "ro",	  "rw",		  "suid",	   "nosuid",	 "dev",
    "nodev",	  "exec",	  "noexec",	   "async",	 "sync",
    "dirsync",	  "atime",	  "noatime",	   "nodiratime", "relatime",
    "norelatime", "strictatime",  "nostrictatime", "lazytime",	 "nolazytime",
    "debug",	  "max_threads=", "clone_fd",	   NULL,
};
/* fstab-only words mount.fuse3 may hand us: accepted and dropped. */
static const char *const fstab_words[] = {
    "defaults", "auto",	  "noauto", "user", "nouser",	"users",
    "_netdev",	"nofail", "owner",  "x-",   "comment=", NULL,
};

static int matches(const char *arg, const char *const *list)
{
	for (int i = 0; list[i]; i++) {
		size_t l = strlen(list[i]);
		if (list[i][l - 1] == '=' || list[i][l - 1] == '-' ? strncmp(arg, list[i], l) == 0
								   : strcmp(arg, list[i]) == 0)
			return 1;
	}
	return 0;
}

/* The row an "-o" word names, or -1; *value points past "name=" (NULL: bare). */
static int find_row(const char *arg, const char **value)
{
	for (size_t i = 0; i < opt_count; i++) {
		const struct opt_spec *s = &opt_table[i];
		size_t l = strlen(s->name);
		if (strncmp(arg, s->name, l))
			continue;
		if (arg[l] == '=' && s->kind != OPT_FLAG) {
			*value = arg + l + 1;
			return (int)i;
		}
		if (!arg[l] && (s->kind == OPT_FLAG || (s->flags & OPT_BARE))) {
			*value = NULL;
			return (int)i;
		}
	}
	return -1;
}

/* Step 1: file each of our words under its row; the rest is libfuse's. */
static int opt_proc(void *data, const char *arg, int key, struct fuse_args *outargs)
{
	struct opt_ctx *c = data;
	const char *value;
	int i;

	if (key != FUSE_OPT_KEY_OPT || arg[0] == '-')
		return 1; /* non-options and flags like -d: libfuse's business */
	if ((i = find_row(arg, &value)) >= 0) {
		c->given[i] = 1;
		free(c->raw[i]); /* the last one given wins */
		c->raw[i] = value ? strdup(value) : NULL;
		return opt_table[i].flags & OPT_KEEP ? 1 : 0;
	}
	if (matches(arg, fuse_known))
		return 1;
	if (matches(arg, fstab_words))
		return 0;
	if (!c->bad)
		c->bad = strdup(arg);
	return 0;
}

static int row_of(const char *name)
{
	for (size_t i = 0; i < opt_count; i++)
		if (!strcmp(opt_table[i].name, name))
			return (int)i;
	return -1;
}

/* The value given for an option, or NULL. */
const char *opt_raw(const struct opt_ctx *c, const char *name)
{
	return c->raw[row_of(name)];
}

int opt_given(const struct opt_ctx *c, const char *name)
{
	return c->given[row_of(name)];
}

/* "expected a, b or c" of an enum's shown words. */
static void words_accepted(const struct opt_spec *s, char *buf, size_t len)
{
	int n = 0, shown = 0;
	size_t at;
	for (const struct opt_word *w = s->words; w->word; w++)
		shown += !w->hidden;
	at = (size_t)snprintf(buf, len, "expected ");
	for (const struct opt_word *w = s->words; w->word && at < len; w++) {
		if (w->hidden)
			continue;
		n++;
		at += (size_t)snprintf(buf + at, len - at, "%s%s",
				       n == 1	    ? ""
				       : n == shown ? " or "
						    : ", ",
				       w->word);
	}
}

/* What a rejected value of this row is told is accepted. */
static void accepted(const struct opt_spec *s, char *buf, size_t len)
{
	if (s->accepted)
		snprintf(buf, len, "%s", s->accepted);
	else if (s->kind == OPT_FRACTION)
		snprintf(buf, len, FRACTION_ACCEPTED);
	else if (s->kind == OPT_COUNT)
		snprintf(buf, len, "expected an integer %llu..%llu", (unsigned long long)s->min,
			 (unsigned long long)s->max);
	else if (s->kind == OPT_ENUM)
		words_accepted(s, buf, len);
	else
		snprintf(buf, len, "see spillway --help");
}

static int reject(struct opt_ctx *c, const struct opt_spec *s, const char *v)
{
	char why[256];
	accepted(s, why, sizeof(why));
	return opt_fail(c, "option '%s': invalid value '%s': %s", s->name, v, why);
}

static void store_u64(struct spw_config *cfg, const struct opt_spec *s, uint64_t v)
{
	char *p = (char *)cfg + s->off;
	if (s->width == sizeof(uint64_t))
		memcpy(p, &v, sizeof(v));
	else {
		unsigned u = (unsigned)v; /* unsigned and int fields alike */
		memcpy(p, &u, sizeof(u));
	}
}

/* Parse v as row s's kind into cfg: 0, or -1 with the message. */
static int parse_value(struct opt_ctx *c, const struct opt_spec *s, const char *v)
{
	uint64_t u = 0;
	char *end;

	switch (s->kind) {
	case OPT_SIZE:
		if (!(s->flags & OPT_OFF_IS_ZERO) || strcmp(v, "off")) {
			if (size_parse(v, &u) < 0)
				return opt_fail(c,
					    "option '%s': invalid value '%s': expected a size like "
					    "512M or 8G (K/M/G/T suffixes)",
					    s->name, v);
			if (u < s->min || u > s->max || ((s->flags & OPT_POW2) && (u & (u - 1))) ||
			    ((s->flags & OPT_ALIGN4K) && u % 4096))
				return reject(c, s, v);
		}
		break;
	case OPT_DURATION:
		if (duration_parse_ms(v, &u) < 0 || u < s->min || u > s->max)
			return reject(c, s, v);
		break;
	case OPT_COUNT:
		u = strtoull(v, &end, 10);
		if (v[0] < '0' || v[0] > '9' || *end || u < s->min || u > s->max)
			return reject(c, s, v);
		break;
	case OPT_FRACTION: {
		double d;
		if (fraction_parse(v, &d) < 0 || d <= 0)
			return reject(c, s, v);
		memcpy((char *)c->cfg + s->off, &d, sizeof(d));
		return 0;
	}
	case OPT_ENUM: {
		const struct opt_word *w = s->words;
		if (!v) /* OPT_BARE */
			u = 1;
		else {
			while (w->word && ((s->flags & OPT_NOCASE) ? strcasecmp(v, w->word)
								   : strcmp(v, w->word)))
				w++;
			if (!w->word)
				return reject(c, s, v);
			u = (uint64_t)(unsigned)w->value;
		}
		break;
	}
	case OPT_FLAG:
		u = 1;
		break;
	case OPT_PATH:
	case OPT_STRING: {
		char **field = (char **)((char *)c->cfg + s->off);
		free(*field);
		*field = strdup(v);
		return 0;
	}
	}
	store_u64(c->cfg, s, u);
	return 0;
}

/* The reason stays one line whatever the value quoted in it holds. */
static void one_line(char *s)
{
	for (; *s; s++)
		if ((unsigned char)*s < 0x20 || *s == 0x7f)
			*s = '?';
}

/* Defaults computed from the machine (hot_dir's filesystem, the node's
 * memory and the daemon's memory cgroup): hot_size, hot_min, mem_reserve,
 * when not given. A given mem_reserve above half of what the daemon may
 * have is refused, not clamped: an explicit value is honoured or refused
 * (docs/ram.md); the default follows the cgroup. */
static int opt_computed_defaults(struct opt_ctx *c)
{
	struct spw_config *cfg = c->cfg;
	struct pressure_mem mem;
	struct statvfs sv;

	if (statvfs(cfg->hot_dir, &sv) < 0)
		return opt_fail(c, "option 'hot_dir': '%s': %s", cfg->hot_dir, strerror(errno));
	if (!opt_given(c, "hot_size"))
		cfg->hot_size = (uint64_t)sv.f_blocks * sv.f_frsize / 2;
	else if (cfg->hot_size > (uint64_t)sv.f_blocks * sv.f_frsize)
		return opt_fail(
		    c,
		    "option 'hot_size': invalid value '%s': larger than hot_dir's filesystem "
		    "(%lluM)",
		    opt_raw(c, "hot_size"),
		    (unsigned long long)((uint64_t)sv.f_blocks * sv.f_frsize >> 20));
	if (!opt_given(c, "hot_min"))
		cfg->hot_min = cfg->hot_size / 8 > cfg->chunk_size * 2 ? cfg->hot_size / 8
								       : cfg->chunk_size * 2;
	pressure_probe(&mem);
	cfg->mem_limit = mem.limit;
	cfg->mem_limit_cgroup = mem.of_cgroup;
	cfg->mem_reserve_given = opt_given(c, "mem_reserve");
	if (!cfg->mem_reserve_given)
		cfg->mem_reserve = mem.reserve;
	else if (cfg->mem_reserve > mem.limit / 2)
		return opt_fail(c,
			    "option 'mem_reserve': invalid value '%s': at most half of %s (%lluM "
			    "of %lluM), or 0/off; unset, it is 5%% of that",
			    opt_raw(c, "mem_reserve"),
			    mem.of_cgroup ? "the daemon's memory cgroup limit" : "the node's RAM",
			    (unsigned long long)(mem.limit / 2 >> 20),
			    (unsigned long long)(mem.limit >> 20));
	return 0;
}

/* ---- the rules between options ---- */
static int opt_cross(struct opt_ctx *c)
{
	struct spw_config *cfg = c->cfg;
	unsigned long long two_chunks = cfg->chunk_size * 2;

	if (cfg->allow_other && !cfg->default_permissions)
		return opt_fail(c,
			    "option 'allow_other' requires 'default_permissions' (otherwise every "
			    "user could read every file)");
	if (opt_given(c, "hot_size") && cfg->hot_size < two_chunks)
		return opt_fail(c,
			    "option 'hot_size': invalid value '%s': must be at least two chunks "
			    "(%lluM)",
			    opt_raw(c, "hot_size"), two_chunks >> 20);
	if (cfg->hot_min < two_chunks || cfg->hot_min > cfg->hot_size)
		return opt_fail(c,
			    "option 'hot_min': invalid value '%s': must be between two chunks "
			    "(%lluM) and hot_size (%lluM)",
			    opt_raw(c, "hot_min"), two_chunks >> 20,
			    (unsigned long long)(cfg->hot_size >> 20));
	if (cfg->low_watermark >= cfg->spill_threshold)
		return opt_fail(c,
			    "option 'low_watermark': invalid value '%g': must be below "
			    "spill_threshold (%g)",
			    cfg->low_watermark, cfg->spill_threshold);
	if (cfg->hard_watermark < cfg->spill_threshold)
		return opt_fail(c,
			    "option 'hard_watermark': invalid value '%g': must be at least "
			    "spill_threshold (%g)",
			    cfg->hard_watermark, cfg->spill_threshold);
	if (cfg->min_spill_size < cfg->chunk_size)
		return reject(c, &opt_table[row_of("min_spill_size")], opt_raw(c, "min_spill_size"));
	if (opt_given(c, "s3_buffers") && cfg->s3_buffers < cfg->s3_part_size)
		return reject(c, &opt_table[row_of("s3_buffers")], opt_raw(c, "s3_buffers"));
	if (!cfg->s3 && (cfg->s3_endpoint || cfg->s3_region || opt_given(c, "s3_part_size") ||
			 opt_given(c, "s3_buffers") || cfg->s3_credentials || cfg->s3_ca_file))
		return opt_fail(c, "option 's3_*' given without 's3=s3://BUCKET/PREFIX'");
	if (cfg->takeover && !cfg->s3)
		return opt_fail(c, "option 'takeover' needs 's3=s3://BUCKET/PREFIX'");
	if (cfg->s3_state && (!cfg->s3 || !cfg->nvme))
		return opt_fail(c, "option 's3_state' needs 'nvme=DIR' and 's3=s3://BUCKET/PREFIX' "
			       "(s3 alone always keeps the state in the bucket)");
	if (cfg->s3_state && !cfg->state_dir)
		return opt_fail(c, "option 's3_state' needs a state_dir (not state_dir=none)");
	if (cfg->s3 && !cfg->nvme && !opt_given(c, "state_dir"))
		return opt_fail(c, "option 's3' alone needs 'state_dir=DIR' on a local disk for the "
			       "journal (or state_dir=none: nothing survives an unmount)");
	return 0;
}

int opt_parse(struct fuse_args *args, const char *mountpoint, struct spw_config *cfg, char *err,
	      size_t errlen)
{
	static const struct fuse_opt none[] = {FUSE_OPT_END};
	struct opt_ctx c = {.cfg = cfg, .err = err, .errlen = errlen};
	int ret = -1;
	size_t i;

	memset(cfg, 0, sizeof(*cfg));
	err[0] = '\0';
	for (i = 0; i < opt_count; i++) /* defaults: the table's text, parsed */
		if (opt_table[i].def && parse_value(&c, &opt_table[i], opt_table[i].def) < 0)
			goto out;
	if (fuse_opt_parse(args, &c, none, opt_proc) < 0) {
		opt_fail(&c, "cannot parse options");
		goto out;
	}
	if (c.bad) {
		opt_fail(&c, "unknown option '%s' (see spillway --help)", c.bad);
		goto out;
	}
	if (opt_check_mountpoint(&c, mountpoint) < 0)
		goto out;
	for (i = 0; i < opt_count; i++)
		if (c.given[i] && parse_value(&c, &opt_table[i], c.raw[i]) < 0)
			goto out;
	for (i = 0; i < opt_count; i++)
		if (opt_table[i].check && opt_table[i].check(&c, c.raw[i]) < 0)
			goto out;
	if (opt_computed_defaults(&c) < 0 || opt_cross(&c) < 0)
		goto out;
	ret = 0;
out:
	if (ret < 0) { /* leave nothing behind */
		one_line(err);
		if (c.created)
			hot_dir_unmake(c.created);
		opt_free(cfg);
		memset(cfg, 0, sizeof(*cfg));
	}
	free(c.created);
	free(c.default_dir);
	for (i = 0; i < opt_count; i++)
		free(c.raw[i]);
	free(c.bad);
	return ret;
}

void opt_free(struct spw_config *cfg)
{
	free(cfg->mountpoint);
	for (size_t i = 0; i < opt_count; i++)
		if (opt_table[i].kind == OPT_PATH || opt_table[i].kind == OPT_STRING)
			free(*(char **)((char *)cfg + opt_table[i].off));
}

/* ---- the option list as documentation ---- */

static const char *shown_default(const struct opt_spec *s)
{
	return s->def_doc ? s->def_doc : s->def;
}

/* text, escaped for troff (\e, \-) or markdown (\<, \>, \|, \*) */
static void put_escaped(FILE *out, const char *text, enum opt_doc_format fmt)
{
	for (const char *p = text; *p; p++) {
		if (fmt == OPT_DOC_MAN && *p == '\\')
			fputs("\\e", out);
		else if (fmt == OPT_DOC_MAN && *p == '-')
			fputs("\\-", out);
		else if (fmt == OPT_DOC_README && strchr("<>|*", *p))
			fprintf(out, "\\%c", *p);
		else
			fputc(*p, out);
	}
}

/* text wrapped to 79 columns, each line indented by indent spaces */
static void put_wrapped(FILE *out, const char *text, int indent)
{
	const char *p = text;
	while (*p) {
		int room = 79 - indent, n = (int)strlen(p);
		if (n > room) {
			n = room;
			while (n > 0 && p[n] != ' ')
				n--;
			if (n == 0)
				n = (int)strcspn(p, " ");
		}
		fprintf(out, "%*s%.*s\n", indent, "", n, p);
		p += n;
		while (*p == ' ')
			p++;
	}
}

static void doc_row(FILE *out, const struct opt_spec *s, enum opt_doc_format fmt)
{
	const char *def = shown_default(s);

	switch (fmt) {
	case OPT_DOC_HELP:
		fprintf(out, "    %s%s%s", s->name, s->meta && s->meta[0] != '[' ? "=" : "",
			s->meta ? s->meta : "");
		if (def)
			fprintf(out, " (default %s)", def);
		fputc('\n', out);
		put_wrapped(out, s->help, 8);
		break;
	case OPT_DOC_MAN:
		if (s->section)
			fprintf(out, ".SS %s\n", s->section);
		fputs(".TP\n", out);
		fprintf(out, s->man_tag, s->name);
		fprintf(out, "\n%s", s->man);
		if (def) {
			fputs("Default: ", out);
			put_escaped(out, def, fmt);
			fputs(".\n", out);
		}
		break;
	case OPT_DOC_README:
		fprintf(out, "| %s | ", s->name);
		put_escaped(out, def ? def : "—", fmt);
		fputs(" | ", out);
		put_escaped(out, s->help, fmt);
		fputs(" |\n", out);
		break;
	}
}

void opt_doc(FILE *out, enum opt_doc_format fmt)
{
	if (fmt == OPT_DOC_HELP)
		fputs("spillway options (-o name=value,...):\n", out);
	else if (fmt == OPT_DOC_README)
		fputs("| option | default | meaning |\n|---|---|---|\n", out);
	for (size_t i = 0; i < opt_count; i++)
		if (!(opt_table[i].flags & OPT_HIDDEN))
			doc_row(out, &opt_table[i], fmt);
	if (fmt == OPT_DOC_HELP)
		fputs("Sizes take K/M/G/T suffixes (powers of 1024); durations ms/s/m/h.\n"
		      "allow_other requires default_permissions.\n",
		      out);
}

void opt_help(void)
{
	opt_doc(stdout, OPT_DOC_HELP);
}
