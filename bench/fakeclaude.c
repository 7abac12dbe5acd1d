/* A minimal Claude Code for bench/original.py, installed as `claude` (compiled at run time,
 * never committed as a binary): the agent CLI of the original TypeScript/Bun build
 * (malamar-dev/malamar, api/src/cli/adapters/claude.ts and api/src/task/cli-invoke.ts).
 *
 * Accepts the argv that build uses:
 *   claude --version                          its health check's version: prints one
 *   claude --print PROMPT                     its health check: prints "OK" (any output will do)
 *   claude --dangerously-skip-permissions --print "Read the file at IN and follow the
 *       instruction autonomously. Write your JSON response to OUT."
 *                                             a task run, in the task's working directory
 *                                             ($TMPDIR/malamar_task_<id> by default)
 * A task run (a last argument holding "Write your JSON response to ") writes
 * $BENCH_FAKE_OUTPUT (default: one skip action) to OUT, which the build reads once the process
 * has exited, and prints a line on stdout. $BENCH_FAKE_SLEEP_MS (task runs only) sleeps that
 * long before answering: a CPU-light stand-in for a model that takes time.
 * Standard input is drained to EOF, as bench/fakecli.c does (bench/fakecommon.h: what both share).
 *
 * Its own lifetime goes to $BENCH_CLI_LOG, one line per run, appended in a single write:
 *   KIND START END PID CWD PROMPT
 * KIND is "version", "health" or "task"; START and END are CLOCK_REALTIME seconds taken as the
 * first and the last thing the process does; CWD is its working directory (it names the task);
 * PROMPT is the last argument (it may hold spaces: it is the rest of the line).
 */
#include "fakecommon.h"

static const char *DEFAULT_OUTPUT = "{\"actions\":[{\"type\":\"skip\"}]}";
static const char *VERSION = "2.1.0 (Claude Code)\n";
static const char *OUTPUT_MARK = "Write your JSON response to ";
static const char *SAID_DONE = "Done. Wrote the JSON response.\n";
static const char *SAID_OK = "OK\n";

/* OUT from the task prompt: what follows the mark, without the closing ".". */
static int output_path(const char *prompt, char *path, size_t size) {
    const char *mark = strstr(prompt, OUTPUT_MARK);
    if (!mark) return 0;
    snprintf(path, size, "%s", mark + strlen(OUTPUT_MARK));
    size_t length = strlen(path);
    while (length > 0 && (path[length - 1] == '.' || path[length - 1] == ' ' ||
                          path[length - 1] == '\n'))
        path[--length] = '\0';
    return length > 0;
}

static void log_line(const char *kind, double start, double end, const char *prompt) {
    char cwd[4096];
    if (!getcwd(cwd, sizeof cwd)) strcpy(cwd, "?");
    char line[16384];
    int size = snprintf(line, sizeof line, "%s %.6f %.6f %d %s %s\n", kind, start, end,
                        (int)getpid(), cwd, prompt);
    append_log(line, size, sizeof line);
}

int main(int argc, char **argv) {
    double start = now();
    const char *prompt = argc > 1 ? argv[argc - 1] : "";
    if (argc > 1 && !strcmp(argv[1], "--version")) {
        write_all(1, VERSION, strlen(VERSION));
        log_line("version", start, now(), prompt);
        return 0;
    }
    char path[4096];
    int task = output_path(prompt, path, sizeof path);
    drain_stdin();
    if (task) {
        sleep_ms(getenv("BENCH_FAKE_SLEEP_MS"));
        const char *text = getenv("BENCH_FAKE_OUTPUT");
        if (!text || !*text) text = DEFAULT_OUTPUT;
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (fd < 0) {
            perror(path);
            return 1;
        }
        write_all(fd, text, strlen(text));
        close(fd);
        write_all(1, SAID_DONE, strlen(SAID_DONE));
    } else {
        write_all(1, SAID_OK, strlen(SAID_OK));
    }
    log_line(task ? "task" : "health", start, now(), prompt);
    return 0;
}
