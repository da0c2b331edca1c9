/* An LD_PRELOAD shim for power-cut tests (built by tests/support/fault_fs.rs with `gcc -shared -fPIC`).
 *
 * For every file under the directory QL_FAULT_DIR (except SQLite's `-shm`, which is not durable state) it
 * journals, into the file QL_FAULT_JOURNAL (outside that directory), each write and truncate just before it
 * happens: the offset, the new bytes, and the bytes it will overwrite or cut, so that a test can take any of them
 * back after the process is killed (a call that then does less is amended). Each fsync/fdatasync of such a file
 * adds a marker once it succeeded, naming the journal position at which it began: everything journaled for that
 * file before it is on the disk. The journal is written with plain write(2) calls, so it is in the kernel's hands
 * before the intercepted call goes on and survives a SIGKILL of the process (the test simulates the power cut,
 * not the kernel's).
 *
 * QL_FAULT_FAIL_SYNC=N fails the Nth sync (counting those QL_FAULT_FAIL_SYNC_CALL selects: `fsync`,
 * `fdatasync` or `any`) with EIO, without syncing, and journals a failure marker: what that file held unsynced
 * then is written back or lost at the kernel's whim, and a later sync does not write it (Linux marks the pages
 * clean after a failed write-back: "fsyncgate"). As Linux reports a write-back error once to each open file
 * description, every other descriptor open on that file then sees EIO at its next sync too (and the sync still
 * writes what was written since).
 *
 * SQLite (bundled in the binary, its syscall table holding pointers to open, pwrite64, ftruncate... resolved
 * through the dynamic linker) calls `fsync` (it is built without HAVE_FDATASYNC); Rust's File::sync_data, which
 * the hook's sync stage uses on its own descriptor of the log, calls `fdatasync`.
 *
 * Not modelled: directory entries (a created or removed file is taken as durable at once; SQLite syncs the
 * directory of a new log itself), torn writes inside one write(2) call, and dup(2)'ed descriptors.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

enum {
    REC_PATH = 1,
    REC_WRITE = 2,
    REC_TRUNCATE = 3,
    REC_SYNC_OK = 4,
    REC_SYNC_FAILED = 5,
    REC_UNLINK = 6,
    REC_AMEND = 7,
};
enum { MAX_FDS = 65536, MAX_PATHS = 512 };

static int (*real_open)(const char *, int, ...);
static int (*real_open64)(const char *, int, ...);
static int (*real_openat)(int, const char *, int, ...);
static int (*real_openat64)(int, const char *, int, ...);
static int (*real_close)(int);
static ssize_t (*real_write)(int, const void *, size_t);
static ssize_t (*real_pwrite)(int, const void *, size_t, off_t);
static ssize_t (*real_pwrite64)(int, const void *, size_t, off_t);
static int (*real_ftruncate)(int, off_t);
static int (*real_ftruncate64)(int, off_t);
static int (*real_fsync)(int);
static int (*real_fdatasync)(int);
static int (*real_unlink)(const char *);
static int (*real_unlinkat)(int, const char *, int);

static pthread_once_t once = PTHREAD_ONCE_INIT;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static char dir[PATH_MAX];
static size_t dir_len;
static int journal = -1;
/* Per descriptor: its path's index + 1 (0: not watched), and the write-back errors it has been told of. */
static int fd_path[MAX_FDS];
static uint64_t fd_errors_seen[MAX_FDS];
static char *paths[MAX_PATHS];
static uint64_t path_errors[MAX_PATHS];
static int path_count;
/* Writes and truncates journaled so far: the next one's number. */
static uint64_t changes;
static long syncs_counted;
static long fail_sync_at;
static int fail_call; /* 0 any, 1 fsync, 2 fdatasync */

static void init(void) {
    real_open = dlsym(RTLD_NEXT, "open");
    real_open64 = dlsym(RTLD_NEXT, "open64");
    real_openat = dlsym(RTLD_NEXT, "openat");
    real_openat64 = dlsym(RTLD_NEXT, "openat64");
    real_close = dlsym(RTLD_NEXT, "close");
    real_write = dlsym(RTLD_NEXT, "write");
    real_pwrite = dlsym(RTLD_NEXT, "pwrite");
    real_pwrite64 = dlsym(RTLD_NEXT, "pwrite64");
    real_ftruncate = dlsym(RTLD_NEXT, "ftruncate");
    real_ftruncate64 = dlsym(RTLD_NEXT, "ftruncate64");
    real_fsync = dlsym(RTLD_NEXT, "fsync");
    real_fdatasync = dlsym(RTLD_NEXT, "fdatasync");
    real_unlink = dlsym(RTLD_NEXT, "unlink");
    real_unlinkat = dlsym(RTLD_NEXT, "unlinkat");
    const char *d = getenv("QL_FAULT_DIR");
    const char *j = getenv("QL_FAULT_JOURNAL");
    if (d == NULL || j == NULL || strlen(d) + 2 > sizeof dir) return;
    strcpy(dir, d);
    dir_len = strlen(dir);
    while (dir_len > 1 && dir[dir_len - 1] == '/') dir[--dir_len] = '\0';
    journal = real_open(j, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    const char *n = getenv("QL_FAULT_FAIL_SYNC");
    fail_sync_at = n ? atol(n) : 0;
    const char *c = getenv("QL_FAULT_FAIL_SYNC_CALL");
    fail_call = (c && strcmp(c, "fsync") == 0) ? 1 : (c && strcmp(c, "fdatasync") == 0) ? 2 : 0;
}

static void ensure(void) { pthread_once(&once, init); }

/* A record out in one write(2): the journal's records never interleave. A journal that cannot be written makes
 * the test meaningless, so the process stops at once rather than run on unobserved. */
static void emit(const void *record, size_t length) {
    const char *p = record;
    while (length > 0) {
        ssize_t n = real_write(journal, p, length);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) abort();
        p += n;
        length -= (size_t)n;
    }
}

struct head {
    uint8_t kind;
    uint32_t path;
    uint64_t number;
} __attribute__((packed));

/* The absolute path of `name` opened relative to `dirfd`, in `out`; 0 when it cannot be told. */
static int absolute(int dirfd, const char *name, char *out) {
    if (name[0] == '/') {
        if (strlen(name) >= PATH_MAX) return 0;
        strcpy(out, name);
        return 1;
    }
    char base[PATH_MAX];
    if (dirfd == AT_FDCWD) {
        if (getcwd(base, sizeof base) == NULL) return 0;
    } else {
        char link[64];
        snprintf(link, sizeof link, "/proc/self/fd/%d", dirfd);
        ssize_t n = readlink(link, base, sizeof base - 1);
        if (n <= 0) return 0;
        base[n] = '\0';
    }
    return snprintf(out, PATH_MAX, "%s/%s", base, name) < PATH_MAX;
}

static int watched(const char *path) {
    if (journal < 0 || strncmp(path, dir, dir_len) != 0 || path[dir_len] != '/') return 0;
    size_t n = strlen(path);
    return !(n >= 4 && strcmp(path + n - 4, "-shm") == 0);
}

/* The index of `path` in the table, journaling it the first time. Called with the lock held. */
static int path_index(const char *path) {
    for (int i = 0; i < path_count; i++)
        if (strcmp(paths[i], path) == 0) return i;
    if (path_count == MAX_PATHS) abort();
    paths[path_count] = strdup(path);
    uint32_t length = (uint32_t)strlen(path);
    size_t size = sizeof(struct head) + 4 + length;
    char *record = malloc(size);
    struct head h = {REC_PATH, (uint32_t)path_count, 0};
    memcpy(record, &h, sizeof h);
    memcpy(record + sizeof h, &length, 4);
    memcpy(record + sizeof h + 4, path, length);
    emit(record, size);
    free(record);
    return path_count++;
}

static off_t size_of(int fd) {
    struct stat st;
    return fstat(fd, &st) == 0 ? st.st_size : -1;
}

/* Reads `length` bytes at `offset` of the watched file behind `fd` (opened write-only, it is read by name). */
static void read_back(int fd, char *into, size_t length, off_t offset) {
    size_t got = 0;
    int own = -1;
    while (got < length) {
        ssize_t n = pread(own >= 0 ? own : fd, into + got, length - got, offset + (off_t)got);
        if (n < 0 && errno == EBADF && own < 0) {
            own = real_open(paths[fd_path[fd] - 1], O_RDONLY | O_CLOEXEC);
            if (own < 0) abort();
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        got += (size_t)n;
    }
    if (own >= 0) real_close(own);
    memset(into + got, 0, length - got);
}

/* Journals a write of `data` at `offset` before it happens, with the bytes it will overwrite: a SIGKILL may land
 * during the write, and the test must be able to take back whatever part of it reached the file. (A SIGKILL
 * during the journal's own write leaves a record cut short, of a write that never began: the reader drops it.)
 * Answers the change's number, for `amend`. Called with the lock held. */
static uint64_t journal_write(int fd, const void *data, size_t length, off_t offset) {
    off_t old_size = size_of(fd);
    uint64_t off = (uint64_t)offset, before = (uint64_t)(old_size < 0 ? 0 : old_size);
    uint32_t new_length = (uint32_t)length;
    uint32_t old_length = before > off ? (uint32_t)((before - off) < new_length ? before - off : new_length) : 0;
    size_t size = sizeof(struct head) + 8 + 8 + 4 + 4 + new_length + old_length;
    char *record = malloc(size), *p = record;
    uint64_t number = changes++;
    struct head h = {REC_WRITE, (uint32_t)(fd_path[fd] - 1), number};
    memcpy(p, &h, sizeof h), p += sizeof h;
    memcpy(p, &off, 8), p += 8;
    memcpy(p, &before, 8), p += 8;
    memcpy(p, &new_length, 4), p += 4;
    memcpy(p, &old_length, 4), p += 4;
    memcpy(p, data, new_length), p += new_length;
    read_back(fd, p, old_length, offset);
    emit(record, size);
    free(record);
    return number;
}

/* A journaled change did less than it said: `done` bytes of a write (0 when it failed), or a truncate that
 * failed (0). Called with the lock held, right after the call. */
static void amend(int fd, uint64_t number, uint64_t done) {
    char record[sizeof(struct head) + 8];
    struct head h = {REC_AMEND, (uint32_t)(fd_path[fd] - 1), number};
    memcpy(record, &h, sizeof h);
    memcpy(record + sizeof h, &done, 8);
    emit(record, sizeof record);
}

static int tracked(int fd) { return fd >= 0 && fd < MAX_FDS && fd_path[fd] != 0; }

static void track(int fd, const char *path) {
    if (fd < 0 || fd >= MAX_FDS) return;
    pthread_mutex_lock(&lock);
    int i = path_index(path);
    fd_path[fd] = i + 1;
    fd_errors_seen[fd] = path_errors[i];
    pthread_mutex_unlock(&lock);
}

static int journaled_truncate(int fd, off_t length, int (*truncate_for_real)(int, off_t)) {
    pthread_mutex_lock(&lock);
    off_t old_size = size_of(fd);
    uint64_t before = (uint64_t)(old_size < 0 ? 0 : old_size), after = (uint64_t)length;
    uint32_t cut = before > after ? (uint32_t)(before - after) : 0;
    size_t size = sizeof(struct head) + 8 + 8 + 4 + cut;
    char *record = malloc(size), *p = record;
    uint64_t number = changes++;
    struct head h = {REC_TRUNCATE, (uint32_t)(fd_path[fd] - 1), number};
    memcpy(p, &h, sizeof h), p += sizeof h;
    memcpy(p, &before, 8), p += 8;
    memcpy(p, &after, 8), p += 8;
    memcpy(p, &cut, 4), p += 4;
    read_back(fd, p, cut, length);
    emit(record, size);
    free(record);
    int result = truncate_for_real(fd, length);
    int saved = errno;
    if (result != 0) amend(fd, number, 0);
    pthread_mutex_unlock(&lock);
    errno = saved;
    return result;
}

/* After a watched file was opened: tracked, and emptied through the journal if O_TRUNC was asked. */
static int opened(int fd, const char *path, int flags) {
    if (fd < 0) return fd;
    track(fd, path);
    if ((flags & O_TRUNC) && journaled_truncate(fd, 0, real_ftruncate) != 0) {
        int saved = errno;
        real_close(fd);
        errno = saved;
        return -1;
    }
    return fd;
}

static int open_any(int dirfd, const char *name, int flags, mode_t mode, int which) {
    ensure();
    char path[PATH_MAX];
    int watch = name != NULL && journal >= 0 && absolute(dirfd, name, path) && watched(path);
    /* A watched file is truncated through the journal, after the open. */
    int real_flags = watch ? (flags & ~O_TRUNC) : flags;
    int fd;
    switch (which) {
        case 0: fd = real_open(name, real_flags, mode); break;
        case 1: fd = real_open64(name, real_flags, mode); break;
        case 2: fd = real_openat(dirfd, name, real_flags, mode); break;
        default: fd = real_openat64(dirfd, name, real_flags, mode); break;
    }
    if (fd >= 0 && fd < MAX_FDS) fd_path[fd] = 0;
    return watch ? opened(fd, path, flags) : fd;
}

static mode_t mode_of(int flags, va_list args) {
    return (flags & (O_CREAT | O_TMPFILE)) ? (mode_t)va_arg(args, int) : 0;
}

int open(const char *name, int flags, ...) {
    va_list args;
    va_start(args, flags);
    mode_t mode = mode_of(flags, args);
    va_end(args);
    return open_any(AT_FDCWD, name, flags, mode, 0);
}

int open64(const char *name, int flags, ...) {
    va_list args;
    va_start(args, flags);
    mode_t mode = mode_of(flags, args);
    va_end(args);
    return open_any(AT_FDCWD, name, flags, mode, 1);
}

int openat(int dirfd, const char *name, int flags, ...) {
    va_list args;
    va_start(args, flags);
    mode_t mode = mode_of(flags, args);
    va_end(args);
    return open_any(dirfd, name, flags, mode, 2);
}

int openat64(int dirfd, const char *name, int flags, ...) {
    va_list args;
    va_start(args, flags);
    mode_t mode = mode_of(flags, args);
    va_end(args);
    return open_any(dirfd, name, flags, mode, 3);
}

int close(int fd) {
    ensure();
    if (fd >= 0 && fd < MAX_FDS) fd_path[fd] = 0;
    return real_close(fd);
}

ssize_t write(int fd, const void *data, size_t length) {
    ensure();
    if (!tracked(fd)) return real_write(fd, data, length);
    pthread_mutex_lock(&lock);
    off_t offset = (fcntl(fd, F_GETFL) & O_APPEND) ? size_of(fd) : lseek(fd, 0, SEEK_CUR);
    uint64_t number = journal_write(fd, data, length, offset);
    ssize_t written = real_write(fd, data, length);
    int saved = errno;
    if (written != (ssize_t)length) amend(fd, number, written < 0 ? 0 : (uint64_t)written);
    pthread_mutex_unlock(&lock);
    errno = saved;
    return written;
}

static ssize_t pwrite_any(int fd, const void *data, size_t length, off_t offset,
                          ssize_t (*pwrite_for_real)(int, const void *, size_t, off_t)) {
    if (!tracked(fd)) return pwrite_for_real(fd, data, length, offset);
    pthread_mutex_lock(&lock);
    uint64_t number = journal_write(fd, data, length, offset);
    ssize_t written = pwrite_for_real(fd, data, length, offset);
    int saved = errno;
    if (written != (ssize_t)length) amend(fd, number, written < 0 ? 0 : (uint64_t)written);
    pthread_mutex_unlock(&lock);
    errno = saved;
    return written;
}

ssize_t pwrite(int fd, const void *data, size_t length, off_t offset) {
    ensure();
    return pwrite_any(fd, data, length, offset, real_pwrite);
}

ssize_t pwrite64(int fd, const void *data, size_t length, off_t offset) {
    ensure();
    return pwrite_any(fd, data, length, offset, real_pwrite64);
}

int ftruncate(int fd, off_t length) {
    ensure();
    return tracked(fd) ? journaled_truncate(fd, length, real_ftruncate) : real_ftruncate(fd, length);
}

int ftruncate64(int fd, off_t length) {
    ensure();
    return tracked(fd) ? journaled_truncate(fd, length, real_ftruncate64) : real_ftruncate64(fd, length);
}

static void marker(uint8_t kind, int path, uint64_t began) {
    struct head h = {kind, (uint32_t)path, began};
    emit(&h, sizeof h);
}

static int sync_any(int fd, int call, int (*sync_for_real)(int)) {
    if (!tracked(fd)) return sync_for_real(fd);
    pthread_mutex_lock(&lock);
    int path = fd_path[fd] - 1;
    uint64_t began = changes;
    int selected = fail_call == 0 || fail_call == call;
    int fail = selected && fail_sync_at > 0 && ++syncs_counted == fail_sync_at;
    if (fail) {
        path_errors[path]++;
        fd_errors_seen[fd] = path_errors[path];
        marker(REC_SYNC_FAILED, path, began);
        pthread_mutex_unlock(&lock);
        errno = EIO;
        return -1;
    }
    pthread_mutex_unlock(&lock);
    int result = sync_for_real(fd);
    int saved = errno;
    if (result == 0) {
        pthread_mutex_lock(&lock);
        marker(REC_SYNC_OK, path, began);
        if (fd_errors_seen[fd] < path_errors[path]) {
            fd_errors_seen[fd] = path_errors[path];
            result = -1;
            saved = EIO;
        }
        pthread_mutex_unlock(&lock);
    }
    errno = saved;
    return result;
}

int fsync(int fd) {
    ensure();
    return sync_any(fd, 1, real_fsync);
}

int fdatasync(int fd) {
    ensure();
    return sync_any(fd, 2, real_fdatasync);
}

static void unlinked(int dirfd, const char *name) {
    char path[PATH_MAX];
    if (journal < 0 || !absolute(dirfd, name, path) || !watched(path)) return;
    pthread_mutex_lock(&lock);
    marker(REC_UNLINK, path_index(path), changes);
    pthread_mutex_unlock(&lock);
}

int unlink(const char *name) {
    ensure();
    int result = real_unlink(name);
    if (result == 0) unlinked(AT_FDCWD, name);
    return result;
}

int unlinkat(int dirfd, const char *name, int flags) {
    ensure();
    int result = real_unlinkat(dirfd, name, flags);
    if (result == 0) unlinked(dirfd, name);
    return result;
}
