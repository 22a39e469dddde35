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
// Plain C against Node-API (node_api.h), no npm dependency; ABI-stable across Node versions.

#include <errno.h>
#include <fcntl.h>
#include <linux/fs.h>
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
  size_t argc = 1;
  napi_value argv[1];
  NAPI_CALL(env, napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  if (argc < 1) {
    napi_throw_type_error(env, "ERR_MISSING_ARGS", "setNoCow(path) needs a path");
    return NULL;
  }
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
  if (job->err) {
    napi_value error = errno_error(env, job->err, job->what);
    if (!error) napi_create_string_utf8(env, job->what, NAPI_AUTO_LENGTH, &error);
    napi_reject_deferred(env, job->deferred, error);
  } else {
    napi_value undefined;
    napi_get_undefined(env, &undefined);
    napi_resolve_deferred(env, job->deferred, undefined);
  }
  napi_delete_async_work(env, job->work);
  clone_job_free(job);
}

static napi_value clone_file(napi_env env, napi_callback_info info) {
  size_t argc = 2;
  napi_value argv[2];
  NAPI_CALL(env, napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  if (argc < 2) {
    napi_throw_type_error(env, "ERR_MISSING_ARGS", "cloneFile(source, destination) needs two paths");
    return NULL;
  }
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
  napi_value promise = NULL, name;
  if (napi_create_promise(env, &job->deferred, &promise) != napi_ok ||
      napi_create_string_utf8(env, "strata:cloneFile", NAPI_AUTO_LENGTH, &name) != napi_ok ||
      napi_create_async_work(env, NULL, name, clone_execute, clone_complete, job, &job->work) != napi_ok) {
    clone_job_free(job);
    napi_throw_error(env, NULL, "cloneFile: could not start");
    return NULL;
  }
  if (napi_queue_async_work(env, job->work) != napi_ok) {
    napi_delete_async_work(env, job->work);
    clone_job_free(job);
    napi_throw_error(env, NULL, "cloneFile: could not queue");
    return NULL;
  }
  return promise;
}

NAPI_MODULE_INIT() {
  static const struct {
    const char *name;
    napi_callback fn;
  } exported[] = {{"notify", notify}, {"setNoCow", set_no_cow}, {"cloneFile", clone_file}};
  for (size_t i = 0; i < sizeof exported / sizeof exported[0]; i++) {
    napi_value fn;
    NAPI_CALL(env, napi_create_function(env, exported[i].name, NAPI_AUTO_LENGTH, exported[i].fn, NULL, &fn));
    NAPI_CALL(env, napi_set_named_property(env, exports, exported[i].name, fn));
  }
  return exports;
}
