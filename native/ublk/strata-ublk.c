/*
 * strata-ublk: serves one file or block device as /dev/ublkbN through the kernel's ublk driver
 * (drivers/block/ublk_drv.c, Linux 6.x with CONFIG_BLK_DEV_UBLK), with 4096-byte logical blocks,
 * and throttles it with token buckets: read IOPS, write IOPS, read bytes/s, write bytes/s
 * (0 = unlimited), changed live by SIGHUP + a limits file. It is the QoS stage of Strata's block
 * stack (docs/decisions.md, "QoS"; native/README.md for the interface).
 *
 * Threads: the main thread drives the control device (/dev/ublk-control) and waits for signals;
 * one queue thread serves the device's only hardware queue with one io_uring, which carries the
 * ublk commands (FETCH_REQ, COMMIT_AND_FETCH_REQ), the backing I/O, a timerfd (throttled requests)
 * and an eventfd (new limits, stop). Two threads because START_DEV does not return before the
 * kernel has read the new disk's partition table, which the queue thread must serve meanwhile.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <linux/capability.h>
#include <linux/falloc.h>
#include <linux/fs.h>
#include <linux/ioctl.h>
#include <linux/ublk_cmd.h>
#include <liburing.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include "throttle.h"

/*
 * Debian 12's linux-libc-dev (6.1) has ublk_cmd.h without the ioctl-encoded command numbers,
 * which Linux 6.4+ accepts and 6.12 documents as the only ones for new servers (the legacy
 * numbers exist behind CONFIG_BLKDEV_UBLK_LEGACY_OPCODES). Their values, from
 * include/uapi/linux/ublk_cmd.h of Linux 6.12: _IOR/_IOWR('u', <legacy number>, <command struct>).
 */
#ifndef UBLK_U_CMD_ADD_DEV
#define UBLK_U_CMD_GET_DEV_INFO _IOR('u', UBLK_CMD_GET_DEV_INFO, struct ublksrv_ctrl_cmd)
#define UBLK_U_CMD_ADD_DEV _IOWR('u', UBLK_CMD_ADD_DEV, struct ublksrv_ctrl_cmd)
#define UBLK_U_CMD_DEL_DEV _IOWR('u', UBLK_CMD_DEL_DEV, struct ublksrv_ctrl_cmd)
#define UBLK_U_CMD_START_DEV _IOWR('u', UBLK_CMD_START_DEV, struct ublksrv_ctrl_cmd)
#define UBLK_U_CMD_STOP_DEV _IOWR('u', UBLK_CMD_STOP_DEV, struct ublksrv_ctrl_cmd)
#define UBLK_U_CMD_SET_PARAMS _IOWR('u', UBLK_CMD_SET_PARAMS, struct ublksrv_ctrl_cmd)
#define UBLK_U_CMD_START_USER_RECOVERY _IOWR('u', UBLK_CMD_START_USER_RECOVERY, struct ublksrv_ctrl_cmd)
#define UBLK_U_CMD_END_USER_RECOVERY _IOWR('u', UBLK_CMD_END_USER_RECOVERY, struct ublksrv_ctrl_cmd)
#define UBLK_U_IO_FETCH_REQ _IOWR('u', UBLK_IO_FETCH_REQ, struct ublksrv_io_cmd)
#define UBLK_U_IO_COMMIT_AND_FETCH_REQ _IOWR('u', UBLK_IO_COMMIT_AND_FETCH_REQ, struct ublksrv_io_cmd)
#endif
#ifndef UBLK_F_CMD_IOCTL_ENCODE
#define UBLK_F_CMD_IOCTL_ENCODE (1UL << 6)
#endif

#define EXIT_USAGE 2
/* sysexits' EX_UNAVAILABLE: the kernel has no ublk. The agent tells it from a failure. */
#define EXIT_NO_UBLK 69

#define BLOCK_SHIFT 12 /* 4096-byte logical blocks on every device under the host path (docs/replication.md) */
#define DEFAULT_QUEUE_DEPTH 64
#define DEFAULT_MAX_IO_BYTES (512 * 1024)
#define CONTROL_DEVICE "/dev/ublk-control"
/*
 * How much of each tag's buffer is registered with the queue's io_uring (READ_FIXED/WRITE_FIXED:
 * the kernel pins it once instead of at every O_DIRECT transfer). Registering pins the pages,
 * so only the head of each buffer: 64 tags x 64 KiB = 4 MiB per server, which covers the small
 * random I/O where the per-request pinning shows; larger transfers go as plain reads and writes.
 */
#define FIXED_BUF_BYTES (64 * 1024)
/* Registered files: the character device and the backing, by index (IOSQE_FIXED_FILE). */
enum { FIXED_CHAR = 0, FIXED_BACKING = 1 };

static const char *program = "strata-ublk";

static void logmsg(const char *format, ...) __attribute__((format(printf, 1, 2)));
static void logmsg(const char *format, ...)
{
	va_list ap;
	char line[512];

	va_start(ap, format);
	vsnprintf(line, sizeof line, format, ap);
	va_end(ap);
	/* One write per line: the agent reads stderr line by line, from two threads here. */
	dprintf(STDERR_FILENO, "%s: %s\n", program, line);
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ---- limits ---- */

struct limits {
	uint64_t read_iops, write_iops, read_bps, write_bps;
};

static const char *const limit_names[] = { "read-iops", "write-iops", "read-bps", "write-bps" };

static uint64_t *limit_field(struct limits *l, int i)
{
	uint64_t *fields[] = { &l->read_iops, &l->write_iops, &l->read_bps, &l->write_bps };
	return fields[i];
}

static bool parse_u64(const char *text, uint64_t *out)
{
	char *end;
	unsigned long long v;

	if (*text < '0' || *text > '9')
		return false;
	errno = 0;
	v = strtoull(text, &end, 10);
	if (errno || *end)
		return false;
	*out = v;
	return true;
}

/* Sets limit `name` (one of limit_names) to `value`; false for an unknown name or a bad number. */
static bool set_limit(struct limits *l, const char *name, const char *value)
{
	for (int i = 0; i < 4; i++)
		if (strcmp(name, limit_names[i]) == 0)
			return parse_u64(value, limit_field(l, i));
	return false;
}

/*
 * Reads a limits file: lines `<name> <value>` or `<name>=<value>`, names as the options
 * (read-iops, write-iops, read-bps, write-bps), a name left out is unlimited, `#` starts a
 * comment. The whole file or nothing: a bad line leaves the caller's limits as they were.
 */
static int read_limits_file(const char *path, struct limits *out)
{
	FILE *f = fopen(path, "re");
	struct limits l = { 0 };
	char line[256];
	int number = 0;

	if (!f) {
		logmsg("limits file %s: %s", path, strerror(errno));
		return -1;
	}
	while (fgets(line, sizeof line, f)) {
		char *name, *value, *hash = strchr(line, '#');

		number++;
		if (hash)
			*hash = 0;
		name = strtok(line, " \t\r\n=");
		if (!name)
			continue;
		value = strtok(NULL, " \t\r\n=");
		if (!value || strtok(NULL, " \t\r\n") || !set_limit(&l, name, value)) {
			logmsg("limits file %s, line %d: expected `<read-iops|write-iops|read-bps|write-bps> <integer>`", path, number);
			fclose(f);
			return -1;
		}
	}
	fclose(f);
	*out = l;
	return 0;
}

static void describe_limit(char *buf, size_t size, uint64_t v, const char *unit)
{
	if (v)
		snprintf(buf, size, "%" PRIu64 " %s", v, unit);
	else
		snprintf(buf, size, "unlimited");
}

static void log_limits(const struct limits *l)
{
	char a[40], b[40], c[40], d[40];

	describe_limit(a, sizeof a, l->read_iops, "IOPS");
	describe_limit(b, sizeof b, l->write_iops, "IOPS");
	describe_limit(c, sizeof c, l->read_bps, "B/s");
	describe_limit(d, sizeof d, l->write_bps, "B/s");
	logmsg("limits: read %s, %s; write %s, %s", a, c, b, d);
}

/* ---- the control device ---- */

struct control {
	int fd;
	struct io_uring ring; /* SQE128: a control command is 32 bytes, more than a 64-byte SQE carries */
};

static int control_open(struct control *c)
{
	int ret;

	c->fd = open(CONTROL_DEVICE, O_RDWR | O_CLOEXEC);
	if (c->fd < 0) {
		int e = errno;

		if (e == ENOENT || e == ENODEV || e == ENXIO)
			logmsg("ublk is missing: %s: %s (a kernel without CONFIG_BLK_DEV_UBLK, or the ublk_drv module not loaded)",
			       CONTROL_DEVICE, strerror(e));
		else
			logmsg("%s: %s", CONTROL_DEVICE, strerror(e));
		return -e;
	}
	ret = io_uring_queue_init(4, &c->ring, IORING_SETUP_SQE128);
	if (ret < 0) {
		logmsg("io_uring_queue_init: %s", strerror(-ret));
		close(c->fd);
		return ret;
	}
	return 0;
}

/* The exit status for a failed control_open: EXIT_NO_UBLK when the kernel has no ublk. */
static int exit_status_of_open(int ret)
{
	return ret == -ENOENT || ret == -ENODEV || ret == -ENXIO ? EXIT_NO_UBLK : 1;
}

static void control_close(struct control *c)
{
	io_uring_queue_exit(&c->ring);
	close(c->fd);
}

/* One control command, synchronously: the kernel's result (>= 0, or -errno). */
static int control_command(struct control *c, uint32_t op, uint32_t dev_id, void *buf, uint16_t len, uint64_t data)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&c->ring);
	struct io_uring_cqe *cqe;
	struct ublksrv_ctrl_cmd *cmd;
	int ret;

	if (!sqe)
		return -EBUSY;
	/* A 128-byte entry: the command sits in its second half, which must not keep old bytes. */
	memset((void *)sqe, 0, 128);
	sqe->opcode = IORING_OP_URING_CMD;
	sqe->fd = c->fd;
	sqe->cmd_op = op;
	cmd = (struct ublksrv_ctrl_cmd *)sqe->cmd;
	cmd->dev_id = dev_id;
	cmd->queue_id = (uint16_t)-1;
	cmd->addr = (uint64_t)(uintptr_t)buf;
	cmd->len = len;
	cmd->data[0] = data;
	ret = io_uring_submit(&c->ring);
	if (ret < 0)
		return ret;
	do
		ret = io_uring_wait_cqe(&c->ring, &cqe);
	while (ret == -EINTR);
	if (ret < 0)
		return ret;
	ret = cqe->res;
	io_uring_cqe_seen(&c->ring, cqe);
	return ret;
}

static int get_info(struct control *c, uint32_t dev_id, struct ublksrv_ctrl_dev_info *info)
{
	memset(info, 0, sizeof *info);
	return control_command(c, UBLK_U_CMD_GET_DEV_INFO, dev_id, info, sizeof *info, 0);
}

static const char *state_name(uint16_t state)
{
	switch (state) {
	case UBLK_S_DEV_DEAD: return "dead";
	case UBLK_S_DEV_LIVE: return "live";
	case UBLK_S_DEV_QUIESCED: return "quiesced";
	default: return "unknown";
	}
}

/* ---- the queue ---- */

/* What an io_uring completion is about: the kind in the top byte of user_data, the tag below. */
enum { KIND_UBLK = 1, KIND_BACKING, KIND_TIMER, KIND_WAKE };
#define USER_DATA(kind, tag) (((uint64_t)(kind) << 56) | (uint64_t)(tag))
#define KIND_OF(ud) ((int)((ud) >> 56))
#define TAG_OF(ud) ((unsigned)((ud) & 0xffffffffu))

enum tag_state { TAG_FETCHING, TAG_THROTTLED, TAG_BACKING, TAG_GONE };

struct tag {
	enum tag_state state;
	void *buf;
	uint8_t op;
	uint32_t flags;
	uint64_t offset;
	uint32_t length;
	uint32_t done;
	int next; /* next tag in its direction's FIFO, -1 at the end */
};

struct fifo {
	int head, tail;
};

struct server {
	/* set up by main before the queue thread starts */
	int char_fd;
	int backing_fd;
	uint32_t dev_id;
	unsigned depth;
	unsigned max_io;
	bool backing_is_blockdev;
	const struct ublksrv_io_desc *descs;
	size_t descs_bytes;

	/* main -> queue thread, under `lock`, announced on `wake_fd` */
	pthread_mutex_t lock;
	struct limits limits;
	bool limits_changed;
	atomic_bool stopping; /* STOP_DEV follows: let every request through so the kernel can drain */
	atomic_bool quit;     /* leave as soon as no backing I/O is in flight (start failed) */
	int wake_fd;

	/* queue thread -> main */
	pthread_mutex_t ready_lock;
	pthread_cond_t ready_cond;
	int ready; /* 0 while setting up, 1 once every FETCH_REQ is queued, -errno on failure */
	int exit_status;

	/* queue thread only */
	struct io_uring ring;
	struct tag *tags;
	struct direction dirs[2]; /* [0] reads, [1] writes */
	struct fifo waiting[2];
	int timer_fd;
	bool timer_armed;
	uint64_t timer_buf, wake_buf;
	unsigned gone, backing_inflight;
	bool fixed_files;  /* char_fd and backing_fd registered (FIXED_CHAR, FIXED_BACKING) */
	bool ring_fd_registered; /* io_uring_register_ring_fd, by this thread */
	unsigned fixed_buf_bytes; /* head of each tag's buffer registered as buffer `tag`; 0 = none */
	uint64_t now;      /* the clock, read once per batch of completions when a limit needs it; 0 = not yet */
};

/*
 * The time for the token buckets: read at most once per batch of completions (they all came in
 * at the same wait), not once per request. A stale `now` credits tokens a little later, never
 * more: the next refill counts from it. Reset after every wait.
 */
static uint64_t batch_now(struct server *s)
{
	if (!s->now)
		s->now = now_ns();
	return s->now;
}

static struct io_uring_sqe *get_sqe(struct server *s)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&s->ring);

	/* The ring has room for every tag twice plus two reads, so this only flushes a full batch. */
	while (!sqe) {
		io_uring_submit(&s->ring);
		sqe = io_uring_get_sqe(&s->ring);
	}
	return sqe;
}

static void queue_ublk_command(struct server *s, unsigned tag, uint32_t op, int32_t result)
{
	struct io_uring_sqe *sqe = get_sqe(s);
	struct ublksrv_io_cmd *cmd = (struct ublksrv_io_cmd *)sqe->cmd;

	/* The io_uring_prep_* helpers fill every field; a ublk command is put together by hand. */
	memset(sqe, 0, sizeof *sqe);
	sqe->opcode = IORING_OP_URING_CMD;
	if (s->fixed_files) {
		sqe->fd = FIXED_CHAR;
		sqe->flags = IOSQE_FIXED_FILE;
	} else {
		sqe->fd = s->char_fd;
	}
	sqe->cmd_op = op;
	sqe->user_data = USER_DATA(KIND_UBLK, tag);
	cmd->q_id = 0;
	cmd->tag = (uint16_t)tag;
	cmd->result = result;
	cmd->addr = (uint64_t)(uintptr_t)s->tags[tag].buf;
	s->tags[tag].state = TAG_FETCHING;
}

static void complete(struct server *s, unsigned tag, int32_t result)
{
	queue_ublk_command(s, tag, UBLK_U_IO_COMMIT_AND_FETCH_REQ, result);
}

static void queue_read_of(struct server *s, int fd, uint64_t *buf, int kind)
{
	struct io_uring_sqe *sqe = get_sqe(s);

	io_uring_prep_read(sqe, fd, buf, sizeof *buf, 0);
	sqe->user_data = USER_DATA(kind, 0);
}

/* Starts (or continues, after a short transfer) the backing I/O of a request. */
static void issue_backing(struct server *s, unsigned tag)
{
	struct tag *t = &s->tags[tag];
	struct io_uring_sqe *sqe = get_sqe(s);
	int fd = s->fixed_files ? FIXED_BACKING : s->backing_fd;
	/* The transfer lies in the registered head of the tag's buffer: no pinning per request. */
	bool fixed_buf = s->fixed_buf_bytes && t->length <= s->fixed_buf_bytes;

	switch (t->op) {
	case UBLK_IO_OP_READ:
		if (fixed_buf)
			io_uring_prep_read_fixed(sqe, fd, (char *)t->buf + t->done, t->length - t->done, t->offset + t->done, (int)tag);
		else
			io_uring_prep_read(sqe, fd, (char *)t->buf + t->done, t->length - t->done, t->offset + t->done);
		break;
	case UBLK_IO_OP_WRITE:
		if (fixed_buf)
			io_uring_prep_write_fixed(sqe, fd, (char *)t->buf + t->done, t->length - t->done, t->offset + t->done, (int)tag);
		else
			io_uring_prep_write(sqe, fd, (char *)t->buf + t->done, t->length - t->done, t->offset + t->done);
		/* FUA: this write is durable when it completes (the disk says UBLK_ATTR_FUA). */
		if (t->flags & UBLK_IO_F_FUA)
			sqe->rw_flags = RWF_DSYNC;
		break;
	case UBLK_IO_OP_FLUSH:
		io_uring_prep_fsync(sqe, fd, IORING_FSYNC_DATASYNC);
		break;
	case UBLK_IO_OP_DISCARD:
		io_uring_prep_fallocate(sqe, fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)t->offset, (off_t)t->length);
		break;
	case UBLK_IO_OP_WRITE_ZEROES:
		io_uring_prep_fallocate(sqe, fd, FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE, (off_t)t->offset, (off_t)t->length);
		break;
	}
	/* io_uring_prep_* clears the flags; set after it. */
	if (s->fixed_files)
		sqe->flags |= IOSQE_FIXED_FILE;
	sqe->user_data = USER_DATA(KIND_BACKING, tag);
	t->state = TAG_BACKING;
	s->backing_inflight++;
}

/* Which bucket pair a request draws from: reads, or everything that changes data. */
static int direction_of(uint8_t op)
{
	return op == UBLK_IO_OP_READ ? 0 : 1;
}

/* Bytes a request counts against a bandwidth limit: data moved; discards and zeroing move none. */
static uint64_t cost_bytes(const struct tag *t)
{
	return t->op == UBLK_IO_OP_READ || t->op == UBLK_IO_OP_WRITE ? t->length : 0;
}

/* A direction none of whose buckets has a rate: its requests never wait, and need no clock. */
static bool unlimited(const struct direction *d)
{
	return d->ops.rate == 0 && d->bytes.rate == 0;
}

/*
 * Lets through, in order, the waiting requests of each direction the buckets allow, then arms
 * the timer for the earliest one still waiting.
 */
static void release_waiting(struct server *s)
{
	uint64_t earliest = 0;
	bool drain = atomic_load(&s->stopping) || atomic_load(&s->quit);

	for (int d = 0; d < 2; d++) {
		struct fifo *q = &s->waiting[d];
		bool free_pass = drain || unlimited(&s->dirs[d]);

		while (q->head >= 0) {
			unsigned tag = (unsigned)q->head;
			uint64_t wait = free_pass ? 0 : direction_admit(&s->dirs[d], cost_bytes(&s->tags[tag]), batch_now(s));

			if (wait) {
				if (!earliest || wait < earliest)
					earliest = wait;
				break;
			}
			q->head = s->tags[tag].next;
			if (q->head < 0)
				q->tail = -1;
			issue_backing(s, tag);
		}
	}
	if (earliest || s->timer_armed) {
		struct itimerspec its = { 0 };

		its.it_value.tv_sec = (time_t)(earliest / 1000000000ull);
		its.it_value.tv_nsec = (long)(earliest % 1000000000ull);
		timerfd_settime(s->timer_fd, 0, &its, NULL);
		s->timer_armed = earliest != 0;
	}
}

static void enqueue(struct server *s, unsigned tag)
{
	struct fifo *q = &s->waiting[direction_of(s->tags[tag].op)];

	s->tags[tag].next = -1;
	s->tags[tag].state = TAG_THROTTLED;
	if (q->tail >= 0)
		s->tags[q->tail].next = (int)tag;
	else
		q->head = (int)tag;
	q->tail = (int)tag;
}

static void on_request(struct server *s, unsigned tag)
{
	const struct ublksrv_io_desc *desc = &s->descs[tag];
	struct tag *t = &s->tags[tag];

	t->op = ublksrv_get_op(desc);
	t->flags = ublksrv_get_flags(desc);
	t->offset = desc->start_sector << 9;
	t->length = desc->nr_sectors << 9;
	t->done = 0;
	switch (t->op) {
	case UBLK_IO_OP_FLUSH:
		/* A flush carries no data and limits nothing a policy names: never held back. */
		issue_backing(s, tag);
		return;
	case UBLK_IO_OP_READ:
	case UBLK_IO_OP_WRITE:
		if (t->length > s->max_io) {
			complete(s, tag, -EINVAL);
			return;
		}
		break;
	case UBLK_IO_OP_DISCARD:
	case UBLK_IO_OP_WRITE_ZEROES:
		break;
	default:
		complete(s, tag, -EOPNOTSUPP);
		return;
	}
	enqueue(s, tag);
	release_waiting(s);
}

static void on_backing_done(struct server *s, unsigned tag, int res)
{
	struct tag *t = &s->tags[tag];

	s->backing_inflight--;
	if (res == -EAGAIN || res == -EINTR) {
		issue_backing(s, tag);
		return;
	}
	if (t->op == UBLK_IO_OP_READ || t->op == UBLK_IO_OP_WRITE) {
		if (res == 0) {
			/* Past the end of the backing: it shrank under us. */
			complete(s, tag, -EIO);
			return;
		}
		if (res > 0) {
			t->done += (uint32_t)res;
			if (t->done < t->length) {
				issue_backing(s, tag);
				return;
			}
			res = (int)t->length;
		}
	} else if (t->op == UBLK_IO_OP_DISCARD && (res == -EOPNOTSUPP || res == -EINVAL)) {
		/* A discard is a hint: a backing that cannot punch holes keeps the data, which is allowed. */
		res = 0;
	}
	complete(s, tag, res);
}

static void on_ublk_completion(struct server *s, unsigned tag, int res)
{
	if (res == UBLK_IO_RES_OK) {
		on_request(s, tag);
		return;
	}
	/* UBLK_IO_RES_ABORT: the device is stopping, this tag gets no more requests. */
	if (res != UBLK_IO_RES_ABORT && !atomic_load(&s->stopping))
		logmsg("queue: tag %u: ublk command failed: %s", tag, strerror(-res));
	s->tags[tag].state = TAG_GONE;
	s->gone++;
}

static void take_new_limits(struct server *s)
{
	struct limits l;
	bool changed;
	/* The batch's time, as the buckets' other refills: their clock never goes back. */
	uint64_t now = batch_now(s);

	pthread_mutex_lock(&s->lock);
	l = s->limits;
	changed = s->limits_changed;
	s->limits_changed = false;
	pthread_mutex_unlock(&s->lock);
	if (!changed)
		return;
	bucket_set_rate(&s->dirs[0].ops, l.read_iops, now);
	bucket_set_rate(&s->dirs[1].ops, l.write_iops, now);
	bucket_set_rate(&s->dirs[0].bytes, l.read_bps, now);
	bucket_set_rate(&s->dirs[1].bytes, l.write_bps, now);
}

/*
 * Drops CAP_SYS_ADMIN from this thread's effective set (capabilities are per thread; the main
 * thread keeps it for the control commands). Linux 6.12's ublk scans a new disk's partition table
 * unless a queue's server lacked CAP_SYS_ADMIN when it fetched its requests; a volume's
 * partitions must not appear on the storage node (udev, LVM and the like would probe what belongs
 * to a host). Newer kernels offer UBLK_F_NO_AUTO_PART_SCAN for this.
 */
static void drop_sys_admin(void)
{
	struct __user_cap_header_struct header = { .version = _LINUX_CAPABILITY_VERSION_3, .pid = 0 };
	struct __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3];

	if (syscall(SYS_capget, &header, data) < 0)
		return;
	data[CAP_TO_INDEX(CAP_SYS_ADMIN)].effective &= ~CAP_TO_MASK(CAP_SYS_ADMIN);
	if (syscall(SYS_capset, &header, data) < 0)
		logmsg("capset: %s (the kernel will scan the device's partitions)", strerror(errno));
}

/*
 * Registers the two files every request uses and the head of each tag's buffer with the ring,
 * so that a request's SQEs skip the file lookup (fget/fput) and its backing transfer the page
 * pinning; and the ring's descriptor, looked up at every io_uring_enter otherwise. Each is
 * optional: a kernel or a memlock limit that refuses keeps the plain way.
 */
static void register_with_ring(struct server *s)
{
	int files[2] = { s->char_fd, s->backing_fd };
	struct iovec *iov;
	unsigned bytes = s->max_io < FIXED_BUF_BYTES ? s->max_io : FIXED_BUF_BYTES;
	int ret;

	/* The ring's own descriptor too (Linux 5.18+): each io_uring_enter skips its lookup. */
	if (io_uring_register_ring_fd(&s->ring) == 1)
		s->ring_fd_registered = true;
	ret = io_uring_register_files(&s->ring, files, 2);
	if (ret < 0)
		logmsg("queue: registering files: %s (plain descriptors)", strerror(-ret));
	else
		s->fixed_files = true;
	iov = calloc(s->depth, sizeof *iov);
	if (!iov)
		return;
	for (unsigned tag = 0; tag < s->depth; tag++)
		iov[tag] = (struct iovec){ .iov_base = s->tags[tag].buf, .iov_len = bytes };
	ret = io_uring_register_buffers(&s->ring, iov, s->depth);
	free(iov);
	if (ret < 0)
		logmsg("queue: registering buffers: %s (plain reads and writes)", strerror(-ret));
	else
		s->fixed_buf_bytes = bytes;
}

/* What register_with_ring did, undone by the thread that did it (the ring has one issuer). */
static void unregister_from_ring(struct server *s)
{
	if (s->fixed_buf_bytes)
		io_uring_unregister_buffers(&s->ring);
	if (s->fixed_files)
		io_uring_unregister_files(&s->ring);
	if (s->ring_fd_registered)
		io_uring_unregister_ring_fd(&s->ring);
	s->fixed_buf_bytes = 0;
	s->fixed_files = false;
	s->ring_fd_registered = false;
}

static int queue_setup(struct server *s)
{
	size_t desc_bytes = (size_t)s->depth * sizeof(struct ublksrv_io_desc);
	long page = sysconf(_SC_PAGESIZE);
	void *descs;
	int ret;

	desc_bytes = (desc_bytes + (size_t)page - 1) / (size_t)page * (size_t)page;
	/* Queue 0's request descriptors: offset UBLKSRV_CMD_BUF_OFFSET, read-only for us. */
	descs = mmap(NULL, desc_bytes, PROT_READ, MAP_SHARED | MAP_POPULATE, s->char_fd, UBLKSRV_CMD_BUF_OFFSET);
	if (descs == MAP_FAILED) {
		ret = -errno;
		logmsg("mmap of the request descriptors: %s", strerror(-ret));
		return ret;
	}
	s->descs = descs;
	s->descs_bytes = desc_bytes;
	/*
	 * One thread submits and reaps, so the kernel may run the ring's task work (how ublk hands
	 * us requests) only when we wait for completions (DEFER_TASKRUN), not by interrupting us;
	 * what ublk's own servers do. A kernel before 6.1 refuses the flags: then a plain ring.
	 */
	ret = io_uring_queue_init(2 * s->depth + 4, &s->ring, IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN | IORING_SETUP_COOP_TASKRUN);
	if (ret == -EINVAL)
		ret = io_uring_queue_init(2 * s->depth + 4, &s->ring, 0);
	if (ret < 0) {
		logmsg("queue io_uring_queue_init: %s", strerror(-ret));
		return ret;
	}
	drop_sys_admin();
	s->tags = calloc(s->depth, sizeof *s->tags);
	if (!s->tags)
		return -ENOMEM;
	for (unsigned tag = 0; tag < s->depth; tag++) {
		/* O_DIRECT on the backing wants aligned buffers; 4096 covers a 4 KiB-sector device. */
		if (posix_memalign(&s->tags[tag].buf, 4096, s->max_io))
			return -ENOMEM;
	}
	register_with_ring(s);
	for (unsigned tag = 0; tag < s->depth; tag++)
		queue_ublk_command(s, tag, UBLK_U_IO_FETCH_REQ, -1);
	s->timer_fd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC);
	if (s->timer_fd < 0)
		return -errno;
	s->waiting[0] = s->waiting[1] = (struct fifo){ -1, -1 };
	queue_read_of(s, s->timer_fd, &s->timer_buf, KIND_TIMER);
	queue_read_of(s, s->wake_fd, &s->wake_buf, KIND_WAKE);
	take_new_limits(s);
	ret = io_uring_submit(&s->ring);
	return ret < 0 ? ret : 0;
}

/*
 * The device's queue without an I/O scheduler. ublk's single queue gets mq-deadline by default,
 * whose sorting and merging this stage does not need: it sits between device-mapper and md, which
 * have none, and what it passes on is dispatched at once. Best effort: a kernel that refuses keeps
 * its default (the limits hold either way).
 */
static void no_io_scheduler(unsigned dev_id)
{
	char path[64];
	int fd;

	snprintf(path, sizeof path, "/sys/block/ublkb%u/queue/scheduler", dev_id);
	fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0 || write(fd, "none", 4) != 4)
		logmsg("%s: could not set no scheduler: %s", path, strerror(errno));
	if (fd >= 0)
		close(fd);
}

static void set_ready(struct server *s, int value)
{
	pthread_mutex_lock(&s->ready_lock);
	s->ready = value;
	pthread_cond_signal(&s->ready_cond);
	pthread_mutex_unlock(&s->ready_lock);
}

static void *queue_thread(void *arg)
{
	struct server *s = arg;
	int ret = queue_setup(s);

	if (ret < 0) {
		set_ready(s, ret);
		s->exit_status = 1;
		return NULL;
	}
	set_ready(s, 1);
	/* Until every tag has been aborted (STOP_DEV/DEL_DEV) or a failed start tells us to go. */
	while (s->gone < s->depth && !(atomic_load(&s->quit) && s->backing_inflight == 0)) {
		struct io_uring_cqe *cqe;
		unsigned head, seen = 0;

		ret = io_uring_submit_and_wait(&s->ring, 1);
		s->now = 0; /* time passed in the wait: read the clock again if a limit asks */
		if (ret < 0 && ret != -EINTR && ret != -EAGAIN && ret != -EBUSY) {
			logmsg("queue: io_uring_submit_and_wait: %s", strerror(-ret));
			s->exit_status = 1;
			break;
		}
		io_uring_for_each_cqe(&s->ring, head, cqe) {
			uint64_t ud = cqe->user_data;

			seen++;
			switch (KIND_OF(ud)) {
			case KIND_UBLK:
				on_ublk_completion(s, TAG_OF(ud), cqe->res);
				break;
			case KIND_BACKING:
				on_backing_done(s, TAG_OF(ud), cqe->res);
				break;
			case KIND_TIMER:
				s->timer_armed = false;
				release_waiting(s);
				queue_read_of(s, s->timer_fd, &s->timer_buf, KIND_TIMER);
				break;
			case KIND_WAKE:
				take_new_limits(s);
				release_waiting(s);
				queue_read_of(s, s->wake_fd, &s->wake_buf, KIND_WAKE);
				break;
			}
		}
		io_uring_cq_advance(&s->ring, seen);
	}
	/*
	 * Let go of the registered files here: the ring would hold the character device (which
	 * DEL_DEV waits for) until its deferred teardown after io_uring_queue_exit.
	 */
	unregister_from_ring(s);
	/* Wakes the main thread's sigwaitinfo: the queue is done, by request or not. */
	kill(getpid(), SIGUSR1);
	return NULL;
}

static void wake_queue(struct server *s)
{
	uint64_t one = 1;

	if (write(s->wake_fd, &one, sizeof one) < 0)
		logmsg("eventfd write: %s", strerror(errno));
}

/* ---- serve / recover ---- */

struct options {
	const char *backing;
	const char *limits_file;
	struct limits limits;
	bool limits_given;
	int64_t dev_id; /* -1: the kernel chooses (serve); the device to take over (recover) */
	bool buffered;  /* page-cache I/O on the backing: btrfs compresses only what goes through it */
	unsigned depth;
	unsigned max_io;
};

static int open_backing(struct server *s, const char *path, bool buffered, uint64_t *size)
{
	struct stat st;

	/*
	 * Direct I/O as nvmet's file namespaces and the replicated legs' loop devices do (no second
	 * cache), unless asked for buffered I/O as nvmet's buffered_io=1 (compressed volumes).
	 */
	s->backing_fd = open(path, O_RDWR | (buffered ? 0 : O_DIRECT) | O_CLOEXEC);
	if (s->backing_fd < 0 && errno == EINVAL && !buffered) {
		logmsg("%s: no direct I/O on its file system, using buffered I/O", path);
		s->backing_fd = open(path, O_RDWR | O_CLOEXEC);
	}
	if (s->backing_fd < 0 || fstat(s->backing_fd, &st) < 0) {
		logmsg("backing %s: %s", path, strerror(errno));
		return -1;
	}
	if (S_ISBLK(st.st_mode)) {
		int sector;

		s->backing_is_blockdev = true;
		if (ioctl(s->backing_fd, BLKGETSIZE64, size) < 0 || ioctl(s->backing_fd, BLKSSZGET, &sector) < 0) {
			logmsg("backing %s: %s", path, strerror(errno));
			return -1;
		}
		if (sector > (1 << BLOCK_SHIFT)) {
			logmsg("backing %s: %d-byte sectors, more than the %d this device serves", path, sector, 1 << BLOCK_SHIFT);
			return -1;
		}
	} else if (S_ISREG(st.st_mode)) {
		*size = (uint64_t)st.st_size;
	} else {
		logmsg("backing %s: neither a regular file nor a block device", path);
		return -1;
	}
	*size &= ~(uint64_t)((1 << BLOCK_SHIFT) - 1);
	if (*size == 0) {
		logmsg("backing %s: smaller than one %d-byte block", path, 1 << BLOCK_SHIFT);
		return -1;
	}
	return 0;
}

static int set_params(struct control *c, struct server *s, uint64_t size)
{
	struct ublk_params p;

	memset(&p, 0, sizeof p);
	p.len = sizeof p;
	p.types = UBLK_PARAM_TYPE_BASIC | UBLK_PARAM_TYPE_DISCARD;
	/* A volatile cache and FUA: flushes and FUA writes reach us and go to the backing as fdatasync / RWF_DSYNC. */
	p.basic.attrs = UBLK_ATTR_VOLATILE_CACHE | UBLK_ATTR_FUA;
	p.basic.logical_bs_shift = BLOCK_SHIFT;
	p.basic.physical_bs_shift = BLOCK_SHIFT;
	p.basic.io_opt_shift = BLOCK_SHIFT;
	p.basic.io_min_shift = BLOCK_SHIFT;
	p.basic.max_sectors = s->max_io >> 9;
	p.basic.dev_sectors = size >> 9;
	p.discard.discard_granularity = 1 << BLOCK_SHIFT;
	p.discard.max_discard_sectors = UINT_MAX >> 9 & ~7u;
	p.discard.max_write_zeroes_sectors = UINT_MAX >> 9 & ~7u;
	p.discard.max_discard_segments = 1;
	return control_command(c, UBLK_U_CMD_SET_PARAMS, s->dev_id, &p, sizeof p, 0);
}

static int open_char_device(struct server *s)
{
	char path[64];

	snprintf(path, sizeof path, "/dev/ublkc%u", s->dev_id);
	/*
	 * devtmpfs creates the node when the device is added; allow a udev that still renames it a
	 * second. EBUSY: the device is still open, in `recover` by a dead server's ring whose
	 * teardown (which lets go of its registered files) has not finished: allow it three.
	 */
	for (int attempt = 0; attempt < 300; attempt++) {
		s->char_fd = open(path, O_RDWR | O_CLOEXEC);
		if (s->char_fd >= 0 || (errno != ENOENT && errno != EBUSY) || (errno == ENOENT && attempt >= 100))
			break;
		usleep(10000);
	}
	if (s->char_fd < 0) {
		logmsg("%s: %s", path, strerror(errno));
		return -1;
	}
	return 0;
}

static int apply_limits_file(struct server *s, const char *path)
{
	struct limits l;

	if (read_limits_file(path, &l) < 0)
		return -1;
	pthread_mutex_lock(&s->lock);
	s->limits = l;
	s->limits_changed = true;
	pthread_mutex_unlock(&s->lock);
	log_limits(&l);
	return 0;
}

/* Stops the queue thread and lets go of the character device, so that DEL_DEV can finish. */
static void release_queue(struct server *s, pthread_t thread, bool started)
{
	if (started)
		pthread_join(thread, NULL);
	if (s->ring.ring_fd > 0)
		io_uring_queue_exit(&s->ring);
	/* The mapping holds the character device open as much as the descriptor does. */
	if (s->descs)
		munmap((void *)s->descs, s->descs_bytes);
	s->descs = NULL;
	if (s->char_fd >= 0)
		close(s->char_fd);
	s->char_fd = -1;
}

static int serve(const struct options *o, bool recover)
{
	struct server s = { .char_fd = -1, .backing_fd = -1, .timer_fd = -1, .exit_status = 0 };
	struct control c;
	struct ublksrv_ctrl_dev_info info;
	uint64_t size = 0;
	pthread_t thread;
	bool thread_started = false, added = false;
	sigset_t signals;
	int ret, status = 1;

	pthread_mutex_init(&s.lock, NULL);
	pthread_mutex_init(&s.ready_lock, NULL);
	pthread_cond_init(&s.ready_cond, NULL);
	s.limits = o->limits;
	s.limits_changed = true;
	s.depth = o->depth;
	s.max_io = o->max_io;

	/* Signals go to sigwaitinfo in this thread only; the queue thread inherits the mask. */
	sigemptyset(&signals);
	sigaddset(&signals, SIGTERM);
	sigaddset(&signals, SIGINT);
	sigaddset(&signals, SIGHUP);
	sigaddset(&signals, SIGUSR1);
	pthread_sigmask(SIG_BLOCK, &signals, NULL);
	signal(SIGPIPE, SIG_IGN);

	/* What the caller gave first, so that a bad limits file or backing is told on any kernel. */
	if (o->limits_file && apply_limits_file(&s, o->limits_file) < 0)
		return 1;
	if (!o->limits_file)
		log_limits(&s.limits);
	if (open_backing(&s, o->backing, o->buffered, &size) < 0)
		return 1;
	ret = control_open(&c);
	if (ret < 0)
		return exit_status_of_open(ret);
	s.wake_fd = eventfd(0, EFD_CLOEXEC);

	if (recover) {
		s.dev_id = (uint32_t)o->dev_id;
		ret = get_info(&c, s.dev_id, &info);
		if (ret < 0) {
			logmsg("device %u: %s", s.dev_id, strerror(-ret));
			goto out_control;
		}
		if (info.state != UBLK_S_DEV_QUIESCED) {
			logmsg("device %u is %s, not quiesced: nothing to recover", s.dev_id, state_name(info.state));
			goto out_control;
		}
		s.depth = info.queue_depth;
		s.max_io = info.max_io_buf_bytes;
		ret = control_command(&c, UBLK_U_CMD_START_USER_RECOVERY, s.dev_id, NULL, 0, 0);
		if (ret < 0) {
			logmsg("START_USER_RECOVERY of device %u: %s", s.dev_id, strerror(-ret));
			goto out_control;
		}
	} else {
		memset(&info, 0, sizeof info);
		info.nr_hw_queues = 1;
		info.queue_depth = (uint16_t)s.depth;
		info.max_io_buf_bytes = s.max_io;
		info.dev_id = o->dev_id < 0 ? UINT32_MAX : (uint32_t)o->dev_id;
		/*
		 * USER_RECOVERY + REISSUE: when this process dies, the kernel holds the device's I/O
		 * (hosts wait, nothing fails) until `strata-ublk recover` takes over or the device is
		 * deleted; the requests we had are issued again to the new server.
		 */
		info.flags = UBLK_F_CMD_IOCTL_ENCODE | UBLK_F_USER_RECOVERY | UBLK_F_USER_RECOVERY_REISSUE;
		ret = control_command(&c, UBLK_U_CMD_ADD_DEV, info.dev_id, &info, sizeof info, 0);
		if (ret < 0) {
			logmsg("ADD_DEV: %s", strerror(-ret));
			goto out_control;
		}
		added = true;
		s.dev_id = info.dev_id;
		/* The kernel may lower what we asked for (it rounds the buffer size to pages). */
		s.max_io = info.max_io_buf_bytes;
		ret = set_params(&c, &s, size);
		if (ret < 0) {
			logmsg("SET_PARAMS of device %u: %s", s.dev_id, strerror(-ret));
			goto out_delete;
		}
	}
	if (open_char_device(&s) < 0)
		goto out_delete;

	ret = pthread_create(&thread, NULL, queue_thread, &s);
	if (ret) {
		logmsg("pthread_create: %s", strerror(ret));
		goto out_delete;
	}
	thread_started = true;
	pthread_mutex_lock(&s.ready_lock);
	while (s.ready == 0)
		pthread_cond_wait(&s.ready_cond, &s.ready_lock);
	pthread_mutex_unlock(&s.ready_lock);
	if (s.ready < 0)
		goto out_delete;

	/* Blocks until the kernel has seen every FETCH_REQ (and, for START_DEV, scanned the disk). */
	ret = control_command(&c, recover ? UBLK_U_CMD_END_USER_RECOVERY : UBLK_U_CMD_START_DEV, s.dev_id, NULL, 0, (uint64_t)getpid());
	if (ret < 0) {
		logmsg("%s of device %u: %s", recover ? "END_USER_RECOVERY" : "START_DEV", s.dev_id, strerror(-ret));
		goto out_delete;
	}
	no_io_scheduler(s.dev_id);
	/* The one line on stdout: what the agent waits for. */
	printf("ready id=%u device=/dev/ublkb%u\n", s.dev_id, s.dev_id);
	fflush(stdout);

	for (;;) {
		siginfo_t si;
		int sig = sigwaitinfo(&signals, &si);

		if (sig == SIGHUP) {
			if (o->limits_file && apply_limits_file(&s, o->limits_file) == 0)
				wake_queue(&s);
			continue;
		}
		if (sig == SIGTERM || sig == SIGINT) {
			logmsg("stopping device %u", s.dev_id);
			status = 0;
		} else if (sig == SIGUSR1) {
			logmsg("device %u was stopped by someone else, or its queue failed", s.dev_id);
		} else {
			continue;
		}
		break;
	}
	atomic_store(&s.stopping, true);
	wake_queue(&s);
	ret = control_command(&c, UBLK_U_CMD_STOP_DEV, s.dev_id, NULL, 0, 0);
	if (ret < 0 && ret != -ENODEV)
		logmsg("STOP_DEV of device %u: %s", s.dev_id, strerror(-ret));
	release_queue(&s, thread, thread_started);
	ret = control_command(&c, UBLK_U_CMD_DEL_DEV, s.dev_id, NULL, 0, 0);
	if (ret < 0 && ret != -ENODEV) {
		logmsg("DEL_DEV of device %u: %s", s.dev_id, strerror(-ret));
		status = 1;
	}
	if (s.exit_status)
		status = s.exit_status;
	control_close(&c);
	return status;

out_delete:
	atomic_store(&s.quit, true);
	if (thread_started)
		wake_queue(&s);
	release_queue(&s, thread, thread_started);
	if (added) {
		ret = control_command(&c, UBLK_U_CMD_DEL_DEV, s.dev_id, NULL, 0, 0);
		if (ret < 0)
			logmsg("DEL_DEV of device %u: %s", s.dev_id, strerror(-ret));
	}
out_control:
	control_close(&c);
	return 1;
}

/* ---- delete / info / check ---- */

/*
 * For the commands on one device: the control device open and GET_DEV_INFO's result in *found.
 * False, with the exit status in *status, when the control device cannot be opened.
 */
static bool open_for_device(struct control *c, uint32_t dev_id, struct ublksrv_ctrl_dev_info *info, int *found, int *status)
{
	int ret = control_open(c);

	if (ret < 0) {
		*status = exit_status_of_open(ret);
		return false;
	}
	*found = get_info(c, dev_id, info);
	return true;
}

static int delete_device(uint32_t dev_id)
{
	struct control c;
	struct ublksrv_ctrl_dev_info info;
	int found, status = 0, ret;

	if (!open_for_device(&c, dev_id, &info, &found, &status))
		return status;
	if (found == -ENODEV) {
		logmsg("device %u: absent", dev_id);
		control_close(&c);
		return 0;
	}
	/* STOP_DEV first: it removes the disk and aborts a live server's queue, which then lets go. */
	ret = control_command(&c, UBLK_U_CMD_STOP_DEV, dev_id, NULL, 0, 0);
	if (ret < 0 && ret != -ENODEV)
		logmsg("STOP_DEV of device %u: %s", dev_id, strerror(-ret));
	ret = control_command(&c, UBLK_U_CMD_DEL_DEV, dev_id, NULL, 0, 0);
	control_close(&c);
	if (ret < 0 && ret != -ENODEV) {
		logmsg("DEL_DEV of device %u: %s", dev_id, strerror(-ret));
		return 1;
	}
	return 0;
}

static int show_info(uint32_t dev_id)
{
	struct control c;
	struct ublksrv_ctrl_dev_info info;
	int found, status = 0;

	if (!open_for_device(&c, dev_id, &info, &found, &status))
		return status;
	control_close(&c);
	if (found < 0) {
		logmsg("device %u: %s", dev_id, strerror(-found));
		return 1;
	}
	printf("id=%u state=%s pid=%d queues=%u depth=%u max_io=%u flags=0x%" PRIx64 "\n", info.dev_id, state_name(info.state),
	       info.ublksrv_pid, info.nr_hw_queues, info.queue_depth, info.max_io_buf_bytes, (uint64_t)info.flags);
	return 0;
}

static int check(void)
{
	struct control c;
	int ret = control_open(&c);

	if (ret < 0)
		return exit_status_of_open(ret);
	control_close(&c);
	printf("ublk available\n");
	return 0;
}

/* ---- command line ---- */

static void usage(void)
{
	fprintf(stderr,
		"usage: strata-ublk serve BACKING [--limits FILE | --read-iops N --write-iops N --read-bps N --write-bps N]\n"
		"                         [--buffered] [--id N] [--queue-depth N] [--max-io-bytes N]\n"
		"       strata-ublk recover ID BACKING [--limits FILE | ...]\n"
		"       strata-ublk delete ID\n"
		"       strata-ublk info ID\n"
		"       strata-ublk check\n"
		"Limits are integers, 0 = unlimited. With --limits, SIGHUP re-reads FILE.\n"
		"Exit status 69: the kernel has no ublk.\n");
}

static bool parse_uint(const char *text, uint64_t max, uint64_t *out)
{
	return parse_u64(text, out) && *out <= max;
}

static int parse_options(int argc, char **argv, int first, struct options *o)
{
	for (int i = first; i < argc; i++) {
		const char *arg = argv[i];
		const char *value = i + 1 < argc ? argv[i + 1] : NULL;
		uint64_t v;

		if (strcmp(arg, "--buffered") == 0) {
			o->buffered = true;
			continue;
		}
		if (strncmp(arg, "--", 2) != 0) {
			if (o->backing) {
				logmsg("unexpected argument: %s", arg);
				return -1;
			}
			o->backing = arg;
			continue;
		}
		if (!value) {
			logmsg("%s needs a value", arg);
			return -1;
		}
		i++;
		if (strcmp(arg, "--limits") == 0) {
			o->limits_file = value;
		} else if (strcmp(arg, "--id") == 0 && parse_uint(value, INT32_MAX, &v)) {
			o->dev_id = (int64_t)v;
		} else if (strcmp(arg, "--queue-depth") == 0 && parse_uint(value, UBLK_MAX_QUEUE_DEPTH, &v) && v > 0) {
			o->depth = (unsigned)v;
		} else if (strcmp(arg, "--max-io-bytes") == 0 && parse_uint(value, 1u << 25, &v) && v >= 4096 && v % 4096 == 0) {
			o->max_io = (unsigned)v;
		} else if (set_limit(&o->limits, arg + 2, value)) {
			o->limits_given = true;
		} else {
			logmsg("bad option or value: %s %s", arg, value);
			return -1;
		}
	}
	if (!o->backing) {
		logmsg("no backing file or device");
		return -1;
	}
	if (o->limits_file && o->limits_given) {
		logmsg("--limits and a limit option: give one or the other");
		return -1;
	}
	return 0;
}

static bool parse_id(const char *text, uint32_t *id)
{
	uint64_t v;

	if (!parse_uint(text, INT32_MAX, &v))
		return false;
	*id = (uint32_t)v;
	return true;
}

int main(int argc, char **argv)
{
	struct options o = { .dev_id = -1, .depth = DEFAULT_QUEUE_DEPTH, .max_io = DEFAULT_MAX_IO_BYTES };
	uint32_t id;

	if (argc < 2) {
		usage();
		return EXIT_USAGE;
	}
	if (strcmp(argv[1], "serve") == 0) {
		if (parse_options(argc, argv, 2, &o) < 0)
			return EXIT_USAGE;
		return serve(&o, false);
	}
	if (strcmp(argv[1], "recover") == 0) {
		if (argc < 4 || !parse_id(argv[2], &id) || parse_options(argc, argv, 3, &o) < 0) {
			usage();
			return EXIT_USAGE;
		}
		o.dev_id = id;
		return serve(&o, true);
	}
	if (argc == 3 && strcmp(argv[1], "delete") == 0 && parse_id(argv[2], &id))
		return delete_device(id);
	if (argc == 3 && strcmp(argv[1], "info") == 0 && parse_id(argv[2], &id))
		return show_info(id);
	if (argc == 2 && strcmp(argv[1], "check") == 0)
		return check();
	usage();
	return EXIT_USAGE;
}
