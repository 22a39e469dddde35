// strata_native: the few system calls Node cannot make on its own.
//
// Today: sd_notify(3). systemd's notification socket ($NOTIFY_SOCKET) is an AF_UNIX
// SOCK_DGRAM socket, and Node's dgram module only speaks UDP (udp4/udp6): it has no unix
// datagram sockets, and net.Socket is stream-only. So readiness, status, stopping and
// watchdog pings are sent from here, from the daemon's own PID (which NotifyAccess=main
// requires; a systemd-notify child would need NotifyAccess=all).
//
// The data path's btrfs pool: FS_IOC_SETFLAGS (FS_NOCOW_FL on an empty volume file) and FICLONE
// (reflink snapshots, clones and rollbacks). Node can set no inode flags, and its
// copyFile(COPYFILE_FICLONE_FORCE) creates the destination itself, which then cannot be made
// NOCOW first (btrfs refuses to reflink a NOCOW file into a COW one). Without these, every new
// volume and snapshot cost a chattr or cp process.
//
// Device-mapper (the replicated volumes' host-path device): DM_TABLE_STATUS, DM_TABLE_LOAD and
// DM_DEV_SUSPEND on /dev/mapper/control, what `dmsetup table|load|resume` end with. A failover
// reloads tables on both primaries on the hosts' critical path, and each dmsetup process cost
// 0.1-1 s in the emulated lab; an ioctl costs what the kernel's work costs.
//
// Loop devices (the replicated volume's local leg, and the fence): LOOP_CTL_GET_FREE and
// LOOP_CONFIGURE, what `losetup --find --show` ends with, for the same reason: a promotion attaches
// the new primary's local leg on the hosts' critical path.
//
// Plain C against Node-API (node_api.h), no npm dependency; ABI-stable across Node versions.

#include <errno.h>
#include <fcntl.h>
#include <linux/dm-ioctl.h>
#include <linux/fs.h>
#include <linux/loop.h>
#include <sys/ioctl.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <node_api.h>

// Bounds how long a send may block the event loop when the receiver's queue is full
// (systemd's own sd_notify blocks without limit).
#define NOTIFY_SEND_TIMEOUT_SEC 2

#define NAPI_CALL(env, call)                                                        \
  do {                                                                              \
    if ((call) != napi_ok) {                                                        \
      const napi_extended_error_info *info_ = NULL;                                 \
      napi_get_last_error_info((env), &info_);                                      \
      bool pending_ = false;                                                        \
      napi_is_exception_pending((env), &pending_);                                  \
      if (!pending_)                                                                \
        napi_throw_error((env), NULL,                                               \
                         info_ && info_->error_message ? info_->error_message       \
                                                       : "Node-API call failed");   \
      return NULL;                                                                  \
    }                                                                               \
  } while (0)

static const char *errno_name(int err) {
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 32))
  const char *name = strerrorname_np(err);
  if (name) return name;
#endif
  (void)err;
  return NULL;
}

// `new Error("<what>: <strerror>")` with .code = "E..." and .errno = <n>, like Node's own
// system errors; NULL if it could not be built.
static napi_value errno_error(napi_env env, int err, const char *what) {
  char message[512];
  snprintf(message, sizeof message, "%s: %s", what, strerror(err));
  const char *name = errno_name(err);
  napi_value msg_value, code_value = NULL, error, errno_value;
  if (napi_create_string_utf8(env, message, NAPI_AUTO_LENGTH, &msg_value) != napi_ok) return NULL;
  if (name && napi_create_string_utf8(env, name, NAPI_AUTO_LENGTH, &code_value) != napi_ok) return NULL;
  if (napi_create_error(env, code_value, msg_value, &error) != napi_ok) return NULL;
  if (napi_create_int32(env, err, &errno_value) == napi_ok)
    napi_set_named_property(env, error, "errno", errno_value);
  return error;
}

// Throws errno_error(...).
static napi_value throw_errno(napi_env env, int err, const char *what) {
  napi_value error = errno_error(env, err, what);
  if (error) {
    napi_throw(env, error);
  } else {
    char message[512];
    snprintf(message, sizeof message, "%s: %s", what, strerror(err));
    napi_throw_error(env, errno_name(err), message);
  }
  return NULL;
}

// Reads the call's arguments into argv (at most `capacity`); throws ERR_MISSING_ARGS with `usage`
// and returns false when fewer than `wanted` were given.
static bool get_args(napi_env env, napi_callback_info info, size_t wanted, size_t capacity, napi_value *argv, const char *usage) {
  size_t argc = capacity;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok) {
    napi_throw_error(env, NULL, usage);
    return false;
  }
  if (argc < wanted) {
    napi_throw_type_error(env, "ERR_MISSING_ARGS", usage);
    return false;
  }
  return true;
}

// Reads a JS string argument into a malloc'd, NUL-terminated buffer. *out_len excludes the NUL.
static char *get_string(napi_env env, napi_value value, const char *what, size_t *out_len) {
  napi_valuetype type;
  if (napi_typeof(env, value, &type) != napi_ok || type != napi_string) {
    char message[128];
    snprintf(message, sizeof message, "%s must be a string", what);
    napi_throw_type_error(env, "ERR_INVALID_ARG_TYPE", message);
    return NULL;
  }
  size_t len = 0;
  if (napi_get_value_string_utf8(env, value, NULL, 0, &len) != napi_ok) return NULL;
  char *buf = malloc(len + 1);
  if (!buf) {
    throw_errno(env, ENOMEM, what);
    return NULL;
  }
  if (napi_get_value_string_utf8(env, value, buf, len + 1, &len) != napi_ok) {
    free(buf);
    return NULL;
  }
  *out_len = len;
  return buf;
}

// Fills `addr` from a $NOTIFY_SOCKET value: "/path" (filesystem) or "@name" (abstract: the
// '@' becomes a leading NUL byte). Returns the address length, or -errno.
static int notify_address(const char *socket_path, struct sockaddr_un *addr, socklen_t *addr_len) {
  size_t len = strlen(socket_path);
  memset(addr, 0, sizeof *addr);
  addr->sun_family = AF_UNIX;
  if (socket_path[0] == '/') {
    if (len >= sizeof addr->sun_path) return -ENAMETOOLONG;  // keep room for the NUL
    memcpy(addr->sun_path, socket_path, len + 1);
    *addr_len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len + 1);
    return 0;
  }
  if (socket_path[0] == '@') {
    if (len > sizeof addr->sun_path) return -ENAMETOOLONG;
    addr->sun_path[0] = '\0';
    memcpy(addr->sun_path + 1, socket_path + 1, len - 1);
    // Abstract names are length-delimited: no trailing NUL is part of the name.
    *addr_len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len);
    return 0;
  }
  // systemd also knows "vsock:CID:PORT" (VMs); Strata runs on bare metal and does not.
  return -EAFNOSUPPORT;
}

// notify(state: string, socketPath?: string): boolean
//   socketPath defaults to getenv("NOTIFY_SOCKET"). Returns false when there is no socket,
//   true once the datagram was sent; throws an Error carrying errno otherwise.
static napi_value notify(napi_env env, napi_callback_info info) {
  size_t argc = 2;
  napi_value argv[2];
  NAPI_CALL(env, napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  if (argc < 1) {
    napi_throw_type_error(env, "ERR_MISSING_ARGS", "notify(state) needs a state string");
    return NULL;
  }

  size_t state_len = 0, path_len = 0;
  char *state = get_string(env, argv[0], "state", &state_len);
  if (!state) return NULL;

  char *path_buf = NULL;
  const char *socket_path = NULL;
  if (argc >= 2) {
    napi_valuetype type;
    if (napi_typeof(env, argv[1], &type) != napi_ok) { free(state); return NULL; }
    if (type != napi_undefined && type != napi_null) {
      path_buf = get_string(env, argv[1], "socketPath", &path_len);
      if (!path_buf) { free(state); return NULL; }
      socket_path = path_buf;
    }
  }
  if (!socket_path) socket_path = getenv("NOTIFY_SOCKET");

  napi_value result = NULL;
  if (!socket_path || socket_path[0] == '\0') {
    napi_get_boolean(env, false, &result);  // on failure result stays NULL: undefined
    goto out;
  }
  if (state_len == 0) {
    throw_errno(env, EINVAL, "sd_notify: empty state");
    goto out;
  }

  struct sockaddr_un addr;
  socklen_t addr_len = 0;
  int r = notify_address(socket_path, &addr, &addr_len);
  if (r < 0) {
    char what[256];
    snprintf(what, sizeof what, "sd_notify: NOTIFY_SOCKET=%.200s", socket_path);
    throw_errno(env, -r, what);
    goto out;
  }

  int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    throw_errno(env, errno, "sd_notify: socket(AF_UNIX, SOCK_DGRAM)");
    goto out;
  }
  struct timeval timeout = {.tv_sec = NOTIFY_SEND_TIMEOUT_SEC, .tv_usec = 0};
  (void)setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof timeout);

  ssize_t sent;
  do {
    // MSG_NOSIGNAL: never raise SIGPIPE in the daemon.
    sent = sendto(fd, state, state_len, MSG_NOSIGNAL, (const struct sockaddr *)&addr, addr_len);
  } while (sent < 0 && errno == EINTR);
  int send_errno = errno;
  close(fd);

  if (sent < 0) {
    char what[256];
    snprintf(what, sizeof what, "sd_notify: sendto(%.200s)", socket_path);
    throw_errno(env, send_errno, what);
    goto out;
  }
  if ((size_t)sent != state_len) {
    throw_errno(env, EMSGSIZE, "sd_notify: short datagram");
    goto out;
  }
  napi_get_boolean(env, true, &result);

out:
  free(state);
  free(path_buf);
  return result;
}

// setNoCow(path: string): void
//   Sets FS_NOCOW_FL on a file (btrfs: no copy-on-write, no checksums, no compression for its
//   data; it only takes effect while the file is empty). Synchronous: two ioctls on an inode.
static napi_value set_no_cow(napi_env env, napi_callback_info info) {
  napi_value argv[1];
  if (!get_args(env, info, 1, 1, argv, "setNoCow(path) needs a path")) return NULL;
  size_t len = 0;
  char *path = get_string(env, argv[0], "path", &len);
  if (!path) return NULL;
  char what[300];
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) {
    int err = errno;
    snprintf(what, sizeof what, "open(%.200s)", path);
    free(path);
    return throw_errno(env, err, what);
  }
  // The kernel reads and writes an int here, whatever the ioctl's declared type says.
  int flags = 0;
  int err = 0;
  if (ioctl(fd, FS_IOC_GETFLAGS, &flags) < 0) {
    err = errno;
    snprintf(what, sizeof what, "FS_IOC_GETFLAGS(%.200s)", path);
  } else if (!(flags & FS_NOCOW_FL)) {
    flags |= FS_NOCOW_FL;
    if (ioctl(fd, FS_IOC_SETFLAGS, &flags) < 0) {
      err = errno;
      snprintf(what, sizeof what, "FS_IOC_SETFLAGS(%.200s, NOCOW)", path);
    }
  }
  close(fd);
  free(path);
  if (err) return throw_errno(env, err, what);
  return NULL;
}

// Queues `job` on the libuv thread pool and returns the promise its completion settles. Every job
// struct starts with its napi_async_work and napi_deferred (`async_job`). On failure the job is
// freed with `free_job`, an error is thrown and NULL returned.
typedef struct {
  napi_async_work work;
  napi_deferred deferred;
} async_job;

static napi_value queue_job(napi_env env, const char *resource, napi_async_execute_callback execute,
                            napi_async_complete_callback complete, async_job *job, void (*free_job)(void *)) {
  napi_value promise = NULL, name;
  if (napi_create_promise(env, &job->deferred, &promise) != napi_ok ||
      napi_create_string_utf8(env, resource, NAPI_AUTO_LENGTH, &name) != napi_ok ||
      napi_create_async_work(env, NULL, name, execute, complete, job, &job->work) != napi_ok) {
    free_job(job);
    napi_throw_error(env, NULL, "could not start the work on the thread pool");
    return NULL;
  }
  if (napi_queue_async_work(env, job->work) != napi_ok) {
    napi_delete_async_work(env, job->work);
    free_job(job);
    napi_throw_error(env, NULL, "could not queue the work on the thread pool");
    return NULL;
  }
  return promise;
}

// Settles the job's promise (rejected with errno_error(err, what) when err is set, resolved with
// `value`, or undefined, otherwise), then frees it with `free_job`.
static void settle_job(napi_env env, async_job *job, int err, const char *what, napi_value value, void (*free_job)(void *)) {
  if (err) {
    napi_value error = errno_error(env, err, what);
    if (!error) napi_create_string_utf8(env, what, NAPI_AUTO_LENGTH, &error);
    napi_reject_deferred(env, job->deferred, error);
  } else {
    if (!value) napi_get_undefined(env, &value);
    napi_resolve_deferred(env, job->deferred, value);
  }
  napi_delete_async_work(env, job->work);
  free_job(job);
}

// cloneFile(source: string, destination: string): Promise<void>
//   Makes the existing file `destination` share all of `source`'s extents (FICLONE). It is
//   truncated first, so it ends up with exactly the source's data and size, in the same inode
//   (nvmet may hold it open). Runs on the libuv thread pool: a reflink of a file with many
//   extents can take long enough to stall the event loop.
typedef struct {
  napi_async_work work;
  napi_deferred deferred;
  char *source;
  char *destination;
  int err;
  char what[600];
} clone_job;

static void clone_job_free(clone_job *job) {
  free(job->source);
  free(job->destination);
  free(job);
}

static void clone_job_free_any(void *job) { clone_job_free(job); }

static void clone_execute(napi_env env, void *data) {
  (void)env;
  clone_job *job = data;
  int src = open(job->source, O_RDONLY | O_CLOEXEC);
  if (src < 0) {
    job->err = errno;
    snprintf(job->what, sizeof job->what, "open(%.250s)", job->source);
    return;
  }
  int dst = open(job->destination, O_WRONLY | O_TRUNC | O_CLOEXEC | O_NOFOLLOW);
  if (dst < 0) {
    job->err = errno;
    snprintf(job->what, sizeof job->what, "open(%.250s)", job->destination);
    close(src);
    return;
  }
  int r;
  do {
    r = ioctl(dst, FICLONE, src);
  } while (r < 0 && errno == EINTR);
  if (r < 0) {
    job->err = errno;
    snprintf(job->what, sizeof job->what, "FICLONE(%.250s -> %.250s)", job->source, job->destination);
  }
  close(dst);
  close(src);
}

static void clone_complete(napi_env env, napi_status status, void *data) {
  clone_job *job = data;
  if (status != napi_ok && !job->err) {
    job->err = ECANCELED;
    snprintf(job->what, sizeof job->what, "FICLONE(%.250s -> %.250s)", job->source, job->destination);
  }
  settle_job(env, (async_job *)job, job->err, job->what, NULL, clone_job_free_any);
}

static napi_value clone_file(napi_env env, napi_callback_info info) {
  napi_value argv[2];
  if (!get_args(env, info, 2, 2, argv, "cloneFile(source, destination) needs two paths")) return NULL;
  clone_job *job = calloc(1, sizeof *job);
  if (!job) return throw_errno(env, ENOMEM, "cloneFile");
  size_t len = 0;
  job->source = get_string(env, argv[0], "source", &len);
  if (!job->source) {
    clone_job_free(job);
    return NULL;
  }
  job->destination = get_string(env, argv[1], "destination", &len);
  if (!job->destination) {
    clone_job_free(job);
    return NULL;
  }
  return queue_job(env, "strata:cloneFile", clone_execute, clone_complete, (async_job *)job, clone_job_free_any);
}

// ---- device-mapper ----------------------------------------------------------------------------
// dmTable(name: string): Promise<string>
//   The live table of the device, one "start length type params" line per target as
//   `dmsetup table` prints it; "" when no device has that name (ENXIO).
// dmReload(name: string, table: string): Promise<void>
//   Loads `table` (lines as above) as the device's inactive table, then resumes the device, which
//   suspends it first (waiting for the I/O in flight: a flush suspend) and swaps the new table in.
//   Both run on the libuv thread pool: the suspend waits for in-flight I/O.
enum dm_op { DM_OP_TABLE, DM_OP_RELOAD };

typedef struct {
  napi_async_work work;
  napi_deferred deferred;
  enum dm_op op;
  char *name;
  char *table;
  char *result;
  int err;
  char what[300];
} dm_job;

static void dm_job_free(dm_job *job) {
  free(job->name);
  free(job->table);
  free(job->result);
  free(job);
}

// A zeroed buffer of `size` bytes starting with a dm_ioctl header for device `name`.
static void dm_job_free_any(void *job) { dm_job_free(job); }

static struct dm_ioctl *dm_header(size_t size, const char *name) {
  struct dm_ioctl *io = calloc(1, size);
  if (!io) return NULL;
  io->version[0] = 4;  // only the major must match; minor 0: what these commands have had since 4.0
  io->data_size = (uint32_t)size;
  io->data_start = sizeof *io;
  snprintf(io->name, sizeof io->name, "%s", name);
  return io;
}

static int dm_ioctl_call(int fd, unsigned long request, struct dm_ioctl *io) {
  int r;
  do {
    r = ioctl(fd, request, io);
  } while (r < 0 && errno == EINTR);
  return r < 0 ? errno : 0;
}

// Formats the targets DM_TABLE_STATUS returned into job->result.
static int dm_format_table(dm_job *job, struct dm_ioctl *io) {
  size_t cap = 256, used = 0;
  char *out = malloc(cap);
  if (!out) return ENOMEM;
  out[0] = '\0';
  size_t offset = io->data_start;
  for (uint32_t i = 0; i < io->target_count; i++) {
    if (offset + sizeof(struct dm_target_spec) > io->data_size) break;
    struct dm_target_spec *spec = (struct dm_target_spec *)((char *)io + offset);
    const char *params = (const char *)(spec + 1);
    char type[DM_MAX_TYPE_NAME + 1];
    memcpy(type, spec->target_type, DM_MAX_TYPE_NAME);
    type[DM_MAX_TYPE_NAME] = '\0';
    size_t need = used + strlen(params) + strlen(type) + 64;
    if (need > cap) {
      while (cap < need) cap *= 2;
      char *grown = realloc(out, cap);
      if (!grown) {
        free(out);
        return ENOMEM;
      }
      out = grown;
    }
    used += (size_t)snprintf(out + used, cap - used, "%llu %llu %s %s\n", (unsigned long long)spec->sector_start,
                             (unsigned long long)spec->length, type, params);
    if (spec->next == 0) break;
    // The kernel's `next` on status is the offset from the start of the data area.
    offset = io->data_start + spec->next;
  }
  job->result = out;
  return 0;
}

static void dm_read_table(dm_job *job, int fd) {
  for (size_t size = 16 * 1024; size <= 16 * 1024 * 1024; size *= 4) {
    struct dm_ioctl *io = dm_header(size, job->name);
    if (!io) {
      job->err = ENOMEM;
      return;
    }
    io->flags = DM_STATUS_TABLE_FLAG;
    int err = dm_ioctl_call(fd, DM_TABLE_STATUS, io);
    if (err == ENXIO) {
      free(io);
      job->result = strdup("");
      if (!job->result) job->err = ENOMEM;
      return;
    }
    if (err) {
      free(io);
      job->err = err;
      snprintf(job->what, sizeof job->what, "DM_TABLE_STATUS(%.128s)", job->name);
      return;
    }
    if (io->flags & DM_BUFFER_FULL_FLAG) {
      free(io);
      continue;
    }
    job->err = dm_format_table(job, io);
    free(io);
    return;
  }
  job->err = E2BIG;
  snprintf(job->what, sizeof job->what, "DM_TABLE_STATUS(%.128s)", job->name);
}

static void dm_reload(dm_job *job, int fd) {
  // Room for every target: its spec, its parameters and their alignment.
  size_t size = sizeof(struct dm_ioctl) + strlen(job->table) + 8;
  for (const char *c = job->table; *c; c++)
    if (*c == '\n') size += sizeof(struct dm_target_spec) + 8;
  size += sizeof(struct dm_target_spec) + 8;
  struct dm_ioctl *io = dm_header(size, job->name);
  if (!io) {
    job->err = ENOMEM;
    return;
  }
  char *data = (char *)io + io->data_start;
  size_t used = 0;
  uint32_t count = 0;
  struct dm_target_spec *previous = NULL;
  for (char *line = job->table; line && *line;) {
    char *end = strchr(line, '\n');
    if (end) *end = '\0';
    unsigned long long start = 0, length = 0;
    char type[DM_MAX_TYPE_NAME];
    int consumed = 0;
    if (sscanf(line, "%llu %llu %15s %n", &start, &length, type, &consumed) >= 3) {
      struct dm_target_spec *spec = (struct dm_target_spec *)(data + used);
      spec->sector_start = start;
      spec->length = length;
      snprintf(spec->target_type, sizeof spec->target_type, "%s", type);
      char *params = (char *)(spec + 1);
      strcpy(params, line + consumed);
      size_t next = sizeof *spec + strlen(params) + 1;
      next = (next + 7) & ~(size_t)7;
      // On load, `next` is the offset from this spec to the next one.
      if (previous) previous->next = (uint32_t)((char *)spec - (char *)previous);
      previous = spec;
      used += next;
      count++;
    }
    line = end ? end + 1 : NULL;
  }
  if (count == 0) {
    free(io);
    job->err = EINVAL;
    snprintf(job->what, sizeof job->what, "dmReload(%.128s): no target in the table", job->name);
    return;
  }
  io->target_count = count;
  int err = dm_ioctl_call(fd, DM_TABLE_LOAD, io);
  if (err) {
    free(io);
    job->err = err;
    snprintf(job->what, sizeof job->what, "DM_TABLE_LOAD(%.128s)", job->name);
    return;
  }
  free(io);
  // Resume (DM_DEV_SUSPEND without DM_SUSPEND_FLAG): suspends with a flush, swaps in the table
  // just loaded, resumes.
  io = dm_header(sizeof(struct dm_ioctl), job->name);
  if (!io) {
    job->err = ENOMEM;
    return;
  }
  err = dm_ioctl_call(fd, DM_DEV_SUSPEND, io);
  free(io);
  if (err) {
    job->err = err;
    snprintf(job->what, sizeof job->what, "DM_DEV_SUSPEND(%.128s, resume)", job->name);
  }
}

static void dm_execute(napi_env env, void *data) {
  (void)env;
  dm_job *job = data;
  int fd = open("/dev/mapper/control", O_RDWR | O_CLOEXEC);
  if (fd < 0) {
    job->err = errno;
    snprintf(job->what, sizeof job->what, "open(/dev/mapper/control)");
    return;
  }
  if (job->op == DM_OP_TABLE) dm_read_table(job, fd);
  else dm_reload(job, fd);
  close(fd);
}

static void dm_complete(napi_env env, napi_status status, void *data) {
  dm_job *job = data;
  if (status != napi_ok && !job->err) {
    job->err = ECANCELED;
    snprintf(job->what, sizeof job->what, "device-mapper(%.128s)", job->name);
  }
  napi_value value = NULL;
  if (!job->err && job->op == DM_OP_TABLE) napi_create_string_utf8(env, job->result ? job->result : "", NAPI_AUTO_LENGTH, &value);
  settle_job(env, (async_job *)job, job->err, job->what[0] ? job->what : "device-mapper", value, dm_job_free_any);
}

static napi_value dm_start(napi_env env, napi_callback_info info, enum dm_op op) {
  napi_value argv[2];
  if (!get_args(env, info, op == DM_OP_TABLE ? 1 : 2, 2, argv, op == DM_OP_TABLE ? "dmTable(name) needs a name" : "dmReload(name, table) needs a name and a table")) return NULL;
  dm_job *job = calloc(1, sizeof *job);
  if (!job) return throw_errno(env, ENOMEM, "device-mapper");
  job->op = op;
  size_t len = 0;
  job->name = get_string(env, argv[0], "name", &len);
  if (!job->name) {
    dm_job_free(job);
    return NULL;
  }
  if (len == 0 || len >= DM_NAME_LEN) {
    dm_job_free(job);
    napi_throw_range_error(env, "ERR_OUT_OF_RANGE", "device-mapper names are 1-127 bytes");
    return NULL;
  }
  if (op == DM_OP_RELOAD) {
    job->table = get_string(env, argv[1], "table", &len);
    if (!job->table) {
      dm_job_free(job);
      return NULL;
    }
  }
  return queue_job(env, "strata:dm", dm_execute, dm_complete, (async_job *)job, dm_job_free_any);
}

static napi_value dm_table(napi_env env, napi_callback_info info) { return dm_start(env, info, DM_OP_TABLE); }
static napi_value dm_reload_fn(napi_env env, napi_callback_info info) { return dm_start(env, info, DM_OP_RELOAD); }

// ---- loop devices -----------------------------------------------------------------------------
// loopAttach(file: string, readOnly: boolean, sectorSize: number, directIo: boolean): Promise<string>
//   Attaches the file to a free loop device in one LOOP_CONFIGURE (block size and direct I/O set
//   before the device exists for anyone) and resolves with its name ("loop3"). A device another
//   process takes between LOOP_CTL_GET_FREE and LOOP_CONFIGURE (EBUSY) is skipped for the next.
typedef struct {
  napi_async_work work;
  napi_deferred deferred;
  char *file;
  bool read_only;
  bool direct_io;
  uint32_t sector_size;
  char result[32];
  int err;
  char what[300];
} loop_job;

static void loop_job_free_any(void *data) {
  loop_job *job = data;
  free(job->file);
  free(job);
}

static void loop_execute(napi_env env, void *data) {
  (void)env;
  loop_job *job = data;
  int file = open(job->file, (job->read_only ? O_RDONLY : O_RDWR) | O_CLOEXEC);
  if (file < 0) {
    job->err = errno;
    snprintf(job->what, sizeof job->what, "open(%.250s)", job->file);
    return;
  }
  int control = open("/dev/loop-control", O_RDWR | O_CLOEXEC);
  if (control < 0) {
    job->err = errno;
    snprintf(job->what, sizeof job->what, "open(/dev/loop-control)");
    close(file);
    return;
  }
  struct loop_config config;
  memset(&config, 0, sizeof config);
  config.fd = (uint32_t)file;
  config.block_size = job->sector_size;
  config.info.lo_flags = (job->read_only ? LO_FLAGS_READ_ONLY : 0) | (job->direct_io ? LO_FLAGS_DIRECT_IO : 0);
  snprintf((char *)config.info.lo_file_name, LO_NAME_SIZE, "%s", job->file);
  job->err = EBUSY;
  for (int attempt = 0; attempt < 16 && job->err == EBUSY; attempt++) {
    int number = ioctl(control, LOOP_CTL_GET_FREE);
    if (number < 0) {
      job->err = errno;
      snprintf(job->what, sizeof job->what, "LOOP_CTL_GET_FREE");
      break;
    }
    char path[32];
    snprintf(path, sizeof path, "/dev/loop%d", number);
    int loop = open(path, (job->read_only ? O_RDONLY : O_RDWR) | O_CLOEXEC);
    if (loop < 0) {
      job->err = errno;
      snprintf(job->what, sizeof job->what, "open(%s)", path);
      break;
    }
    int r;
    do {
      r = ioctl(loop, LOOP_CONFIGURE, &config);
    } while (r < 0 && errno == EINTR);
    job->err = r < 0 ? errno : 0;
    close(loop);
    if (job->err == 0) snprintf(job->result, sizeof job->result, "loop%d", number);
    else snprintf(job->what, sizeof job->what, "LOOP_CONFIGURE(%s, %.200s)", path, job->file);
  }
  close(control);
  close(file);
}

static void loop_complete(napi_env env, napi_status status, void *data) {
  loop_job *job = data;
  if (status != napi_ok && !job->err) {
    job->err = ECANCELED;
    snprintf(job->what, sizeof job->what, "loopAttach(%.250s)", job->file);
  }
  napi_value value = NULL;
  if (!job->err) napi_create_string_utf8(env, job->result, NAPI_AUTO_LENGTH, &value);
  settle_job(env, (async_job *)job, job->err, job->what, value, loop_job_free_any);
}

static napi_value loop_attach(napi_env env, napi_callback_info info) {
  napi_value argv[4];
  if (!get_args(env, info, 4, 4, argv, "loopAttach(file, readOnly, sectorSize, directIo) needs four arguments")) return NULL;
  loop_job *job = calloc(1, sizeof *job);
  if (!job) return throw_errno(env, ENOMEM, "loopAttach");
  size_t len = 0;
  job->file = get_string(env, argv[0], "file", &len);
  uint32_t sector_size = 0;
  if (!job->file || napi_get_value_bool(env, argv[1], &job->read_only) != napi_ok ||
      napi_get_value_uint32(env, argv[2], &sector_size) != napi_ok || napi_get_value_bool(env, argv[3], &job->direct_io) != napi_ok) {
    free(job->file);
    free(job);
    bool pending = false;
    napi_is_exception_pending(env, &pending);
    if (!pending) napi_throw_type_error(env, "ERR_INVALID_ARG_TYPE", "loopAttach(file: string, readOnly: boolean, sectorSize: number, directIo: boolean)");
    return NULL;
  }
  job->sector_size = sector_size;
  return queue_job(env, "strata:loopAttach", loop_execute, loop_complete, (async_job *)job, loop_job_free_any);
}

NAPI_MODULE_INIT() {
  static const struct {
    const char *name;
    napi_callback fn;
  } exported[] = {{"notify", notify}, {"setNoCow", set_no_cow}, {"cloneFile", clone_file}, {"dmTable", dm_table}, {"dmReload", dm_reload_fn}, {"loopAttach", loop_attach}};
  for (size_t i = 0; i < sizeof exported / sizeof exported[0]; i++) {
    napi_value fn;
    NAPI_CALL(env, napi_create_function(env, exported[i].name, NAPI_AUTO_LENGTH, exported[i].fn, NULL, &fn));
    NAPI_CALL(env, napi_set_named_property(env, exports, exported[i].name, fn));
  }
  return exports;
}
