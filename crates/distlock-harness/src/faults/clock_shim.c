/*
 * A server's wall clock, moved by a test: preloaded into a server process (LD_PRELOAD), it adds
 * an offset read from a file to every wall-clock reading the process makes through the C library
 * (clock_gettime of CLOCK_REALTIME and its coarse and TAI variants, gettimeofday, time). Monotonic
 * and boot-time clocks are left alone, as a real jump (an NTP step, an operator's `date -s`) leaves
 * them.
 *
 * Why not libfaketime: redis-server 7 (jemalloc) dies at start under it ("unexpected recursive
 * calls to clock_gettime()": its hooks allocate, and the allocator reads the clock). This shim
 * never allocates and never calls back into the C library's clock: it reads the real clocks and
 * the offset file with raw system calls.
 *
 * The file (path in DISTLOCK_CLOCK_FILE) holds the offset in seconds, signed, decimal:
 * "+2.5", "-1", "+0". It is the format libfaketime reads from FAKETIME_TIMESTAMP_FILE for a
 * relative offset, so one file drives either. It is read again at most every millisecond; a
 * writer replaces it whole (write a temporary file, rename), so a reader never sees half of it.
 * A missing or unreadable file means no offset.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static int64_t offset_ns;     /* the offset last read */
static int64_t next_read_ns;  /* monotonic time after which the file is read again */

static int raw_clock(clockid_t clock, struct timespec *ts) {
    return (int)syscall(SYS_clock_gettime, clock, ts);
}

static int64_t parse_offset(const char *s, long n) {
    int64_t whole = 0, frac = 0, scale = 1000000000;
    int negative = 0, i = 0;
    while (i < n && (s[i] == ' ' || s[i] == '\t')) i++;
    if (i < n && (s[i] == '+' || s[i] == '-')) negative = s[i++] == '-';
    for (; i < n && s[i] >= '0' && s[i] <= '9'; i++) whole = whole * 10 + (s[i] - '0');
    if (i < n && s[i] == '.') {
        for (i++; i < n && s[i] >= '0' && s[i] <= '9'; i++) {
            if (scale > 1) {
                scale /= 10;
                frac += (s[i] - '0') * scale;
            }
        }
    }
    int64_t ns = whole * 1000000000 + frac;
    return negative ? -ns : ns;
}

static int64_t current_offset(void) {
    struct timespec now;
    if (raw_clock(CLOCK_MONOTONIC, &now) != 0) return __atomic_load_n(&offset_ns, __ATOMIC_RELAXED);
    int64_t mono = (int64_t)now.tv_sec * 1000000000 + now.tv_nsec;
    if (mono < __atomic_load_n(&next_read_ns, __ATOMIC_RELAXED))
        return __atomic_load_n(&offset_ns, __ATOMIC_RELAXED);
    __atomic_store_n(&next_read_ns, mono + 1000000, __ATOMIC_RELAXED);
    int64_t offset = 0;
    char path[4096];
    /* getenv is safe here (no allocation); copy so a concurrent setenv cannot tear it. */
    extern char **environ;
    const char *name = "DISTLOCK_CLOCK_FILE=";
    path[0] = 0;
    for (char **e = environ; e && *e; e++) {
        int k = 0;
        while (name[k] && (*e)[k] == name[k]) k++;
        if (name[k] == 0) {
            int j = 0;
            while ((*e)[k + j] && j < (int)sizeof(path) - 1) {
                path[j] = (*e)[k + j];
                j++;
            }
            path[j] = 0;
            break;
        }
    }
    if (path[0]) {
        long fd = syscall(SYS_openat, AT_FDCWD, path, O_RDONLY | O_CLOEXEC);
        if (fd >= 0) {
            char text[64];
            long n = syscall(SYS_read, fd, text, sizeof(text));
            syscall(SYS_close, fd);
            if (n > 0) offset = parse_offset(text, n);
        }
    }
    __atomic_store_n(&offset_ns, offset, __ATOMIC_RELAXED);
    return offset;
}

static void shift(struct timespec *ts, int64_t by) {
    int64_t ns = (int64_t)ts->tv_sec * 1000000000 + ts->tv_nsec + by;
    ts->tv_sec = ns / 1000000000;
    ts->tv_nsec = ns % 1000000000;
    if (ts->tv_nsec < 0) {
        ts->tv_nsec += 1000000000;
        ts->tv_sec -= 1;
    }
}

int clock_gettime(clockid_t clock, struct timespec *ts) {
    int r = raw_clock(clock, ts);
    if (r == 0 && (clock == CLOCK_REALTIME || clock == CLOCK_REALTIME_COARSE || clock == CLOCK_TAI))
        shift(ts, current_offset());
    return r;
}

int gettimeofday(struct timeval *tv, void *tz) {
    (void)tz;
    struct timespec ts;
    int r = raw_clock(CLOCK_REALTIME, &ts);
    if (r != 0) return r;
    shift(&ts, current_offset());
    if (tv) {
        tv->tv_sec = ts.tv_sec;
        tv->tv_usec = ts.tv_nsec / 1000;
    }
    return 0;
}

time_t time(time_t *t) {
    struct timespec ts;
    if (raw_clock(CLOCK_REALTIME, &ts) != 0) return (time_t)-1;
    shift(&ts, current_offset());
    if (t) *t = ts.tv_sec;
    return ts.tv_sec;
}
