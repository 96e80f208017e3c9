/*
 * config — the validated mount configuration, one plain struct.
 * Filled once by fs/options.c before mount; read-only afterwards, so every
 * thread may read it without locking.
 */
#ifndef SPW_CONFIG_H
#define SPW_CONFIG_H

#include <stdint.h>

enum restore_mode { RESTORE_OPEN = 0, RESTORE_LAZY = 1 };


struct spw_config {
	char *mountpoint;    /* absolute */
	char *hot_dir;	     /* absolute, created 0700 */
	int hot_dir_made;    /* this mount created hot_dir: a failed mount removes it */
	uint64_t hot_size;   /* bytes of RAM the hot tier may allocate */
	uint64_t chunk_size; /* residency granularity, power of two */
	int log_level;	     /* LOG_ERR .. LOG_DEBUG */
	/* tiering (evictor, cold stores) */
	char *nvme; /* colon-separated cold directories, or NULL */
	double spill_threshold, low_watermark, hard_watermark;
	uint64_t min_spill_size;
	unsigned io_workers;
	enum restore_mode restore;
	uint64_t write_wait_ms;
	double gc_threshold;
	int allow_other, default_permissions;
	/* S3 cold tier (alone, or below nvme) */
	char *s3; /* s3://bucket/prefix, or NULL */
	char *s3_endpoint, *s3_region, *s3_credentials, *s3_ca_file;
	int s3_path_style;
	uint64_t s3_part_size;
	uint64_t s3_buffers;   /* part buffers of all uploads together; 0: the store's default */
	double nvme_threshold; /* with nvme and s3: demote segments above this */
	char *metrics;	       /* Prometheus text file, or NULL */
	uint64_t metrics_interval_ms;
	/* durability */
	char *state_dir;	  /* journal + checkpoints; NULL: volatile */
	uint64_t journal_sync_ms; /* group commit period; 0: every change */
	uint64_t checkpoint_size; /* journal bytes that trigger a checkpoint */
	int takeover;		  /* s3: attach a prefix another node holds */
	int s3_state;		  /* nvme+s3: keep a copy of the state in the bucket too */
	int io_psync;		  /* io_engine=psync */
	int io_uring;		  /* FUSE requests over io_uring (libfuse 3.18+, fs/main.c) */
	int keep_hot;		  /* unmount keeps the hot files (fast remount) */
	int passthrough;	  /* hand hot files to the kernel (FUSE passthrough) */
	int extents;		  /* streams under pressure go to extents (tier/extent) */
	uint64_t extent_min;	  /* the smallest file moved into an extent (a stream, an evict) */
	uint64_t seal_delay_ms;	  /* an extent's seal after its last writer's close (0: at it) */
	int cold_writes;	  /* 1: writes go over cold data (overlays), 0: restore first */
	int admit_reread;	  /* admit=reread: cold data enters RAM when read again
				   * (tier/admit); 0: admit=always */
	/* elastic hot tier (tier/hot/pressure.c) */
	uint64_t hot_min;     /* the budget never shrinks below this */
	uint64_t mem_reserve; /* keep this much of the node's/cgroup's memory available */
	int mem_reserve_given; /* 1: the option; 0: 5% of mem_limit, at most 1G */
	uint64_t mem_limit;    /* what the daemon could have at mount (pressure_probe): */
	int mem_limit_cgroup;  /* its memory cgroup's limit (1) or the node's RAM (0) */
	int mem_pressure;     /* follow memory pressure (1) or keep hot_size (0) */
};

#endif
