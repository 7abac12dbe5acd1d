/* What bench/fakecli.c and bench/fakeclaude.c share: the clock they log, writes that finish,
 * the sleep that stands in for a model, draining standard input, and one appended log line. */
#ifndef MALAMAR_BENCH_FAKECOMMON_H
#define MALAMAR_BENCH_FAKECOMMON_H

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void write_all(int fd, const char *text, size_t size) {
    while (size > 0) {
        ssize_t written = write(fd, text, size);
        if (written <= 0) return;
        text += written;
        size -= (size_t)written;
    }
}

/* TEXT milliseconds ("MIN-MAX": a random time in that range); nothing for none. */
static void sleep_ms(const char *text) {
    char *rest = NULL;
    long ms = text ? strtol(text, &rest, 10) : 0;
    if (rest && *rest == '-') {
        long most = strtol(rest + 1, NULL, 10);
        srand((unsigned)(getpid() ^ (unsigned)(now() * 1e6)));
        if (most > ms) ms += rand() % (most - ms + 1);
    }
    if (ms <= 0) return;
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

static void drain_stdin(void) {
    char buffer[4096];
    while (read(0, buffer, sizeof buffer) > 0) {
    }
}

/* LINE (SIZE bytes, cut to end with a newline if it did not fit its buffer of CAPACITY) appended
 * to $BENCH_CLI_LOG in a single write. */
static void append_log(char *line, int size, size_t capacity) {
    const char *log_path = getenv("BENCH_CLI_LOG");
    if (!log_path || !*log_path || size < 0) return;
    if (size >= (int)capacity) {
        size = (int)capacity - 1;
        line[size - 1] = '\n';
    }
    int fd = open(log_path, O_WRONLY | O_CREAT | O_APPEND, 0600);
    if (fd >= 0) {
        write_all(fd, line, (size_t)size);
        close(fd);
    }
}

#endif
