/* A minimal agent CLI for bench/runner.py, installed as `codex` (compiled at run time, never
 * committed as a binary).
 *
 * Accepts the argv the Codex adapter builds:
 *   codex exec [FLAGS...] [--output-schema F] -o OUTPUT_FILE PROMPT
 * (`--output-last-message FILE` and `-oFILE`/`--output-last-message=FILE` work too).
 * `--version` prints a version; every other run prints Codex's `--json` events on stdout (Malamar
 * calls a binary that prints none "not Codex"): `thread.started` first, then a health check (a
 * run without an output file) says "OK" in an `agent_message`, and every run ends with
 * `turn.completed`.
 * A task run writes $BENCH_FAKE_OUTPUT (default: one skip action) to the output file.
 * Standard input is drained to EOF, as the real Codex does.
 * $BENCH_FAKE_SLEEP_MS (task runs only) sleeps that long before answering: a CPU-light stand-in
 * for a model that takes time (bench/scale.py); "MIN-MAX" sleeps a random time in that range
 * (bench/events.py --scale).
 * `--bench-edit FILE` (an agent's extra argument; task runs only) appends a line to FILE in the
 * working directory: an agent that changes a file at every run (bench/gap.py).
 *
 * Its own lifetime goes to $BENCH_CLI_LOG, one line per run, appended in a single write:
 *   KIND START END PID PROMPT
 * KIND is "task" or "health"; START and END are CLOCK_REALTIME seconds taken as the first and
 * the last thing the process does; PROMPT is the last argument (it names the input file).
 * With $BENCH_CLI_LOG_STARTS set, a task run also appends "start START START PID PROMPT" as it
 * starts (bench/hundred_agents.py: which CLIs run while they all sleep).
 */
#include "fakecommon.h"

static const char *DEFAULT_OUTPUT = "{\"actions\":[{\"type\":\"skip\"}]}";
static const char *THREAD_STARTED = "{\"type\":\"thread.started\",\"thread_id\":\"bench\"}\n";
static const char *SAID_OK =
    "{\"type\":\"item.completed\",\"item\":{\"id\":\"item_0\",\"type\":\"agent_message\","
    "\"text\":\"OK\"}}\n";
static const char *TURN_COMPLETED =
    "{\"type\":\"turn.completed\",\"usage\":{\"input_tokens\":1,\"output_tokens\":1}}\n";

static const char *output_option(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if ((!strcmp(arg, "-o") || !strcmp(arg, "--output-last-message")) && i + 1 < argc)
            return argv[i + 1];
        if (!strncmp(arg, "--output-last-message=", 22)) return arg + 22;
        if (!strncmp(arg, "-o", 2) && arg[2] && arg[2] != '-') return arg + 2;
    }
    return NULL;
}

static const char *edit_option(int argc, char **argv) {
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], "--bench-edit")) return argv[i + 1];
    return NULL;
}

static void append_line(const char *path, double when) {
    char line[64];
    int size = snprintf(line, sizeof line, "run %d at %.6f\n", (int)getpid(), when);
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd < 0) return;
    write_all(fd, line, (size_t)size);
    close(fd);
}

static void log_line(const char *kind, double start, double end, int argc, char **argv) {
    char line[8192];
    int size = snprintf(line, sizeof line, "%s %.6f %.6f %d %s\n", kind, start, end,
                        (int)getpid(), argc > 1 ? argv[argc - 1] : "");
    append_log(line, size, sizeof line);
}

int main(int argc, char **argv) {
    double start = now();
    if (argc > 1 && !strcmp(argv[1], "--version")) {
        puts("codex-cli 0.169.0");
        return 0;
    }
    const char *output_path = output_option(argc, argv);
    write_all(1, THREAD_STARTED, strlen(THREAD_STARTED));
    drain_stdin();
    if (output_path) {
        const char *starts = getenv("BENCH_CLI_LOG_STARTS");
        if (starts && *starts) log_line("start", start, start, argc, argv);
        sleep_ms(getenv("BENCH_FAKE_SLEEP_MS"));
        const char *edit = edit_option(argc, argv);
        if (edit) append_line(edit, start);
        const char *text = getenv("BENCH_FAKE_OUTPUT");
        if (!text || !*text) text = DEFAULT_OUTPUT;
        int fd = open(output_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (fd < 0) {
            perror(output_path);
            return 1;
        }
        write_all(fd, text, strlen(text));
        close(fd);
    } else {
        write_all(1, SAID_OK, strlen(SAID_OK));
    }
    write_all(1, TURN_COMPLETED, strlen(TURN_COMPLETED));
    log_line(output_path ? "task" : "health", start, now(), argc, argv);
    return 0;
}
