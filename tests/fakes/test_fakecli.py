"""Tests of the fake agent CLIs (fakecli.py). Most run the fake in this process (`run`: its
environment, working directory, standard streams and exit code as a process would have them):
a Python start per run made these tests slow. Those about the process itself (the executables in
bin/, stdin pipes, timing while it runs, process groups, a hang) start it as the worker does
(`run_process`, `Box.start`)."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

import pytest

FAKES = Path(__file__).resolve().parent
BIN = FAKES / "bin"
CLIS = ("claude", "gemini", "codex", "opencode")
SCHEMA = {"type": "object", "properties": {"actions": {"type": "array"}}, "required": ["actions"]}
SKIP = {"actions": [{"type": "skip"}]}
MISSING = object()  # result() when no result exists


def load_fakecli():
    spec = importlib.util.spec_from_file_location("fakecli", FAKES / "fakecli.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["fakecli"] = module
    spec.loader.exec_module(module)
    return module


def fake_env(**extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("MALAMAR_", "GEMINI_CLI_", "IS_SANDBOX", "FAKE_"))
    }
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env.update(extra)
    return env


FAKECLI = load_fakecli()


def run(argv, cwd, *, env=None, stdin=None) -> subprocess.CompletedProcess:
    """Run a fake in this process as `run_process` runs it (stdin /dev/null unless text is
    given): its environment, working directory and standard streams swapped in for the call."""
    saved = dict(os.environ), os.getcwd(), sys.stdin, sys.stdout, sys.stderr
    environment = fake_env(**(env or {}))
    out, err = (io.TextIOWrapper(io.BytesIO(), encoding="utf-8") for _ in range(2))
    with open(os.devnull) if stdin is None else tempfile.TemporaryFile("w+") as source:
        if stdin is not None:  # a file, not a pipe: select() sees it ready as a written pipe
            source.write(stdin)
            source.seek(0)
        os.environ.clear()
        os.environ.update(environment)
        os.chdir(cwd)
        sys.stdin, sys.stdout, sys.stderr = source, out, err
        try:
            code = FAKECLI.entry(list(argv))
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        except Exception:  # as the interpreter ends a process on an uncaught exception
            traceback.print_exc(file=err)
            code = 1
        finally:
            environ, cwd_before, sys.stdin, sys.stdout, sys.stderr = saved
            os.environ.clear()
            os.environ.update(environ)
            os.chdir(cwd_before)
    return subprocess.CompletedProcess(list(argv), code, _text(out), _text(err))


def _text(stream: io.TextIOWrapper) -> str:
    """What `subprocess.run(text=True)` reads: UTF-8, universal newlines."""
    stream.flush()
    return io.TextIOWrapper(io.BytesIO(stream.buffer.getvalue()), encoding="utf-8").read()


def run_process(argv, cwd, *, env=None, stdin=None, timeout=30):
    """Start a fake as the worker does (through bin/ on PATH); stdin is /dev/null unless text
    is given."""
    return subprocess.run(
        argv,
        cwd=cwd,
        env=fake_env(**{"PWD": str(cwd), **(env or {})}),  # as a shell starts it
        input=stdin,
        stdin=subprocess.DEVNULL if stdin is None else None,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def comment(author: str, content: str) -> dict:
    return {"author": author, "agent_id": "a1", "content": content, "created_at": "2026-01-01"}


TASK = """# Malamar Context
You are being orchestrated by Malamar, a multi-agent workflow system.
{workspace}

# Your Role
You are the agent "{agent}" in this workflow.

{role}

## Other Agents in This Workflow
- Planner
- {agent} (you)

# Task
## Summary
A summary.
## Description
{description}
## Comments

```json
{comments}
```

## Activity Log

```json
{{"type": "task_created", "created_at": "2026-01-01"}}
```

# Output Instruction
Write your response as JSON to: {output}
Use this schema: {{"actions": [...]}}
"""

CHAT = """# Malamar Chat Context
You are chatting with the user through Malamar.
{agent_line}

## Conversation History

```json
{history}
```

# Output Instruction
Write your response as JSON to: {output}
"""


class Box:
    """A temp layout like Malamar's: a work dir (cwd) and a separate folder for the files."""

    def __init__(self, root: Path) -> None:
        self.work = root / "work"
        self.io = root / "io"
        self.work.mkdir()
        self.io.mkdir()
        self.input = self.io / "malamar_input_ab12.md"
        self.output = self.io / "malamar_output_ab12.json"
        self.schema = self.io / "schema.json"
        self.schema.write_text(json.dumps(SCHEMA))

    @property
    def prompt(self) -> str:
        return f"Read the file at {self.input} and follow the instruction autonomously."

    def task(self, *, role="", description="", comments=(), agent="Implementer", workspace=""):
        self.input.write_text(
            TASK.format(
                agent=agent,
                role=role,
                description=description,
                comments="\n".join(json.dumps(c) for c in comments),
                workspace=workspace,
                output=self.output,
            )
        )

    def chat(self, *messages: tuple[str, str], agent: str | None = None) -> None:
        self.input = self.io / "malamar_chat_cd34.md"
        self.input.write_text(
            CHAT.format(
                agent_line=f'You are the agent "{agent}" in this workflow.' if agent else "",
                history="\n".join(json.dumps({"role": r, "content": c}) for r, c in messages),
                output=self.output,
            )
        )

    def argv(self, cli: str, *, stream: bool = False, prompt: str | None = None) -> list[str]:
        """The argv Malamar uses (shared/CLIS.md)."""
        prompt = self.prompt if prompt is None else prompt
        if cli == "claude":
            fmt = ["stream-json", "--verbose"] if stream else ["json"]
            return ["claude", "-p", prompt, "--dangerously-skip-permissions",
                    "--output-format", *fmt, "--json-schema", json.dumps(SCHEMA)]  # fmt: skip
        if cli == "gemini":
            return ["gemini", "-p", prompt, "--yolo", "--skip-trust", "--include-directories",
                    str(self.io), "-o", "stream-json" if stream else "json"]  # fmt: skip
        if cli == "codex":
            return ["codex", "exec", "--dangerously-bypass-approvals-and-sandbox",
                    "--skip-git-repo-check", "--output-schema", str(self.schema),
                    "-o", str(self.output), *(["--json"] if stream else []), prompt]  # fmt: skip
        return ["opencode", "run", "--auto", "--format", "json"]

    def run(self, cli: str, *, stream=False, env=None, argv=None, process=False):
        """Malamar's run of `cli` in this process (`run`), or as a process (`process=True`)."""
        argv = argv or self.argv(cli, stream=stream)
        stdin = self.prompt if cli == "opencode" and argv[-1] == "json" else None
        if process:
            return run_process(argv, self.work, env=env, stdin=stdin)
        return run(argv, self.work, env=env, stdin=stdin)

    def start(self, argv: list[str], **popen) -> subprocess.Popen:
        """Start the fake without waiting, for tests that act while it runs (pipes and text
        unless `popen` says otherwise)."""
        pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE}
        options = {"stdin": subprocess.DEVNULL, **pipes, "text": True} | popen
        return subprocess.Popen(argv, cwd=self.work, env=fake_env(PWD=str(self.work)), **options)

    def result(self, cli: str, proc: subprocess.CompletedProcess) -> object:
        """What Malamar reads: claude's structured_output, else the output file (parsed when
        it is JSON, raw text otherwise); MISSING when there is neither."""
        if cli == "claude":
            final = json.loads(proc.stdout.splitlines()[-1] if proc.stdout.strip() else "{}")
            if "structured_output" in final:
                return final["structured_output"]
        if not self.output.exists():
            return MISSING
        text = self.output.read_text()
        try:
            return json.loads(text)
        except json.JSONDecodeError:
            return text


@pytest.fixture
def box(tmp_path: Path) -> Box:
    return Box(tmp_path)


def jsonl(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


# ------------------------------------------------------------------------------ basics


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["claude", "--version"], "2.1.197 (Claude Code)"),
        (["claude", "-v"], "2.1.197 (Claude Code)"),
        (["gemini", "--version"], "0.61.0"),
        (["gemini", "-v"], "0.61.0"),
        (["codex", "--version"], "codex-cli 0.169.0"),
        (["codex", "-V"], "codex-cli 0.169.0"),
        (["opencode", "--version"], "1.18.33"),
        (["opencode", "-v"], "1.18.33"),
    ],
)
def test_version(box, argv, expected):
    proc = run(argv, box.work)
    assert (proc.returncode, proc.stdout.strip()) == (0, expected)


@pytest.mark.parametrize("cli", CLIS)
def test_help_exits_zero(box, cli):
    proc = run([cli, "--help"], box.work)
    assert proc.returncode == 0
    assert "Usage" in proc.stdout or "opencode run" in proc.stdout


def test_symlinks_are_relative():
    for cli in CLIS:
        assert os.readlink(BIN / cli) == "../fakecli.py"


def test_can_be_run_as_fakecli_with_name(box):
    proc = run_process([sys.executable, str(FAKES / "fakecli.py"), "gemini", "--version"], box.work)
    assert proc.stdout.strip() == "0.61.0"


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("cli", CLIS)
def test_malamar_argv_without_directive_skips(box, cli, stream):
    box.task()
    proc = box.run(
        cli, stream=stream, process=True
    )  # the executables in bin/, as Malamar runs them
    assert proc.returncode == 0, proc.stderr
    assert box.result(cli, proc) == SKIP


# ------------------------------------------------------------------------------ stdout shapes


def test_claude_json_carries_structured_output_and_writes_no_file(box):
    box.task(role="@fake comment hello")
    proc = box.run("claude")
    final = json.loads(proc.stdout)
    assert final["type"] == "result" and final["subtype"] == "success"
    assert final["is_error"] is False
    assert final["structured_output"] == {"actions": [{"type": "comment", "content": "hello"}]}
    assert json.loads(final["result"]) == final["structured_output"]
    assert {"session_id", "total_cost_usd", "usage"} <= final.keys()
    assert not box.output.exists()


def test_claude_stream_json_sequence(box):
    box.task(role="@fake comment hello")
    events = jsonl(box.run("claude", stream=True).stdout)
    assert (events[0]["type"], events[0]["subtype"]) == ("system", "init")
    assert events[0]["cwd"] == str(box.work)
    tool = events[1]["message"]["content"][0]
    assert (tool["type"], tool["name"]) == ("tool_use", "StructuredOutput")
    assert events[2]["type"] == "user"
    assert events[-1]["type"] == "result"
    assert events[-1]["structured_output"]["actions"][0]["content"] == "hello"


def test_claude_file_only_env_writes_the_file(box):
    box.task(role="@fake comment hello")
    proc = box.run("claude", env={"MALAMAR_FAKE_CLAUDE_FILE_ONLY": "1"})
    assert "structured_output" not in json.loads(proc.stdout)
    assert json.loads(box.output.read_text())["actions"][0]["content"] == "hello"


def test_claude_stream_file_write_shows_write_tool(box):
    box.task(role="@fake invalid-json")
    events = jsonl(box.run("claude", stream=True).stdout)
    tools = [
        block
        for e in events
        if e["type"] == "assistant"
        for block in e["message"]["content"]
        if block["type"] == "tool_use"
    ]
    assert tools[0]["name"] == "Write"
    assert tools[0]["input"] == {"file_path": str(box.output), "content": "{not json"}
    assert "structured_output" not in events[-1]


def test_claude_text_format(box):
    box.task(role="@fake comment hi")
    argv = ["claude", "-p", box.prompt, "--dangerously-skip-permissions"]
    proc = box.run("claude", argv=argv)
    assert proc.stdout.strip() == "Done: the result has been written."
    assert json.loads(box.output.read_text())["actions"][0]["content"] == "hi"


def test_gemini_json_and_stream(box):
    box.task(role="@fake comment hi")
    proc = box.run("gemini")
    assert proc.stderr == "YOLO mode is enabled. All tool calls will be automatically approved.\n"
    final = json.loads(proc.stdout)
    assert {"session_id", "response", "stats"} <= final.keys()
    events = jsonl(box.run("gemini", stream=True).stdout)
    types = [e["type"] for e in events]
    assert types == ["init", "message", "tool_use", "tool_result", "message", "result"]
    assert events[2]["tool_name"] == "write_file"
    assert events[2]["parameters"]["file_path"] == str(box.output)
    assert events[3]["status"] == "success"
    assert events[-1]["status"] == "success"


def test_codex_plain_and_json(box):
    box.task(role="@fake comment hi")
    proc = box.run("codex")
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == box.result("codex", proc)
    assert "OpenAI Codex" in proc.stderr
    events = jsonl(box.run("codex", stream=True).stdout)
    assert [e["type"] for e in events] == [
        "thread.started", "turn.started", "item.completed", "turn.completed",
    ]  # fmt: skip
    assert events[2]["item"]["type"] == "agent_message"
    assert json.loads(events[2]["item"]["text"])["actions"][0]["content"] == "hi"


def test_opencode_json_events(box):
    box.task(role="@fake comment hi")
    events = jsonl(box.run("opencode").stdout)
    assert [e["type"] for e in events] == [
        "step_start", "text", "tool_use", "step_finish", "step_start", "text", "step_finish",
    ]  # fmt: skip
    state = events[2]["part"]["state"]
    assert (events[2]["part"]["tool"], state["status"]) == ("write", "completed")
    assert state["input"]["filePath"] == str(box.output)
    assert events[-1]["part"]["reason"] == "stop"


def test_opencode_default_format_prints_text(box):
    box.task()
    proc = run(["opencode", "run", "--auto"], box.work, stdin=box.prompt)
    assert proc.stdout.strip() == "Done: the result has been written."
    assert json.loads(box.output.read_text()) == SKIP


# ------------------------------------------------------------------------------ directives

DIRECTIVE_RESULTS = [
    ("skip", SKIP),
    ("comment Looks good: ship it",
     {"actions": [{"type": "comment", "content": "Looks good: ship it"}]}),
    ("review Please check", {"actions": [
        {"type": "comment", "content": "Please check"},
        {"type": "change_status", "status": "in_review"},
    ]}),
    ("in_review", {"actions": [{"type": "change_status", "status": "in_review"}]}),
    ("unknown-action", {"actions": [{"type": "launch_missiles"}]}),
    ('json {"actions": 5, "extra": [1]}', {"actions": 5, "extra": [1]}),
    ("json [1, 2", "[1, 2"),
    ("invalid-json", "{not json"),
    ("empty-file", ""),
    ("no-file", MISSING),
    ("nested 3", [[[]]]),
]  # fmt: skip


@pytest.mark.parametrize(("directive", "expected"), DIRECTIVE_RESULTS)
@pytest.mark.parametrize("cli", CLIS)
def test_directive_results(box, cli, directive, expected):
    box.task(description=f"Some text.\n@fake {directive}\nMore text.")
    proc = box.run(cli)
    assert proc.returncode == 0, proc.stderr
    assert box.result(cli, proc) == expected


@pytest.mark.parametrize("directive", ["invalid-json", "empty-file", "no-file", "json {}"])
def test_claude_file_directives_come_without_structured_output(box, directive):
    box.task(role=f"@fake {directive}")
    final = json.loads(box.run("claude").stdout)
    assert "structured_output" not in final
    assert final["is_error"] is False


def test_comment_once(box):
    box.task(role="@fake comment-once done", comments=[comment("Planner", "done")])
    assert box.result("claude", box.run("claude"))["actions"][0]["type"] == "comment"
    box.task(role="@fake comment-once done", comments=[comment("Implementer", "done")])
    assert box.result("claude", box.run("claude")) == SKIP
    box.task(role="@fake comment-once done", comments=[comment("Implementer", "done!")])
    assert box.result("claude", box.run("claude"))["actions"][0]["type"] == "comment"


def test_last_directive_wins_role_then_description_then_comments(box):
    box.task(
        role="Do things.\n@fake comment from-role",
        description="@fake comment from-description",
        comments=[comment("User", "@fake comment c1"), comment("Planner", "x\n@fake comment c2")],
    )
    assert box.result("gemini", box.run("gemini"))["actions"][0]["content"] == "c2"
    box.task(role="@fake comment from-role", description="@fake comment from-description")
    assert box.result("gemini", box.run("gemini"))["actions"][0]["content"] == "from-description"
    box.task(role="@fake comment from-role")
    assert box.result("gemini", box.run("gemini"))["actions"][0]["content"] == "from-role"


def test_directives_for_other_agents_are_ignored(box):
    box.task(
        description="@fake Implementer: comment mine\n@fake Planner: comment theirs",
        comments=[comment("User", "@fake Code Reviewer: skip")],
    )
    assert box.result("codex", box.run("codex"))["actions"][0]["content"] == "mine"
    box.task(description="@fake implementer: comment case-insensitive")
    assert box.result("codex", box.run("codex"))["actions"][0]["content"] == "case-insensitive"
    box.task(description="@fake Planner: comment theirs")
    assert box.result("codex", box.run("codex")) == SKIP


def test_workspace_instruction_and_chat_directives_do_not_count(box):
    box.task(workspace="@fake comment workspace", description="@fake reply chat-only")
    assert box.result("claude", box.run("claude")) == SKIP


def test_tabs_and_agent_prefix_with_spaces(box):
    box.task(agent="Code Reviewer", description="@fake\tCode Reviewer:\tcomment\ttabbed: ok")
    assert box.result("claude", box.run("claude"))["actions"][0]["content"] == "tabbed: ok"


def test_default_directive_from_env(box):
    box.task()
    proc = box.run("opencode", env={"MALAMAR_FAKE_DEFAULT": "comment hi"})
    assert box.result("opencode", proc)["actions"][0]["content"] == "hi"
    box.task(description="@fake skip")
    proc = box.run("opencode", env={"MALAMAR_FAKE_DEFAULT": "@fake comment hi"})
    assert box.result("opencode", proc) == SKIP


@pytest.mark.parametrize(
    "directive", ["", "bogus", "sleep soon", "sleep 1 bogus", "comment", "exit x", "skip now",
                  "action [1]", "Planner: bogus", "nested", "nested 0", "nested deep",
                  "limit soon"]
)  # fmt: skip
def test_bad_directive_fails_loudly(box, directive):
    box.task(description=f"@fake {directive}")
    proc = box.run("claude")
    assert proc.returncode == 99
    assert "bad directive" in proc.stderr


@pytest.mark.parametrize("cli", CLIS)
def test_nested_directive_writes_a_deep_file_and_stream_line(box, cli):
    box.task(description="@fake nested 100000")
    proc = box.run(cli, stream=True)
    assert proc.returncode == 0, proc.stderr
    assert box.output.read_text() == "[" * 100000 + "]" * 100000
    deep = [line for line in proc.stdout.splitlines() if line.startswith('{"type":"nested"')]
    assert deep == ['{"type":"nested","value":' + "[" * 100000 + "]" * 100000 + "}"]


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("cli", CLIS)
def test_exit_directive(box, cli, stream):
    box.task(description="@fake exit 7 boom: quota exceeded")
    proc = box.run(cli, stream=stream)
    assert proc.returncode == 7
    assert proc.stderr.splitlines()[-1] == "boom: quota exceeded"  # gemini: after its YOLO line
    assert proc.stdout == ""
    assert not box.output.exists()


@pytest.mark.parametrize("cli", CLIS)
def test_sleep_streams_opening_before_sleeping(box, cli):
    # A minute's sleep: the opening line must arrive while it sleeps. No clock is compared (a
    # loaded machine may read the line late); a line held back until the end would not come.
    box.task(description="@fake sleep 60 comment done")
    proc = box.start(box.argv(cli, stream=True), stdin=subprocess.PIPE)
    try:
        proc.stdin.write(box.prompt if cli == "opencode" else "")
        proc.stdin.close()
        ready, _, _ = select.select([proc.stdout], [], [], 30)
        assert ready, "no opening line within 30 s of a 60 s sleep"
        first = proc.stdout.readline()
        assert proc.poll() is None
        assert json.loads(first)["type"] in ("system", "init", "thread.started", "step_start")
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize("cli", CLIS)
def test_sleep_in_a_stream_then_the_result(box, cli):
    box.task(description="@fake sleep 0.3 comment done")
    argv = box.argv(cli, stream=True)
    start = time.monotonic()
    proc = box.start(argv, stdin=subprocess.PIPE)
    out, _ = proc.communicate(box.prompt if cli == "opencode" else "", timeout=60)
    assert proc.returncode == 0
    assert time.monotonic() - start >= 0.3
    done = subprocess.CompletedProcess(argv, 0, out, "")
    assert box.result(cli, done) == {"actions": [{"type": "comment", "content": "done"}]}


def test_sleep_alone_then_skip(box):
    box.task(description="@fake sleep 0.3")
    start = time.monotonic()
    proc = box.run("gemini")
    assert time.monotonic() - start >= 0.3
    assert box.result("gemini", proc) == SKIP


def test_sleep_chain_and_exit(box):
    box.task(description="@fake sleep 0.2 sleep 0.2 exit 3 late")
    start = time.monotonic()
    proc = box.run("codex")
    assert (proc.returncode, proc.stderr.strip()) == (3, "late")
    assert time.monotonic() - start >= 0.4


def test_hold_waits_for_each_release_file_of_the_test(box):
    box.task(description="@fake hold 30 hold 30 comment released")
    proc = box.start(box.argv("codex"))
    release = box.work / "release"
    try:
        for _ in range(2):  # each hold takes its release file: the second waits for a new one
            with pytest.raises(subprocess.TimeoutExpired):
                proc.wait(timeout=0.3)
            release.touch()
            wait_for(lambda: not release.exists(), "the fake to take the release file")
        out, err = proc.communicate(timeout=10)
    finally:
        proc.kill()
    done = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    assert box.result("codex", done) == {"actions": [{"type": "comment", "content": "released"}]}


def test_hold_gives_up_after_its_limit(box):
    box.task(description="@fake hold 0.3 exit 4 nobody released me")
    start = time.monotonic()
    proc = box.run("codex")
    assert (proc.returncode, proc.stderr.strip()) == (4, "nobody released me")
    assert time.monotonic() - start >= 0.3


def wait_for(check, what: str, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def test_grandchild_shares_the_process_group(box):
    box.task(description="@fake grandchild 2 comment after")
    proc = box.start(
        box.argv("claude"), stderr=subprocess.DEVNULL, text=False, start_new_session=True
    )
    pid_file = box.work / "grandchild.pid"
    try:
        wait_for(lambda: pid_file.exists() and pid_file.read_text().strip(), "grandchild.pid")
        grandchild = int(pid_file.read_text())
        assert grandchild != proc.pid
        assert os.getpgid(grandchild) == proc.pid  # the fake leads its own new group
        assert os.getsid(grandchild) == proc.pid
        assert proc.poll() is None
        out, _ = proc.communicate(timeout=15)
        assert proc.returncode == 0
        assert json.loads(out)["structured_output"]["actions"][0]["content"] == "after"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # the fake's own group: it and its grandchild
        proc.wait()


@pytest.mark.parametrize("cli", CLIS)
def test_flood(box, cli):
    box.task(description="@fake flood 2.5")
    proc = box.run(cli, stream=True)
    assert proc.returncode == 0
    assert len(proc.stdout) >= int(2.5 * 1024 * 1024)
    assert "x" * 1023 in proc.stdout
    assert box.result(cli, proc) == SKIP


def test_flood_then_directive(box):
    box.task(description="@fake flood 0.1 comment after-flood")
    proc = box.run("claude")
    assert box.result("claude", proc)["actions"][0]["content"] == "after-flood"


def test_missing_input_file_answers_without_output(box):
    proc = box.run("gemini")  # box.input was never written
    assert proc.returncode == 0
    assert "could not read" in json.loads(proc.stdout)["response"]
    assert not box.output.exists()


# ------------------------------------------------------------------------------ chat mode


@pytest.mark.parametrize("cli", CLIS)
def test_chat_without_directive_says_ok(box, cli):
    box.chat(("user", "hello"))
    proc = box.run(cli)
    assert box.result(cli, proc) == {"message": "OK", "actions": []}


def test_chat_reply_and_actions(box):
    box.chat(
        ("user", "@fake reply old"),
        ("agent", "@fake reply from-agent"),
        ("user", 'Do it.\n@fake reply Created it.\n@fake action {"type": "create_task", '
                 '"summary": "A"}\n@fake action {"type": "rename_chat", "title": "B"}'),
        ("system", "@fake reply from-system"),
    )  # fmt: skip
    for cli in CLIS:
        box.output.unlink(missing_ok=True)
        assert box.result(cli, box.run(cli)) == {
            "message": "Created it.",
            "actions": [
                {"type": "create_task", "summary": "A"},
                {"type": "rename_chat", "title": "B"},
            ],
        }


def test_chat_only_last_user_message_counts(box):
    box.chat(("user", "@fake reply first"), ("agent", "ok"), ("user", "no directive here"))
    assert box.result("claude", box.run("claude")) == {"message": "OK", "actions": []}


def test_chat_agent_addressing_and_task_actions_ignored(box):
    box.chat(("user", "@fake Helper: reply for-helper\n@fake Other: reply no"), agent="Helper")
    assert box.result("codex", box.run("codex"))["message"] == "for-helper"
    box.chat(("user", "@fake comment task-only"))
    assert box.result("codex", box.run("codex")) == {"message": "OK", "actions": []}


@pytest.mark.parametrize(
    ("directive", "expected"),
    [("invalid-json", "{not json"), ("empty-file", ""), ("no-file", MISSING), ("json {}", {})],
)
def test_chat_file_directives(box, directive, expected):
    box.chat(("user", f"@fake {directive}"))
    assert box.result("opencode", box.run("opencode")) == expected


def test_chat_sleep_exit_and_default(box):
    box.chat(("user", "@fake sleep 0.2 reply slow"))
    assert box.result("gemini", box.run("gemini"))["message"] == "slow"
    box.chat(("user", "@fake exit 4 chat failed"))
    proc = box.run("gemini")
    assert (proc.returncode, proc.stderr.splitlines()[-1]) == (4, "chat failed")
    box.chat(("user", "hi"))
    proc = box.run("claude", env={"MALAMAR_FAKE_DEFAULT": "reply default"})
    assert box.result("claude", proc)["message"] == "default"


def test_chat_detected_by_heading(box):
    box.chat(("user", "@fake reply heading"))
    box.input = box.input.rename(box.io / "other_name.md")
    assert box.result("claude", box.run("claude"))["message"] == "heading"


# ------------------------------------------------------------------------------ health check


@pytest.mark.parametrize("cli", CLIS)
def test_other_prompt_answers_ok(box, cli):
    if cli == "opencode":
        proc = run(["opencode", "run", "--auto", "--format", "json"], box.work, stdin="Reply OK")
        assert jsonl(proc.stdout)[-2]["part"]["text"] == "OK"
    else:
        proc = box.run(cli, argv=box.argv(cli, prompt="Reply with OK"))
        out = proc.stdout
        text = {
            "claude": lambda: json.loads(out)["result"],
            "gemini": lambda: json.loads(out)["response"],
            "codex": lambda: out.strip(),
        }[cli]()
        assert text == "OK"
    assert proc.returncode == 0
    if cli == "codex":  # codex writes its final message to -o
        assert box.output.read_text() == "OK"
    else:
        assert not box.output.exists()


@pytest.mark.parametrize("cli", CLIS)
def test_health_fail_and_empty(box, cli):
    argv = box.argv(cli, prompt="Reply with OK")
    stdin = "Reply with OK" if cli == "opencode" else None
    failed = run(argv, box.work, env={"MALAMAR_FAKE_HEALTH": "fail"}, stdin=stdin)
    assert failed.returncode == 1
    assert failed.stderr.strip()
    empty = run(argv, box.work, env={"MALAMAR_FAKE_HEALTH": "empty"}, stdin=stdin)
    assert (empty.returncode, empty.stdout) == (0, "")


def test_health_hang(box):
    with pytest.raises(subprocess.TimeoutExpired):
        run_process(box.argv("gemini", prompt="Reply with OK"), box.work,
            env={"MALAMAR_FAKE_HEALTH": "hang"}, timeout=1.5)  # fmt: skip


def test_health_env_does_not_affect_tasks(box):
    box.task(description="@fake comment task")
    proc = box.run("claude", env={"MALAMAR_FAKE_HEALTH": "fail"})
    assert box.result("claude", proc)["actions"][0]["content"] == "task"


# ------------------------------------------------------------------------------ log


def test_log_records_each_start(box, tmp_path):
    log = tmp_path / "calls.jsonl"
    box.task()
    env = {"MALAMAR_FAKE_LOG": str(log), "MALAMAR_TEST_ID": "42", "FAKE_X": "y",
           "IS_SANDBOX": "1", "OTHER_VAR": "no"}  # fmt: skip
    box.run("claude", env=env, process=True)  # the log names the process: pid, group, session
    box.run("opencode", env=env, process=True)
    run_process(["codex", "--bogus"], box.work, env=env)
    claude, opencode, codex = jsonl(log.read_text())
    assert claude["cli"] == "claude"
    assert claude["argv"] == box.argv("claude")[1:]
    assert claude["cwd"] == str(box.work)
    assert claude["stdin"] is None
    assert claude["env"].pop("PWD") == str(box.work)
    claude["env"].pop("TMPDIR", None)  # inherited, when the test process has one
    assert claude["env"] == {"MALAMAR_TEST_ID": "42", "FAKE_X": "y", "IS_SANDBOX": "1"}
    assert claude["input_path"] == str(box.input)
    assert (claude["pgid"], claude["sid"]) == (os.getpgid(0), os.getsid(0))  # not detached
    assert abs(claude["time"] - time.time()) < 60
    assert opencode["stdin"] == box.prompt
    assert opencode["input_path"] == str(box.input)
    assert (codex["argv"], codex["input_path"]) == (["--bogus"], None)
    assert "input" not in claude  # only when asked for


def test_log_records_the_input_as_read_when_asked(box, tmp_path):
    log = tmp_path / "calls.jsonl"
    box.task(description="Mind the cart")
    env = {"MALAMAR_FAKE_LOG": str(log), "MALAMAR_FAKE_LOG_INPUT": "1"}
    box.run("claude", env=env)
    box.input.write_text("Changed after the run")
    (record,) = jsonl(log.read_text())
    assert "Mind the cart" in record["input"]


# ------------------------------------------------------------------------------ flags


def _every_flag(table: dict, short: bool) -> list[str]:
    args = []
    for name, opt in table.items():
        if name.startswith("--") == short or opt.key in ("help", "version"):
            continue
        args.append(name)
        if opt.choices:
            args.append(opt.choices[0])
        elif opt.arity in ("one", "many"):
            args.append("value")
    return args


@pytest.mark.parametrize("short", [False, True], ids=["long", "short"])
@pytest.mark.parametrize("cli", CLIS)
def test_every_documented_flag_is_accepted(box, cli, short):
    fake = load_fakecli()
    prefix, table = {
        "claude": ([], fake.Claude.table),
        "gemini": ([], fake.Gemini.table),
        "codex": (["exec"], fake.Codex.exec_table),
        "opencode": (["run"], fake.OpenCode.run_table),
    }[cli]
    proc = run([cli, *prefix, *_every_flag(table, short), "--version"], box.work)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip()


@pytest.mark.parametrize(
    ("argv", "code", "message"),
    [
        (["claude", "-p", "hi", "--bogus"], 1, "error: unknown option '--bogus'"),
        (["claude", "-p", "hi", "--verbos"], 1, "(Did you mean --verbose?)"),
        (["claude", "-p", "hi", "-z"], 1, "error: unknown option '-z'"),
        (["claude", "-p", "hi", "--output-format"], 1,
         "error: option '--output-format <format>' argument missing"),
        (["claude", "-p", "hi", "--output-format", "xml"], 1,
         "argument 'xml' is invalid. Allowed choices are text, json, stream-json."),
        (["claude", "-p", "hi", "there"], 1, "error: too many arguments"),
        (["claude", "-p", "--add-dir", "/tmp", "hi"], 1, "Input must be provided"),
        (["claude", "-p", "hi", "--verbose=yes"], 1, "unknown option '--verbose=yes'"),
        (["gemini", "-p", "hi", "--skip-trust", "--bogus"], 1, "Unknown argument: bogus"),
        (["gemini", "-p", "hi", "--skip-trust", "-o", "xml"], 1,
         'Argument: output-format, Given: "xml", Choices: "text", "json", "stream-json"'),
        (["gemini", "-p", "hi", "--skip-trust", "query"], 1,
         "Cannot use both a positional prompt and the --prompt (-p) flag together"),
        (["gemini", "-p", "hi", "--skip-trust", "-y", "--approval-mode", "yolo"], 1,
         "Cannot use both --yolo (-y) and --approval-mode together"),
        (["gemini", "--skip-trust"], 1, "No input provided via stdin"),
        (["codex", "exec", "--skip-git-repo-check", "--bogus", "hi"], 2,
         "error: unexpected argument '--bogus' found"),
        (["codex", "exec", "--skip-git-repo-check", "--jsn", "hi"], 2,
         "tip: a similar argument exists: '--json'"),
        (["codex", "exec", "--full-auto", "hi"], 2, "unexpected argument '--full-auto'"),
        (["codex", "exec", "-a", "never", "hi"], 2, "unexpected argument '-a'"),
        (["codex", "exec", "--output-schema"], 2,
         "a value is required for '--output-schema <FILE>' but none was supplied"),
        (["codex", "exec", "--color", "purple", "hi"], 2,
         "invalid value 'purple' for '--color <COLOR>'"),
        (["codex", "exec", "--skip-git-repo-check", "a", "b"], 2, "unexpected argument 'b'"),
        (["codex", "exec", "--json=1", "hi"], 2, "unexpected value '1' for '--json'"),
        (["codex", "review"], 2, "not supported by the fake"),
        (["codex"], 2, "not supported by the fake"),
        (["opencode", "run", "--bogus", "x"], 1, "Unknown argument: bogus"),
        (["opencode", "run", "--format", "xml"], 1,
         'Argument: format, Given: "xml", Choices: "default", "json"'),
        (["opencode", "--port", "3", "run", "x"], 1, "Unknown argument: port"),
        (["opencode", "run"], 1, "You must provide a message or a command"),
        (["opencode", "serve"], 2, "not supported by the fake"),
        (["claude", "hi"], 2, "interactive mode"),
        (["claude", "doctor"], 2, "not supported by the fake"),
    ],
)  # fmt: skip
def test_flag_rejection(box, argv, code, message):
    proc = run(argv, box.work)
    assert proc.returncode == code, proc.stderr
    assert message in proc.stderr
    assert proc.stdout == ""


@pytest.mark.parametrize(
    "argv",
    [
        ["claude", "--print", "--output-format=json", "-d", "--verbose", "--", "Reply OK"],
        ["claude", "-p", "--model", "opus", "--add-dir", "/a", "/b", "--", "Reply OK"],
        ["gemini", "--prompt=Reply OK", "-yd", "--skip-trust", "--include-directories", "/a",
         "/b", "-o", "text"],
        ["gemini", "Reply OK", "--skip-trust", "--approval-mode", "yolo"],
        ["codex", "-a", "never", "-c", "model=x", "exec", "--skip-git-repo-check",
         "-oout.txt", "-s", "read-only", "Reply OK"],
        ["codex", "e", "--skip-git-repo-check", "-C", "/tmp", "-", "--ephemeral"],
        ["opencode", "--print-logs", "run", "--auto", "-m", "a/b", "--format=default"],
        ["opencode", "run", "--thinking", "--auto=false", "Reply"],
    ],
)  # fmt: skip
def test_flag_forms_accepted(box, argv):
    stdin = "Reply OK" if argv[0] in ("opencode", "codex") else None
    proc = run(argv, box.work, stdin=stdin)
    assert proc.returncode == 0, proc.stderr
    assert "OK" in proc.stdout


# ------------------------------------------------------------------------------ traps


def test_claude_root_trap_is_opt_in(box):
    box.task()
    assert box.run("claude").returncode == 0
    trapped = box.run("claude", env={"MALAMAR_FAKE_ROOT_TRAP": "1"})
    sandboxed = box.run("claude", env={"MALAMAR_FAKE_ROOT_TRAP": "1", "IS_SANDBOX": "1"})
    assert sandboxed.returncode == 0
    if os.geteuid() == 0:
        assert trapped.returncode == 1
        assert "--dangerously-skip-permissions cannot be used with root/sudo privileges" in (
            trapped.stderr
        )
        assert trapped.stdout == ""
    else:
        assert trapped.returncode == 0


def test_claude_stream_json_needs_verbose(box):
    box.task()
    argv = [a for a in box.argv("claude", stream=True) if a != "--verbose"]
    proc = box.run("claude", argv=argv)
    assert proc.returncode == 1
    assert "When using --print, --output-format=stream-json requires --verbose" in proc.stderr


def test_claude_without_skip_permissions_cannot_write(box):
    box.task(description="@fake invalid-json")
    argv = [a for a in box.argv("claude") if a != "--dangerously-skip-permissions"]
    final = json.loads(box.run("claude", argv=argv).stdout)
    assert final["permission_denials"][0]["tool_name"] == "Write"
    assert not box.output.exists()
    box.task(description="@fake comment structured is still fine")
    assert "structured_output" in json.loads(box.run("claude", argv=argv).stdout)


def test_claude_invalid_json_schema(box):
    argv = ["claude", "-p", "hi", "--json-schema", "{nope", "--output-format", "json"]
    assert run(argv, box.work).returncode == 1


def test_claude_waits_for_and_uses_piped_stdin(box):
    box.task(description="@fake comment x")
    proc = run_process(box.argv("claude"), box.work, stdin="extra context")  # a pipe
    assert json.loads(proc.stdout)["result"] == "OK"  # the prompt is no longer the task prompt


def test_gemini_needs_skip_trust(box):
    box.task()
    argv = [a for a in box.argv("gemini") if a != "--skip-trust"]
    proc = box.run("gemini", argv=argv)
    assert proc.returncode == 55
    assert "Gemini CLI is not running in a trusted directory" in proc.stderr
    trusted = box.run("gemini", argv=argv, env={"GEMINI_CLI_TRUST_WORKSPACE": "true"})
    assert trusted.returncode == 0


def test_gemini_cannot_write_outside_workspace(box):
    box.task(description="@fake comment x")
    argv = box.argv("gemini", stream=True)
    i = argv.index("--include-directories")
    del argv[i : i + 2]
    proc = box.run("gemini", argv=argv)
    assert proc.returncode == 0
    assert not box.output.exists()
    result = next(e for e in jsonl(proc.stdout) if e["type"] == "tool_result")
    assert result["status"] == "error"
    assert "Path not in workspace" in result["error"]["message"]


def test_gemini_without_yolo_has_no_write_tool(box):
    box.task()
    argv = [a for a in box.argv("gemini") if a != "--yolo"]
    proc = box.run("gemini", argv=argv)
    assert proc.returncode == 0
    assert not box.output.exists()


def test_codex_needs_git_repo_or_flag(box):
    box.task()
    argv = [a for a in box.argv("codex") if a != "--skip-git-repo-check"]
    proc = box.run("codex", argv=argv)
    assert proc.returncode == 1
    assert "Not inside a trusted directory and --skip-git-repo-check was not specified." in (
        proc.stderr
    )
    (box.work / ".git").mkdir()
    assert box.run("codex", argv=argv).returncode == 0


def test_codex_without_output_schema_writes_plain_text_to_o(box, tmp_path):
    box.task(description="@fake comment x")
    argv = [a for a in box.argv("codex") if a not in ("--output-schema", str(box.schema))]
    proc = box.run("codex", argv=argv)
    assert proc.returncode == 0
    assert box.output.read_text() == "Done: the result has been written."  # overwritten
    last = tmp_path / "last.txt"
    argv[argv.index("-o") + 1] = str(last)
    box.run("codex", argv=argv)
    assert json.loads(box.output.read_text())["actions"][0]["content"] == "x"
    assert last.read_text() == "Done: the result has been written."


def test_codex_missing_schema_file(box):
    box.task()
    box.schema.unlink()
    proc = box.run("codex")
    assert proc.returncode == 1
    assert "output schema" in proc.stderr


def test_codex_appends_piped_stdin(box):
    box.task(description="@fake comment x")
    proc = run_process(box.argv("codex"), box.work, stdin="more")  # a pipe
    assert proc.stdout.strip() == "OK"
    assert "<stdin>\nmore\n</stdin>" in proc.stderr


def test_opencode_quotes_arguments_with_spaces(box):
    box.task()
    proc = run(["opencode", "run", "--auto", box.prompt], box.work, stdin="")
    assert proc.stdout.strip() == "OK"
    assert not box.output.exists()
    words = box.prompt.split()
    proc = run(["opencode", "run", "--auto", *words], box.work, stdin="")
    assert json.loads(box.output.read_text()) == SKIP


def test_opencode_without_auto_rejects_outside_write(box):
    box.task(description="@fake comment x")
    proc = run(["opencode", "run", "--format", "json"], box.work, stdin=box.prompt)
    assert proc.returncode == 0
    assert not box.output.exists()
    tool = next(e for e in jsonl(proc.stdout) if e["type"] == "tool_use")
    assert tool["part"]["state"]["status"] == "error"
    assert "rejected permission" in tool["part"]["state"]["error"]


def test_parsing_ignores_lookalike_headings_in_description(box):
    box.task(
        description="## Comments\n## Activity Log\n@fake comment from-description\n# Task",
        comments=[comment("User", "no directive")],
    )
    result = box.result("claude", box.run("claude"))
    assert result["actions"][0]["content"] == "from-description"


@pytest.mark.parametrize("cli", ["claude", "codex"])
def test_work_streams_tool_activity_that_the_parsers_understand(box, cli):
    from runner.clis import cli_for
    from runner.streams import parse_line

    box.task(role="@fake work 1 comment hi")
    proc = box.run(cli, stream=True)
    parser = cli_for(cli).stream_parser()
    traces = [
        item
        for line in proc.stdout.splitlines()
        for item in parse_line(parser, line)
        if getattr(item, "kind", "") == "action"
    ]
    kinds = [trace.action_kind for trace in traces]
    assert "command" in kinds and "command-result" in kinds and "file-edit" in kinds
    assert any("pytest" in trace.text for trace in traces)


def test_file_directives_change_the_working_directory_then_act(box):
    (box.work / "old.txt").write_text("x\n")
    (box.work / "gone.txt").write_text("y\n")
    box.task(
        description="@fake write src/a.py print(1)\\nprint(2)\\s#\\n append src/a.py more"
        " rename old.txt new/old.txt delete gone.txt binary logo.png lines big.txt 3"
        " comment done"
    )
    proc = box.run("claude")
    assert box.result("claude", proc)["actions"][0]["content"] == "done"
    assert (box.work / "src" / "a.py").read_text() == "print(1)\nprint(2) #\nmore"
    assert (box.work / "new" / "old.txt").read_text() == "x\n"
    assert not (box.work / "old.txt").exists() and not (box.work / "gone.txt").exists()
    assert b"\0" in (box.work / "logo.png").read_bytes()
    assert (box.work / "big.txt").read_text() == "line 1\nline 2\nline 3\n"


@pytest.mark.parametrize("directive", ["write a.txt", "delete", "lines a.txt many",
                                       "write ../out.txt x", "rename /etc/x y"])  # fmt: skip
def test_bad_file_directives_fail_loudly(box, directive):
    box.task(description=f"@fake {directive}")
    proc = box.run("claude")
    assert proc.returncode == 99 and "bad directive" in proc.stderr
