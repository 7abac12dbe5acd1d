#!/bin/sh
# fmt: off
# /bin/sh runs the lines below; Python reads them as the module's docstring. They run this file
# as an imported module (compiled once, not at each of the thousands of CLI runs of a test
# session) on the `python3` in PATH, without site packages (the fake needs none).
"exec" "python3" "-S" "-c" \
"import os, sys; sys.argv.pop(0); "\
"sys.path[0] = os.path.dirname(os.path.realpath(sys.argv[0])); "\
"import fakecli; sys.exit(fakecli.entry())" "$0" "$@"
# fmt: on
# A fake of the four agent CLIs Malamar drives: claude, gemini, codex and opencode.
#
# One script, installed under the four names (symlinks in tests/fakes/bin); it dispatches on the
# name it was started as. It accepts exactly the flags of the real CLIs' --help (see
# shared/cli-samples/help), fails on others the way the real parser does (commander for claude,
# yargs for gemini and opencode, clap for codex), mimics the traps listed in shared/CLIS.md and
# prints output shaped like the captured samples.
#
# What the "model" does is scripted by `@fake ...` lines in Malamar's input file; see README.md in
# this folder. Pure standard library, Python >= 3.11.

from __future__ import annotations

import json
import os
import re
import select
import sys
import time

VERSIONS = {
    "claude": "2.1.197 (Claude Code)",
    "gemini": "0.61.0",
    "codex": "codex-cli 0.169.0",
    "opencode": "1.18.33",
}
TASK_PROMPT = re.compile(r"Read the file at (.+) and follow the instruction autonomously\.")
OUTPUT_LINE = re.compile(r"Write your response as JSON to: (\S+)")
AGENT_LINE = re.compile(r'You are the agent "(.+?)"')
DIRECTIVE_LINE = re.compile(r"^\s*@fake(?:\s+(?P<body>.*))?$")
BAD_DIRECTIVE_EXIT = 99
CLOSING_TEXT = "Done: the result has been written."


def Path(*parts):
    """pathlib.Path, imported at the first use: ~5 ms of each of the thousands of fake runs in
    a test session (of ~30 in all), and the version and health checks use none."""
    import pathlib

    return pathlib.Path(*parts)


def words(text: str) -> set[str]:
    return set(text.split())


# The standard library's dataclasses and uuid, as far as this file uses them: importing those
# (dataclasses imports inspect, ast, dis...; uuid imports platform) was ~8 ms of each of the
# thousands of fake runs in a test session.
class field:  # (dataclasses' name)
    def __init__(self, *, default_factory) -> None:
        self.default_factory = default_factory


def dataclass(cls=None, *, frozen: bool = False):
    """A class with __init__ (its annotated fields, in order, with their defaults), __repr__
    and __eq__; `frozen`: hashable too (not enforced read-only)."""

    def build(cls):
        names = list(vars(cls).get("__annotations__", {}))  # (not inspect's: see above)
        defaults = {name: cls.__dict__[name] for name in names if name in cls.__dict__}

        def __init__(self, *args, **kwargs):
            if len(args) > len(names):
                raise TypeError(f"{cls.__name__}: too many arguments")
            given = dict(zip(names, args, strict=False))
            for name, value in kwargs.items():
                if name not in names or name in given:
                    raise TypeError(f"{cls.__name__}: unexpected or repeated argument {name}")
                given[name] = value
            for name in names:
                if name in given:
                    value = given[name]
                elif name not in defaults:
                    raise TypeError(f"{cls.__name__}: missing argument {name}")
                elif isinstance(defaults[name], field):
                    value = defaults[name].default_factory()
                else:
                    value = defaults[name]
                object.__setattr__(self, name, value)

        def values(self):
            return tuple(getattr(self, name) for name in names)

        def __eq__(self, other):
            return (
                NotImplemented
                if other.__class__ is not self.__class__
                else (values(self) == values(other))
            )

        def __repr__(self):
            shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in names)
            return f"{cls.__name__}({shown})"

        for name, value in defaults.items():
            if isinstance(value, field):
                delattr(cls, name)
        cls.__init__, cls.__eq__, cls.__repr__ = __init__, __eq__, __repr__
        cls.__hash__ = (lambda self: hash(values(self))) if frozen else None
        return cls

    return build if cls is None else build(cls)


def uuid4() -> str:
    """A random (version 4) UUID, as str(uuid.uuid4()) writes it."""
    raw = bytearray(os.urandom(16))
    raw[6], raw[8] = raw[6] & 0x0F | 0x40, raw[8] & 0x3F | 0x80
    hexa = raw.hex()
    return f"{hexa[:8]}-{hexa[8:12]}-{hexa[12:16]}-{hexa[16:20]}-{hexa[20:]}"


class CliExit(Exception):
    """Stop with `code`, printing `message` to stderr."""

    def __init__(self, code: int, message: str = "") -> None:
        super().__init__(message)
        self.code = code
        self.message = message


# --------------------------------------------------------------------------------------------
# Option tables, transcribed from shared/cli-samples/help/*.txt. One option per line:
#   names  [metavar]  [= choice|choice]
# metavar: none = boolean flag; <x> = one value; <x...> or <x>... = one or more values;
# [x] = optional value (commander); yargs types: [boolean], [string] / [number] (value
# optional), [array] (zero or more values).
# --------------------------------------------------------------------------------------------

CLAUDE_OPTIONS = """
--add-dir <directories...>
--agent <agent>
--agents <json>
--allow-dangerously-skip-permissions
--allowedTools, --allowed-tools <tools...>
--append-system-prompt <prompt>
--ax-screen-reader
--bg, --background
--bare
--betas <betas...>
--brief
--chrome
-c, --continue
--dangerously-skip-permissions
-d, --debug [filter]
--debug-file <path>
--disable-slash-commands
--disallowedTools, --disallowed-tools <tools...>
--effort <level>
--exclude-dynamic-system-prompt-sections
--fallback-model <model>
--file <specs...>
--fork-session
--from-pr [value]
-h, --help
--ide
--include-hook-events
--include-partial-messages
--input-format <format> = text|stream-json
--json-schema <schema>
--max-budget-usd <amount>
--mcp-config <configs...>
--model <model>
-n, --name <name>
--no-chrome
--no-session-persistence
--output-format <format> = text|json|stream-json
--permission-mode <mode> = acceptEdits|auto|bypassPermissions|default|dontAsk|plan
--plugin-dir <path>
--plugin-url <url>
-p, --print
--prompt-suggestions [value] = true|false|1|0|yes|no|on|off
--remote-control [name]
--remote-control-session-name-prefix <prefix>
--replay-user-messages
-r, --resume [value]
--safe-mode
--session-id <uuid>
--setting-sources <sources>
--settings <file-or-json>
--strict-mcp-config
--system-prompt <prompt>
--tmux
--tools <tools...>
--verbose
-v, --version
-w, --worktree [name]
"""
CLAUDE_COMMANDS = words(
    """
agents auth auto-mode doctor gateway help install mcp plugin plugins project
setup-token ultrareview update upgrade
"""
)

GEMINI_OPTIONS = """
-d, --debug [boolean]
-m, --model [string]
-p, --prompt [string]
-i, --prompt-interactive [string]
--skip-trust [boolean]
-w, --worktree [string]
-s, --sandbox [boolean]
-y, --yolo [boolean]
--approval-mode [string] = default|auto_edit|yolo|plan
--policy [array]
--admin-policy [array]
--acp [boolean]
--experimental-acp [boolean]
--allowed-mcp-server-names [array]
--allowed-tools [array]
-e, --extensions [array]
-l, --list-extensions [boolean]
-r, --resume [string]
--session-file [string]
--session-id [string]
--list-sessions [boolean]
--delete-session [string]
--include-directories [array]
--screen-reader [boolean]
-o, --output-format [string] = text|json|stream-json
--raw-output [boolean]
--accept-raw-output-risk [boolean]
-v, --version [boolean]
-h, --help [boolean]
"""
GEMINI_COMMANDS = words(
    """
mcp extensions extension skills skill hooks hook gemma
"""
)

_CODEX_SHARED = """
-c, --config <key=value>
--enable <FEATURE>
--disable <FEATURE>
--strict-config
-i, --image <FILE>...
-m, --model <MODEL>
--oss
--local-provider <OSS_PROVIDER>
-p, --profile <CONFIG_PROFILE_V2>
-s, --sandbox <SANDBOX_MODE> = read-only|workspace-write|danger-full-access
--approve-for-me
--dangerously-bypass-approvals-and-sandbox
--dangerously-bypass-hook-trust
-C, --cd <DIR>
--worktree
--add-dir <DIR>
-h, --help
-V, --version
"""
CODEX_OPTIONS = (
    _CODEX_SHARED
    + """
--remote <ADDR>
--remote-auth-token-env <ENV_VAR>
-a, --ask-for-approval <APPROVAL_POLICY> = on-request|never
--search
--no-alt-screen
--no-daemon
"""
)
CODEX_EXEC_OPTIONS = (
    _CODEX_SHARED
    + """
--thread-source <SOURCE>
--cyber-access-program <PROGRAM> = standard|daybreak_blue|daybreak_red
--skip-git-repo-check
--trust
--ephemeral
--ignore-user-config
--ignore-rules
--output-schema <FILE>
--color <COLOR> = always|never|auto
--json
-o, --output-last-message <FILE>
"""
)
CODEX_COMMANDS = words(
    """
agents exec e review login logout mcp plugin app-server remote-control
completion update doctor sandbox debug apply a resume queue archive delete
migrate-rollouts migrate-nfs-db unarchive fork cloud exec-server features help
"""
)
CODEX_EXEC_COMMANDS = {"resume", "fork", "review", "help"}

OPENCODE_GLOBAL_OPTIONS = """
-h, --help [boolean]
-v, --version [boolean]
--print-logs [boolean]
--log-level [string] = DEBUG|INFO|WARN|ERROR
--pure [boolean]
"""
OPENCODE_RUN_OPTIONS = (
    OPENCODE_GLOBAL_OPTIONS
    + """
--command [string]
-c, --continue [boolean]
-s, --session [string]
--fork [boolean]
--share [boolean]
-m, --model [string]
--agent [string]
--format [string] = default|json
-f, --file [array]
--title [string]
--attach [string]
-p, --password [string]
-u, --username [string]
--dir [string]
--port [number]
--variant [string]
--thinking [boolean]
-i, --interactive [boolean]
--auto [boolean]
"""
)
OPENCODE_COMMANDS = words(
    """
completion acp mcp attach run debug providers auth agent upgrade uninstall serve
web models stats export import github pr session plugin plug db
"""
)


@dataclass(frozen=True)
class Opt:
    names: tuple[str, ...]
    arity: str  # "flag" | "one" | "optional" | "many"
    metavar: str = ""
    choices: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        return self.names[-1].lstrip("-")

    @property
    def long(self) -> str:
        return self.names[-1]


def option_table(text: str) -> dict[str, Opt]:
    """Map every option name of a table (see above) to its Opt."""
    table: dict[str, Opt] = {}
    for line in filter(str.strip, text.splitlines()):
        decl, _, choices = line.partition(" = ")
        tokens = decl.replace(",", " ").split()
        names = [t for t in tokens if t.startswith("-")]
        metavar = "" if tokens[-1].startswith("-") else tokens[-1]
        opt = Opt(tuple(names), _arity(metavar), metavar, tuple(c for c in choices.split("|") if c))
        table.update(dict.fromkeys(names, opt))
    return table


def _arity(metavar: str) -> str:
    if metavar in ("", "[boolean]"):
        return "flag"
    if metavar == "[array]" or "..." in metavar:
        return "many"
    return "optional" if metavar.startswith("[") else "one"


# --------------------------------------------------------------------------------------------
# Parser error flavours: the messages and exit codes of each CLI's argument library.
# --------------------------------------------------------------------------------------------


def _suggest(arg: str, table: dict[str, Opt]) -> str | None:
    longs = {name[2:]: name for name in table if name.startswith("--")}
    wanted = arg.split("=")[0].lstrip("-")
    import difflib  # (here: imported at every run, it would cost each one milliseconds)

    close = difflib.get_close_matches(wanted, sorted(longs), n=1, cutoff=0.75)
    return longs[close[0]] if close else None


class Commander:
    """Claude Code (commander.js): exit 1, `error: ...`."""

    hyphen_values = True  # a required option-argument may start with "-"
    empty_many_ok = False
    bool_values = False  # --flag=true
    optional_default: object = True

    def _label(self, opt: Opt) -> str:
        return f"{', '.join(opt.names)} {opt.metavar}"

    def unknown(self, arg: str, table: dict[str, Opt]) -> CliExit:
        hint = _suggest(arg, table)
        suffix = f"\n(Did you mean {hint}?)" if hint else ""
        return CliExit(1, f"error: unknown option '{arg}'{suffix}")

    def missing(self, opt: Opt) -> CliExit:
        return CliExit(1, f"error: option '{self._label(opt)}' argument missing")

    def bad_choice(self, opt: Opt, value: str) -> CliExit:
        allowed = ", ".join(opt.choices)
        return CliExit(
            1,
            f"error: option '{self._label(opt)}' argument '{value}' is invalid. "
            f"Allowed choices are {allowed}.",
        )

    def flag_value(self, opt: Opt, value: str, table: dict[str, Opt]) -> CliExit:
        return self.unknown(f"{opt.long}={value}", table)

    def too_many(self, positionals: list[str], expected: int) -> CliExit:
        plural = "" if expected == 1 else "s"
        return CliExit(
            1,
            f"error: too many arguments. Expected {expected} argument{plural} "
            f"but got {len(positionals)}.",
        )


class Yargs:
    """Gemini CLI and OpenCode (yargs, strict): usage, blank line, message; exit 1."""

    hyphen_values = False
    empty_many_ok = True
    bool_values = True
    optional_default: object = ""

    def __init__(self, usage: str) -> None:
        self.usage = usage

    def _fail(self, message: str) -> CliExit:
        return CliExit(1, f"{self.usage}\n\n{message}")

    def unknown(self, arg: str, table: dict[str, Opt]) -> CliExit:
        return self._fail(f"Unknown argument: {arg.lstrip('-').split('=')[0]}")

    def missing(self, opt: Opt) -> CliExit:
        return self._fail(f"Not enough arguments following: {opt.key}")

    def bad_choice(self, opt: Opt, value: str) -> CliExit:
        choices = ", ".join(f'"{c}"' for c in opt.choices)
        return self._fail(
            f'Invalid values:\n  Argument: {opt.key}, Given: "{value}", Choices: {choices}'
        )

    def flag_value(self, opt: Opt, value: str, table: dict[str, Opt]) -> CliExit:
        return self._fail(f'Invalid value for boolean {opt.key}: "{value}"')


class Clap:
    """Codex CLI (clap): exit 2, `error: ...` plus usage and a --help hint."""

    hyphen_values = False
    empty_many_ok = False
    bool_values = False
    optional_default: object = True
    more = "For more information, try '--help'."

    def __init__(self, usage: str) -> None:
        self.usage = usage

    def _label(self, opt: Opt) -> str:
        return f"{opt.long} {opt.metavar}"

    def unknown(self, arg: str, table: dict[str, Opt]) -> CliExit:
        hint = _suggest(arg, table)
        tip = (
            f"  tip: a similar argument exists: '{hint}'"
            if hint
            else f"  tip: to pass '{arg}' as a value, use '-- {arg}'"
        )
        return CliExit(
            2, f"error: unexpected argument '{arg}' found\n\n{tip}\n\n{self.usage}\n\n{self.more}"
        )

    def missing(self, opt: Opt) -> CliExit:
        return CliExit(
            2,
            f"error: a value is required for '{self._label(opt)}' but none was supplied"
            f"\n\n{self.more}",
        )

    def bad_choice(self, opt: Opt, value: str) -> CliExit:
        return CliExit(
            2,
            f"error: invalid value '{value}' for '{self._label(opt)}'\n"
            f"  [possible values: {', '.join(opt.choices)}]\n\n{self.more}",
        )

    def flag_value(self, opt: Opt, value: str, table: dict[str, Opt]) -> CliExit:
        return CliExit(
            2,
            f"error: unexpected value '{value}' for '{opt.long}' found; no more were expected"
            f"\n\n{self.usage}\n\n{self.more}",
        )

    def too_many(self, positionals: list[str], expected: int) -> CliExit:
        return CliExit(
            2,
            f"error: unexpected argument '{positionals[expected]}' found"
            f"\n\n{self.usage}\n\n{self.more}",
        )


Flavour = Commander | Yargs | Clap


@dataclass
class Parsed:
    opts: dict[str, object] = field(default_factory=dict)
    positionals: list[str] = field(default_factory=list)
    rest: list[str] = field(default_factory=list)  # what follows a subcommand name
    every: dict[str, list] = field(default_factory=dict)  # each value of a repeated option

    def has(self, key: str) -> bool:
        return bool(self.opts.get(key))

    def get(self, key: str, default: object = None) -> object:
        return self.opts.get(key, default)


def parse_args(
    args: list[str],
    table: dict[str, Opt],
    flavour: Flavour,
    *,
    stop_at_positional: bool = False,
) -> Parsed:
    """Parse like the CLI's own library; greedy multi-value options included (a real trap:
    `--add-dir DIR PROMPT` swallows the prompt)."""
    parsed = Parsed()
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        if arg == "--":
            parsed.positionals += args[i:]
            break
        if arg.startswith("--"):
            name, eq, inline = arg.partition("=")
            if name not in table:
                raise flavour.unknown(arg, table)
            i = _take(parsed, table[name], inline if eq else None, args, i, flavour, table)
        elif arg.startswith("-") and len(arg) > 1:
            i = _take_short(parsed, arg, args, i, flavour, table)
        else:
            parsed.positionals.append(arg)
            if stop_at_positional:
                parsed.rest = args[i:]
                break
    return parsed


def _take_short(
    parsed: Parsed, arg: str, args: list[str], i: int, flavour: Flavour, table: dict[str, Opt]
) -> int:
    """A cluster of short options: `-p`, `-yd`, `-oFILE`, `-o=FILE`."""
    for j in range(1, len(arg)):
        name = "-" + arg[j]
        opt = table.get(name)
        if opt is None:
            raise flavour.unknown(name, table)
        if opt.arity != "flag":
            inline = arg[j + 1 :].removeprefix("=") or None
            return _take(parsed, opt, inline, args, i, flavour, table)
        parsed.opts[opt.key] = True
    return i


def _take(
    parsed: Parsed,
    opt: Opt,
    inline: str | None,
    args: list[str],
    i: int,
    flavour: Flavour,
    table: dict[str, Opt],
) -> int:
    """Store one option (and consume its values); return the index of the next argument."""
    if opt.arity == "flag":
        if inline is None or (flavour.bool_values and inline == "true"):
            parsed.opts[opt.key] = True
        elif flavour.bool_values and inline == "false":
            parsed.opts.pop(opt.key, None)
        else:
            raise flavour.flag_value(opt, inline, table)
        return i
    if opt.arity == "many":
        values = [] if inline is None else [inline]
        while inline is None and i < len(args) and not args[i].startswith("-"):
            values.append(args[i])
            i += 1
        if not values and not flavour.empty_many_ok:
            raise flavour.missing(opt)
        for value in values:
            _check_choice(opt, value, flavour)
        parsed.opts.setdefault(opt.key, []).extend(values)
        return i
    next_ok = i < len(args) and (
        not args[i].startswith("-") or (flavour.hyphen_values and opt.arity == "one")
    )
    if inline is not None:
        value: object = inline
    elif next_ok:
        value = args[i]
        i += 1
    elif opt.arity == "optional":
        value = flavour.optional_default
    else:
        raise flavour.missing(opt)
    if isinstance(value, str):
        _check_choice(opt, value, flavour)
    parsed.opts[opt.key] = value
    parsed.every.setdefault(opt.key, []).append(value)  # codex: `-c a=1 -c b=2` sets both
    return i


def _check_choice(opt: Opt, value: str, flavour: Flavour) -> None:
    if opt.choices and value not in opt.choices:
        raise flavour.bad_choice(opt, value)


# --------------------------------------------------------------------------------------------
# Malamar's input file
# --------------------------------------------------------------------------------------------


@dataclass
class InputDoc:
    chat: bool
    agent: str | None
    output_path: str | None
    role: list[str]
    description: list[str]
    comments: list[dict]
    history: list[dict]


def load_input(path: Path) -> InputDoc | None:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    lines = [line.rstrip() for line in text.splitlines()]
    outputs = OUTPUT_LINE.findall(text)
    agent = AGENT_LINE.search(text)
    return InputDoc(
        chat=path.name.startswith("malamar_chat_")
        or text.lstrip().startswith("# Malamar Chat Context"),
        agent=agent.group(1) if agent else None,
        output_path=outputs[-1].strip("`'\"").rstrip(".") if outputs else None,
        role=_role_section(lines),
        description=_description_section(lines),
        comments=_jsonl_block(lines, "## Comments"),
        history=_jsonl_block(lines, "## Conversation History"),
    )


def _find(lines: list[str], heading: str, start: int = 0, last: bool = False) -> int | None:
    hits = [i for i in range(start, len(lines)) if lines[i] == heading]
    if not hits:
        return None
    return hits[-1] if last else hits[0]


def _role_section(lines: list[str]) -> list[str]:
    start = _find(lines, "# Your Role")
    if start is None:
        return []
    ends = ("## Other Agents in This Workflow", "# Task", "# Output Instruction")
    stops = [i for h in ends if (i := _find(lines, h, start + 1)) is not None]
    return lines[start + 1 : min(stops, default=len(lines))]


def _description_section(lines: list[str]) -> list[str]:
    """From `## Description` to the real `## Comments` (the last one: a description may hold
    any markdown, but comment and activity blocks are JSON lines)."""
    task = _find(lines, "# Task") or 0
    start = _find(lines, "## Description", task)
    if start is None:
        return []
    ends = ("## Comments", "## Activity Log", "# Output Instruction")
    stops = [i for h in ends if (i := _find(lines, h, start + 1, last=True)) is not None]
    return lines[start + 1 : min(stops, default=len(lines))]


def _jsonl_block(lines: list[str], heading: str) -> list[dict]:
    start = _find(lines, heading, last=True)
    if start is None:
        return []
    records = []
    for line in lines[start + 1 :]:
        if line.startswith("#"):
            break
        if line.lstrip().startswith("{"):
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(record, dict):
                records.append(record)
    return records


# --------------------------------------------------------------------------------------------
# Directives: `@fake [Agent:] ACTION ARGS`
# --------------------------------------------------------------------------------------------

TASK_ACTIONS = {
    "skip",
    "comment",
    "comment-once",
    "review",
    "in_review",
    "unknown-action",
    "mcp-config",
    "mcp-create-task",
}
CHAT_ACTIONS = {"reply", "action"}
COMMON_ACTIONS = {"invalid-json", "empty-file", "no-file", "exit", "json", "nested", "limit"}
# Do something, then the rest of the directive.
PREFIX_ACTIONS = {"sleep", "hold", "grandchild", "flood", "work", "nul"}
# File steps, chainable like the prefix actions: they change the working directory (cwd).
# Each argument is one word; in TEXT `\\n` is a line break and `\\s` a space.
FILE_STEPS = {
    "write": 2,
    "append": 2,
    "lines": 2,
    "rename": 2,
    "delete": 1,
    "binary": 1,
    "fix": 4,
}
ALL_ACTIONS = TASK_ACTIONS | CHAT_ACTIONS | COMMON_ACTIONS | PREFIX_ACTIONS | set(FILE_STEPS)
NEEDS_TEXT = {"comment", "comment-once", "review", "reply", "action", "json", "mcp-create-task"}
NO_ARGS = {
    "skip",
    "in_review",
    "unknown-action",
    "invalid-json",
    "empty-file",
    "no-file",
    "mcp-config",
}


class DirectiveError(Exception):
    pass


@dataclass(frozen=True)
class Directive:
    agent: str | None
    # (a PREFIX_ACTIONS name, number) or (file step, (word, ...))
    steps: tuple[tuple[str, object], ...]
    action: str | None  # None: nothing after the steps
    args: str

    def addressed_to(self, agent: str | None) -> bool:
        if self.agent is None:
            return True
        return agent is not None and self.agent.casefold() == agent.strip().casefold()

    def fits(self, actions: set[str]) -> bool:
        return self.action is None or self.action in actions


def parse_directive(body: str) -> Directive:
    """Parse what follows `@fake`. A first word that is an action means "no agent prefix"."""
    agent = None
    first, _ = _first_word(body)
    if first not in ALL_ACTIONS and ":" in body:
        agent, body = (part.strip() for part in body.split(":", 1))
    if not body.strip():
        raise DirectiveError("missing action")
    steps, action, args = _unchain(body)
    return Directive(agent, tuple(steps), action, args)


def _first_word(text: str) -> tuple[str, str]:
    parts = text.split(maxsplit=1)
    return (parts[0] if parts else ""), (parts[1].strip() if len(parts) > 1 else "")


def _unchain(body: str) -> tuple[list[tuple[str, float]], str | None, str]:
    """`sleep 1 grandchild 2 comment hi` -> steps [(sleep, 1), (grandchild, 2)], comment, hi."""
    steps: list[tuple[str, object]] = []
    action, args = _first_word(body)
    while action in PREFIX_ACTIONS or action in FILE_STEPS:
        if action in FILE_STEPS:
            words_, rest = _file_args(action, args)
            steps.append((action, words_))
        else:
            number, rest = _first_word(args)
            steps.append((action, _number(action, number)))
        action, args = _first_word(rest)
    if not action:
        return steps, None, ""
    if action not in ALL_ACTIONS:
        raise DirectiveError(f"unknown action {action!r}")
    _check_args(action, args)
    return steps, action, args


def _file_args(action: str, text: str) -> tuple[tuple[str, ...], str]:
    """The words a file step takes, and the rest of the directive."""
    parts = text.split(maxsplit=FILE_STEPS[action])
    if len(parts) < FILE_STEPS[action]:
        raise DirectiveError(f"{action} needs {FILE_STEPS[action]} argument(s)")
    taken = tuple(parts[: FILE_STEPS[action]])
    if any(Path(word).is_absolute() or ".." in Path(word).parts for word in taken[:1]):
        raise DirectiveError(f"{action} needs a relative path inside the working directory")
    if action == "lines" and not taken[1].isdigit():
        raise DirectiveError(f"lines needs a count, got {taken[1]!r}")
    rest = parts[FILE_STEPS[action]] if len(parts) > FILE_STEPS[action] else ""
    return taken, rest


def _unescape(text: str) -> str:
    return text.replace("\\n", "\n").replace("\\s", " ")


def file_step(kind: str, args: tuple[str, ...]) -> None:
    """Change the working directory like an agent editing code would."""
    path = Path(os.getcwd(), args[0])
    if kind in ("write", "append", "lines", "binary"):
        path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "write":
        path.write_text(_unescape(args[1]))
    elif kind == "append":
        with path.open("a") as f:
            f.write(_unescape(args[1]))
    elif kind == "lines":
        path.write_text("".join(f"line {n}\n" for n in range(1, int(args[1]) + 1)))
    elif kind == "binary":
        path.write_bytes(bytes(range(256)) * 4)
    elif kind == "rename":
        target = Path(os.getcwd(), args[1])
        target.parent.mkdir(parents=True, exist_ok=True)
        path.rename(target)
    elif kind == "delete":
        path.unlink()


def _number(action: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise DirectiveError(f"{action} needs a number, got {text!r}") from None
    if value < 0:
        raise DirectiveError(f"{action} needs a number >= 0")
    return value


def _check_args(action: str, args: str) -> None:
    if action in NEEDS_TEXT and not args:
        raise DirectiveError(f"{action} needs an argument")
    if action in NO_ARGS and args:
        raise DirectiveError(f"{action} takes no argument, got {args!r}")
    if action == "exit":
        code = args.split(maxsplit=1)[0] if args else ""
        if not code.lstrip("-").isdigit():
            raise DirectiveError(f"exit needs an exit code, got {code!r}")
    if action == "limit" and args and not args.isdigit():
        raise DirectiveError(f"limit takes a reset time in epoch seconds, got {args!r}")
    if action == "nested" and not (args.isdigit() and int(args) > 0):
        raise DirectiveError(f"nested needs a depth (a whole number > 0), got {args!r}")
    if action == "action":
        try:
            value = json.loads(args)
        except json.JSONDecodeError as exc:
            raise DirectiveError(f"action needs a JSON object: {exc}") from None
        if not isinstance(value, dict):
            raise DirectiveError("action needs a JSON object")


def directives_in(lines: list[str], where: str) -> list[Directive]:
    found = []
    for line in lines:
        match = DIRECTIVE_LINE.match(line)
        if not match:
            continue
        try:
            found.append(parse_directive(match.group("body") or ""))
        except DirectiveError as exc:
            raise CliExit(
                BAD_DIRECTIVE_EXIT, f"fakecli: bad directive in {where}: {line.strip()!r}: {exc}"
            ) from None
    return found


def default_directive() -> Directive | None:
    text = os.environ.get("MALAMAR_FAKE_DEFAULT", "").strip()
    if not text:
        return None
    lines = [text if text.startswith("@fake") else f"@fake {text}"]
    return directives_in(lines, "MALAMAR_FAKE_DEFAULT")[0]


# --------------------------------------------------------------------------------------------
# Plans: what the "model" does for one input file
# --------------------------------------------------------------------------------------------


@dataclass
class Outcome:
    kind: str  # "result": a JSON value; "file": raw file content; "none": no output file
    value: object = None
    nested: int = 0  # `nested N`: also print one stream line nested N levels deep

    def file_content(self) -> str:
        return json.dumps(self.value, indent=2) if self.kind == "result" else str(self.value)


def nested_json(depth: int) -> str:
    """A JSON array nested `depth` levels deep (built as text: json.dumps would recurse)."""
    return "[" * depth + "]" * depth


@dataclass
class Plan:
    steps: list[tuple[str, float]]
    outcome: Outcome | None = None
    exit: tuple[int, str] | None = None
    limit: str | None = None  # `limit [EPOCH]`: the CLI's usage-limit output


# `limit`: each CLI's recorded usage-limit output (tests/fixtures/limits/), without a reset time
# or with one (EPOCH written in the CLI's own way: an epoch, a local clock time, a duration or a
# retry-after header).
LIMIT_FIXTURES = os.path.join(
    os.path.dirname(os.path.realpath(__file__)), "..", "fixtures", "limits"
)
LIMIT_SAMPLES = {
    "claude": ("claude_api_429", "claude_usage_limit_epoch"),
    "codex": ("codex_quota_exceeded", "codex_usage_limit_at"),
    "gemini": ("gemini_resource_exhausted_plain", "gemini_capacity_reset_after"),
    "opencode": ("opencode_rate_limit_exceeded", "opencode_429_retry_after"),
}


def _ordinal(day: int) -> str:
    suffix = "th" if 10 <= day % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(day % 10, "th")
    return f"{day}{suffix}"


def limit_output(cli: str, reset: str) -> tuple[str, str, int]:
    """(stdout, stderr, exit code) of `cli` out of quota, resetting at epoch `reset` if given."""
    untimed, timed = LIMIT_SAMPLES[cli]
    sample = json.loads(Path(LIMIT_FIXTURES, f"{timed if reset else untimed}.json").read_text())
    stdout, stderr = sample["stdout"], sample["stderr"]
    if reset:
        at = int(reset)
        seconds = max(0, at - int(time.time()))
        from datetime import datetime  # (here: see Path)

        local = datetime.fromtimestamp(at).astimezone()
        codex_at = f"{local:%b} {_ordinal(local.day)}, {local:%Y} {local:%-I:%M %p}"
        hms = f"{seconds // 3600}h{seconds % 3600 // 60}m{seconds % 60}s"
        stdout = re.sub(r"\|\d{9,12}", f"|{at}", stdout)
        stdout = re.sub(r"try again at [^.]+ [AP]M", f"try again at {codex_at}", stdout)
        stdout = re.sub(r"reset after \w+\.", f"reset after {hms}.", stdout)
        stdout = re.sub(r'"retry-after": ?"\d+"', f'"retry-after": "{seconds}"', stdout)
    return stdout, stderr, sample["exit_code"]


def _actions(*actions: dict) -> Outcome:
    return Outcome("result", {"actions": list(actions)})


def _common_terminal(directive: Directive) -> tuple[Outcome | None, tuple[int, str] | None]:
    match directive.action:
        case "invalid-json":
            return Outcome("file", "{not json"), None
        case "empty-file":
            return Outcome("file", ""), None
        case "no-file":
            return Outcome("none"), None
        case "json":
            return Outcome("file", directive.args), None
        case "nested":
            depth = int(directive.args)
            return Outcome("file", nested_json(depth), nested=depth), None
        case "exit":
            code, text = _first_word(directive.args)
            return None, (int(code), text)
    raise AssertionError(directive.action)


@dataclass(frozen=True)
class McpSeen:
    """The MCP servers this run of `cli` was given (mcp_servers_seen)."""

    cli: str = ""
    servers: dict = field(default_factory=dict)


def task_plan(doc: InputDoc, mcp: McpSeen | None = None) -> Plan:
    sources = [
        *directives_in(doc.role, "the agent instruction"),
        *directives_in(doc.description, "the task description"),
    ]
    for comment in doc.comments:
        lines = str(comment.get("content", "")).splitlines()
        sources += directives_in(lines, f"a comment by {comment.get('author')!r}")
    allowed = TASK_ACTIONS | COMMON_ACTIONS
    usable = [d for d in sources if d.addressed_to(doc.agent) and d.fits(allowed)]
    default = default_directive()
    if not usable and default and default.fits(allowed):
        usable = [default]
    chosen = usable[-1] if usable else Directive(None, (), "skip", "")
    plan = Plan([_fixed(step, doc) for step in chosen.steps])
    if chosen.action == "limit":
        plan.limit = chosen.args
    elif chosen.action in COMMON_ACTIONS:
        plan.outcome, plan.exit = _common_terminal(chosen)
    else:
        plan.outcome = _task_outcome(chosen, doc, mcp or McpSeen())
    return plan


def _fixed(step: tuple[str, object], doc: InputDoc) -> tuple[str, object]:
    """`fix PATH BAD GOOD MARKER` is a `write` of GOOD once a comment by "Checks" in the input
    holds MARKER (the failing check's output reached the agent), else of BAD."""
    kind, args = step
    if kind != "fix":
        return step
    path, bad, good, marker = args
    seen = any(
        c.get("author") == "Checks" and _unescape(marker) in str(c.get("content", ""))
        for c in doc.comments
    )
    return "write", (path, good if seen else bad)


def _task_outcome(directive: Directive, doc: InputDoc, mcp: McpSeen) -> Outcome:
    text = directive.args
    in_review = {"type": "change_status", "status": "in_review"}
    match directive.action:
        case "comment":
            return _actions({"type": "comment", "content": text})
        case "comment-once":
            said = any(
                c.get("author") == doc.agent and c.get("content") == text for c in doc.comments
            )
            return _actions({"type": "skip"} if said else {"type": "comment", "content": text})
        case "review":
            return _actions({"type": "comment", "content": text}, in_review)
        case "in_review":
            return _actions(in_review)
        case "unknown-action":
            return _actions({"type": "launch_missiles"})
        case "mcp-config":  # once, as comment-once: a pass that only skips ends the loop
            text = describe_mcp(mcp.servers) or "mcp: none"
            said = any(
                c.get("author") == doc.agent and c.get("content") == text for c in doc.comments
            )
            return _actions({"type": "skip"} if said else {"type": "comment", "content": text})
        case "mcp-create-task":  # through the run's server, as a model calling its tool
            server = mcp.servers.get("malamar")
            if server is None:
                raise CliExit(1, "fakecli: mcp-create-task: no malamar MCP server configured")
            summary = f"{text} ({mcp.cli})"
            call_mcp_tool(server, mcp.cli, "create_task", {"summary": summary})
    return _actions({"type": "skip"})


def chat_plan(doc: InputDoc) -> Plan:
    """Directives of the last user message all apply, in order: `reply` sets the message,
    each `action` adds one, steps accumulate, the last exit/file directive wins."""
    users = [m for m in doc.history if m.get("role") == "user"]
    lines = str(users[-1].get("content", "")).splitlines() if users else []
    allowed = CHAT_ACTIONS | COMMON_ACTIONS
    found = directives_in(lines, "the last user message")
    usable = [d for d in found if d.addressed_to(doc.agent) and d.fits(allowed)]
    default = default_directive()
    if not usable and default and default.fits(allowed):
        usable = [default]
    plan = Plan([])
    message, actions = "OK", []
    for directive in usable:
        plan.steps += directive.steps
        if directive.action == "reply":
            message = directive.args
        elif directive.action == "action":
            actions.append(json.loads(directive.args))
        elif directive.action == "limit":
            plan.limit = directive.args
        elif directive.action is not None:
            plan.outcome, plan.exit = _common_terminal(directive)
    if plan.outcome is None and plan.exit is None and plan.limit is None:
        plan.outcome = Outcome("result", {"message": message, "actions": actions})
    return plan


def run_step(step: tuple[str, object], emitter: Emitter) -> None:
    kind, number = step
    if kind in FILE_STEPS:
        file_step(kind, number)
    elif kind == "work":
        for _ in range(int(number)):
            emitter.work()
    elif kind == "sleep":
        time.sleep(number)
    elif kind == "hold":
        hold(Path(os.getcwd(), RELEASE_FILE), number)
    elif kind == "grandchild":
        import subprocess

        child = subprocess.Popen(
            [sys.executable, "-c", "import sys, time; time.sleep(float(sys.argv[1]))", str(number)],
            stdin=subprocess.DEVNULL,
        )
        # Written whole, then renamed: a test that sees the file can read the pid.
        partial = Path(os.getcwd(), "grandchild.pid.partial")
        partial.write_text(f"{child.pid}\n")
        os.replace(partial, Path(os.getcwd(), "grandchild.pid"))
        time.sleep(number)
    elif kind == "flood":
        flood_stdout(int(number * 1024 * 1024))
    elif kind == "nul":
        print_nul_lines(int(number))


RELEASE_FILE = "release"


def hold(release: Path, limit: float) -> None:
    """Wait until the test creates `release` (then take it, so the next hold waits for a new
    one), at most `limit` seconds: a test lets the CLI go on when it has seen what it wanted."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        try:
            release.unlink()
            return
        except FileNotFoundError:
            time.sleep(0.05)


def print_nul_lines(count: int) -> None:
    """`count` lines holding NUL bytes on stdout and on stderr (PostgreSQL refuses NUL in text:
    Malamar must drop them wherever it keeps what a CLI printed)."""
    sys.stdout.flush()
    sys.stderr.flush()
    for n in range(1, count + 1):
        sys.stdout.buffer.write(b"out\x00put " + str(n).encode() + b"\n")
        sys.stderr.buffer.write(b"err\x00or " + str(n).encode() + b"\n")
    sys.stdout.buffer.flush()
    sys.stderr.buffer.flush()


def flood_stdout(size: int) -> None:
    """Write `size` bytes of junk lines to stdout, chunk by chunk."""
    chunk = (b"x" * 1023 + b"\n") * 64
    out = sys.stdout.buffer
    sys.stdout.flush()
    for _ in range(size // len(chunk)):
        out.write(chunk)
    if tail := size % len(chunk):
        out.write(chunk[: tail - 1] + b"\n")  # end on a line break: later lines stay lines
    out.flush()


# --------------------------------------------------------------------------------------------
# Output: one emitter per CLI, shaped like shared/cli-samples
# --------------------------------------------------------------------------------------------


def _now_iso() -> str:
    """UTC, to the millisecond: 2026-01-31T12:00:00.123Z (without datetime's import: see Path)."""
    now = time.time()
    return f"{time.strftime('%Y-%m-%dT%H:%M:%S', time.gmtime(now))}.{int(now * 1000) % 1000:03d}Z"


def _now_ms() -> int:
    return int(time.time() * 1000)


def _id(prefix: str = "") -> str:
    return prefix + uuid4().replace("-", "")[:24]


def _up_from(folder: str) -> list[str]:
    """`folder` and each folder above it (an absolute path's; pathlib's `parents`)."""
    folders = [folder]
    while os.path.dirname(folders[-1]) != folders[-1]:
        folders.append(os.path.dirname(folders[-1]))
    return folders


def _inside(path: Path, folders: list[Path]) -> bool:
    target = path.resolve()
    return any(target.is_relative_to(folder.resolve()) for folder in folders)


class Emitter:
    """Prints one CLI's output. `start` (idempotent) prints a stream's opening lines, `reply`
    answers without touching files, `deliver` acts out an Outcome."""

    streaming = False

    def __init__(self, inv: Invocation) -> None:
        self.inv = inv
        self.session = uuid4()
        self.started = False

    def start(self) -> None:
        if self.streaming and not self.started:
            self.opening()
        self.started = True

    def opening(self) -> None:
        pass

    def reply(self, text: str) -> None:
        raise NotImplementedError

    def work(self) -> None:
        """One round of streamed tool activity (`work N`): run tests, read and edit a file.
        Only streaming emitters that model tools print anything."""

    def deliver(self, outcome: Outcome, path: str | None) -> None:
        raise NotImplementedError

    def refusal(self, path: Path) -> str | None:
        """Why the CLI's file tool would refuse to write `path` (None: it writes)."""
        return None

    def write_file(self, path: str | None, content: str) -> str | None:
        """Write like the CLI's file tool; return the tool's error text if it refuses."""
        if not path:
            return "No output path found in the input file."
        target = Path(path)
        refusal = self.refusal(target)
        if refusal:
            return refusal
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content, encoding="utf-8")
        return None

    @staticmethod
    def emit(event: dict) -> None:
        sys.stdout.write(json.dumps(event, ensure_ascii=False, separators=(",", ":")) + "\n")
        sys.stdout.flush()

    @staticmethod
    def say(text: str) -> None:
        sys.stdout.write(text + "\n")
        sys.stdout.flush()


# How the real claude resolves a --model alias (a full name is used as given).
CLAUDE_ALIASES = {
    "opus": "claude-opus-4-8",
    "sonnet": "claude-sonnet-4-6",
    "haiku": "claude-haiku-4-5",
}


class ClaudeEmitter(Emitter):
    model = "claude-opus-4-8"

    def __init__(self, inv: Invocation) -> None:
        super().__init__(inv)
        opts = inv.parsed
        chosen = opts.get("model")
        if chosen:
            self.model = CLAUDE_ALIASES.get(chosen, chosen)
        self.format = opts.get("output-format", "text")
        self.streaming = self.format == "stream-json"
        self.bypass = opts.has("dangerously-skip-permissions") or (
            opts.get("permission-mode") == "bypassPermissions"
        )
        self.schema = opts.get("json-schema")
        self.file_only = os.environ.get("MALAMAR_FAKE_CLAUDE_FILE_ONLY") == "1"
        self.denials: list[dict] = []

    def opening(self) -> None:
        self.emit(
            {
                "type": "system",
                "subtype": "init",
                "cwd": os.getcwd(),
                "session_id": self.session,
                "tools": ["Task", "Bash", "Edit", "Read", "Write", "WebFetch", "WebSearch"],
                "mcp_servers": [],
                "model": f"{self.model}[1m]",
                "permissionMode": "bypassPermissions" if self.bypass else "default",
                "apiKeySource": "ANTHROPIC_API_KEY",
                "claude_code_version": "2.1.197",
                "output_style": "default",
                "uuid": uuid4(),
                "fast_mode_state": "off",
            }
        )

    def _assistant(self, block: dict) -> None:
        usage = {
            "input_tokens": 11,
            "output_tokens": 1,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
        }
        message = {
            "id": _id("msg_"),
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": [block],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": usage,
            "context_management": None,
        }
        self.emit(
            {
                "type": "assistant",
                "message": message,
                "parent_tool_use_id": None,
                "session_id": self.session,
                "uuid": uuid4(),
            }
        )

    def work(self) -> None:
        self._tool("Bash", {"command": "pytest -q", "description": "Run the tests"}, "3 passed")
        self._tool("Read", {"file_path": "app/models.py"}, "class Task: ...")
        self._tool(
            "Edit", {"file_path": "app/models.py", "old_string": "a", "new_string": "b"}, "ok"
        )

    def _tool(self, name: str, tool_input: object, result: str, is_error: bool = False) -> None:
        if not self.streaming:
            return
        tool_id = _id("toolu_")
        self._assistant({"type": "tool_use", "id": tool_id, "name": name, "input": tool_input})
        block = {"tool_use_id": tool_id, "type": "tool_result", "content": result}
        if is_error:
            block["is_error"] = True
        self.emit(
            {
                "type": "user",
                "message": {"role": "user", "content": [block]},
                "parent_tool_use_id": None,
                "session_id": self.session,
                "uuid": uuid4(),
                "timestamp": _now_iso(),
            }
        )

    def _result(self, text: str, structured: object = None) -> dict:
        usage = {
            "input_tokens": 22,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
            "output_tokens": 14,
            "server_tool_use": {"web_search_requests": 0, "web_fetch_requests": 0},
            "service_tier": "standard",
        }
        result = {
            "type": "result",
            "subtype": "success",
            "is_error": False,
            "api_error_status": None,
            "duration_ms": 217,
            "duration_api_ms": 82,
            "num_turns": 2,
            "result": text,
            "stop_reason": "tool_use" if structured is not None else "end_turn",
            "session_id": self.session,
            "total_cost_usd": 0.00046,
            "usage": usage,
            "modelUsage": {
                f"{self.model}[1m]": {"inputTokens": 22, "outputTokens": 14, "costUSD": 0.00046}
            },
            "permission_denials": self.denials,
        }
        if structured is not None:
            result["structured_output"] = structured
        result |= {
            "terminal_reason": "completed",
            "fast_mode_state": "off",
            "uuid": uuid4(),
        }
        return result

    def _finish(self, text: str, structured: object = None) -> None:
        if self.format == "text":
            self.say(text)
            return
        if self.streaming:
            self._assistant({"type": "text", "text": text})
        self.emit(self._result(text, structured))

    def reply(self, text: str) -> None:
        self._finish(text)

    def refusal(self, path: Path) -> str | None:
        if self.bypass:
            return None
        return f"Claude requested permissions to write to {path}, but you haven't granted it yet."

    def deliver(self, outcome: Outcome, path: str | None) -> None:
        if outcome.kind == "result" and self.schema is not None and not self.file_only:
            self._tool("StructuredOutput", outcome.value, "Structured output provided successfully")
            self._finish(json.dumps(outcome.value, separators=(",", ":")), outcome.value)
            return
        if outcome.kind == "none":
            self._finish("I did not write an output file.")
            return
        if self.streaming:
            self._assistant({"type": "text", "text": "I will write the file now."})
        content = outcome.file_content()
        error = self.write_file(path, content)
        if error and path and not self.bypass:
            self.denials.append(
                {
                    "tool_name": "Write",
                    "tool_use_id": _id("toolu_"),
                    "tool_input": {"file_path": path, "content": content},
                }
            )
        done = f"File created successfully at: {path}"
        self._tool("Write", {"file_path": path, "content": content}, error or done, bool(error))
        self._finish(f"I could not write the file: {error}" if error else CLOSING_TEXT)


class GeminiEmitter(Emitter):
    model = "gemini-2.5-flash"

    def __init__(self, inv: Invocation) -> None:
        super().__init__(inv)
        opts = inv.parsed
        self.model = opts.get("model") or self.model
        self.format = opts.get("output-format") or "text"
        self.streaming = self.format == "stream-json"
        self.yolo = opts.has("yolo") or opts.get("approval-mode") == "yolo"
        dirs = [d for arg in opts.get("include-directories", []) for d in arg.split(",") if d]
        self.workspace = [os.getcwd(), *dirs]
        self.tool_calls = 0

    def opening(self) -> None:
        self.emit(
            {
                "type": "init",
                "timestamp": _now_iso(),
                "session_id": self.session,
                "model": self.model,
            }
        )
        self.emit(
            {"type": "message", "timestamp": _now_iso(), "role": "user", "content": self.inv.prompt}
        )

    def refusal(self, path: Path) -> str | None:
        if not self.yolo:
            return 'Tool "write_file" not found in registry.'
        if not _inside(path, list(map(Path, self.workspace))):
            folders = ", ".join(str(p) for p in self.workspace)
            return (
                f'Path not in workspace: Attempted path "{path}" resolves outside the '
                f"allowed workspace directories: {folders}"
            )
        return None

    def _stats(self) -> dict:
        tokens = {
            "input": 24,
            "prompt": 24,
            "candidates": 10,
            "total": 34,
            "cached": 0,
            "thoughts": 0,
            "tool": 0,
        }
        api = {"totalRequests": 2, "totalErrors": 0, "totalLatencyMs": 78, "errorsByType": {}}
        return {
            "models": {self.model: {"api": api, "tokens": tokens}},
            "tools": {
                "totalCalls": self.tool_calls,
                "totalSuccess": self.tool_calls,
                "totalFail": 0,
                "byName": {},
            },
            "files": {"totalLinesAdded": 0, "totalLinesRemoved": 0},
        }

    def _finish(self, text: str) -> None:
        if self.format == "text":
            self.say(text)
        elif self.format == "json":
            self.say(
                json.dumps(
                    {"session_id": self.session, "response": text, "stats": self._stats()},
                    indent=2,
                    ensure_ascii=False,
                )
            )
        else:
            self.emit(
                {
                    "type": "message",
                    "timestamp": _now_iso(),
                    "role": "assistant",
                    "content": text,
                    "delta": True,
                }
            )
            stats = {
                "total_tokens": 34,
                "input_tokens": 24,
                "output_tokens": 10,
                "cached": 0,
                "input": 24,
                "duration_ms": 110,
                "tool_calls": self.tool_calls,
            }
            self.emit(
                {"type": "result", "timestamp": _now_iso(), "status": "success", "stats": stats}
            )

    def reply(self, text: str) -> None:
        self._finish(text)

    def deliver(self, outcome: Outcome, path: str | None) -> None:
        if outcome.kind == "none":
            self._finish("I did not write an output file.")
            return
        content = outcome.file_content()
        error = self.write_file(path, content)
        self.tool_calls = 1
        if self.streaming:
            tool_id = f"write_file__write_file_{_now_ms()}_0"
            self.emit(
                {
                    "type": "tool_use",
                    "timestamp": _now_iso(),
                    "tool_name": "write_file",
                    "tool_id": tool_id,
                    "parameters": {"file_path": path, "content": content},
                }
            )
            result = {
                "type": "tool_result",
                "timestamp": _now_iso(),
                "tool_id": tool_id,
                "status": "error" if error else "success",
            }
            if error:
                result["error"] = {"type": "tool_error", "message": error}
            self.emit(result)
        self._finish(f"I could not write the file: {error}" if error else CLOSING_TEXT)


class CodexEmitter(Emitter):
    def __init__(self, inv: Invocation) -> None:
        super().__init__(inv)
        opts = inv.parsed
        self.streaming = opts.has("json")
        self.schema = opts.get("output-schema")
        self.last_message = opts.get("output-last-message")
        self.can_write = opts.has("dangerously-bypass-approvals-and-sandbox") or (
            opts.get("sandbox") in ("workspace-write", "danger-full-access")
        )
        self.thread = uuid4()
        self.items = 0

    def opening(self) -> None:
        self.emit({"type": "thread.started", "thread_id": self.thread})
        self.emit({"type": "turn.started"})

    def _item(self, item: dict, started: bool = False) -> None:
        if started:
            self.emit({"type": "item.started", "item": item})
            return
        self.emit({"type": "item.completed", "item": item})
        self.items += 1

    def work(self) -> None:
        if not self.streaming:
            return
        command = {
            "id": f"item_{self.items}",
            "type": "command_execution",
            "command": "/bin/bash -lc 'pytest -q'",
            "aggregated_output": "",
            "exit_code": None,
            "status": "in_progress",
        }
        self._item(command, started=True)
        self._item(
            {**command, "aggregated_output": "3 passed\n", "exit_code": 0, "status": "completed"}
        )
        change = {"path": "app/models.py", "kind": "update"}
        self._item(
            {
                "id": f"item_{self.items}",
                "type": "file_change",
                "changes": [change],
                "status": "completed",
            }
        )

    def _finish(self, message: str, write_last: bool = True) -> None:
        if write_last and self.last_message:
            Path(str(self.last_message)).write_text(message, encoding="utf-8")
        if self.streaming:
            self._item({"id": f"item_{self.items}", "type": "agent_message", "text": message})
            usage = {
                "input_tokens": 12,
                "cached_input_tokens": 0,
                "cache_write_input_tokens": 0,
                "output_tokens": 5,
                "reasoning_output_tokens": 0,
            }
            self.emit({"type": "turn.completed", "usage": usage})
            return
        sys.stderr.write(
            f"OpenAI Codex v0.169.0 (research preview)\n--------\nworkdir: {os.getcwd()}\n"
            f"session id: {self.thread}\n--------\nuser\n{self.inv.prompt}\n\n"
            f"codex\n{message}\ntokens used\n17\n"
        )
        self.say(message)

    def refusal(self, path: Path) -> str | None:
        return None if self.can_write else f"bash: line 1: {path}: Read-only file system"

    def reply(self, text: str) -> None:
        self._finish(text)

    def deliver(self, outcome: Outcome, path: str | None) -> None:
        if outcome.kind == "none":
            self._finish("I did not produce a result.", write_last=False)
        elif self.schema is not None:
            # The schema-constrained final message is the result; codex writes it to -o.
            self._finish(
                outcome.file_content()
                if outcome.kind == "file"
                else json.dumps(outcome.value, ensure_ascii=False)
            )
        else:
            # No schema: the model writes the file with a shell command, then says so; -o
            # then gets that plain-text final message (overwriting the file if it is the same).
            content = outcome.file_content()
            error = self.write_file(path, content)
            self._command(f"/bin/bash -lc 'cat > {path}'", error)
            self._finish(f"I could not write the file: {error}" if error else CLOSING_TEXT)

    def _command(self, command: str, error: str | None) -> None:
        if not self.streaming:
            return
        item = {
            "id": f"item_{self.items}",
            "type": "command_execution",
            "command": command,
            "aggregated_output": "",
            "exit_code": None,
            "status": "in_progress",
        }
        self._item(item, started=True)
        status = "failed" if error else "completed"
        self._item(
            item
            | {"aggregated_output": error or "", "exit_code": 1 if error else 0, "status": status}
        )


class OpenCodeEmitter(Emitter):
    def __init__(self, inv: Invocation) -> None:
        super().__init__(inv)
        self.streaming = inv.parsed.get("format", "default") == "json"
        self.auto = inv.parsed.has("auto")
        self.session = "ses_" + uuid4().replace("-", "")[:26]
        self.message_id = _id("msg_")

    def _event(self, kind: str, part: dict) -> None:
        if self.streaming:
            part = {
                "id": _id("prt_"),
                "messageID": self.message_id,
                "sessionID": self.session,
                **part,
            }
            self.emit(
                {"type": kind, "timestamp": _now_ms(), "sessionID": self.session, "part": part}
            )

    def opening(self) -> None:
        self._event("step_start", {"type": "step-start"})

    def _step_finish(self, reason: str) -> None:
        tokens = {
            "total": 18,
            "input": 11,
            "output": 7,
            "reasoning": 0,
            "cache": {"write": 0, "read": 0},
        }
        self._event(
            "step_finish",
            {"reason": reason, "type": "step-finish", "tokens": tokens, "cost": 0.000138},
        )

    def _text(self, text: str) -> None:
        now = _now_ms()
        self._event("text", {"type": "text", "text": text, "time": {"start": now, "end": now}})

    def _finish(self, text: str) -> None:
        if not self.streaming:
            self.say(text)
            return
        self._text(text)
        self._step_finish("stop")

    def refusal(self, path: Path) -> str | None:
        if self.auto or _inside(path, [Path(os.getcwd())]):
            return None
        return "The user rejected permission to use this specific tool call."

    def reply(self, text: str) -> None:
        self._finish(text)

    def deliver(self, outcome: Outcome, path: str | None) -> None:
        if outcome.kind == "none":
            self._finish("I did not write an output file.")
            return
        self._text("I will write the file now.")
        content = outcome.file_content()
        error = self.write_file(path, content)
        state = {
            "status": "error" if error else "completed",
            "input": {"filePath": path, "content": content},
            "time": {"start": _now_ms(), "end": _now_ms()},
        }
        state |= {"error": error} if error else {"output": "Wrote file successfully."}
        self._event(
            "tool_use", {"type": "tool", "tool": "write", "callID": _id("toolu_"), "state": state}
        )
        self._step_finish("tool-calls")
        self.message_id = _id("msg_")
        self._event("step_start", {"type": "step-start"})
        self._finish(f"I could not write the file: {error}" if error else CLOSING_TEXT)


# --------------------------------------------------------------------------------------------
# The four CLIs: argv, prompt, traps
# --------------------------------------------------------------------------------------------


@dataclass
class Invocation:
    cli: str
    parsed: Parsed = field(default_factory=Parsed)
    action: str = "run"  # "run" | "version" | "help"
    command: str = ""  # subcommand, e.g. "exec" for codex, "run" for opencode
    prompt: str | None = None
    stdin: str | None = None  # what was read from standard input, if anything


def _stdin_is_tty() -> bool:
    # Through sys.stdin (fd 0 in a real process): the tests run the fake in-process too, with
    # sys.stdin swapped for a file.
    return sys.stdin is None or sys.stdin.isatty()


def read_stdin(wait: float | None = None) -> str:
    """Read standard input to EOF (never from a terminal). With `wait`, give up when no data
    arrives within that many seconds, like Claude Code."""
    if _stdin_is_tty():
        return ""
    try:
        if wait is not None and not select.select([sys.stdin], [], [], wait)[0]:
            return ""
        return sys.stdin.buffer.read().decode("utf-8", "replace")
    except (OSError, ValueError):
        return ""


def unsupported(cli: str, what: str) -> CliExit:
    return CliExit(2, f"fakecli ({cli}): {what} is not supported by the fake")


class FakeCli:
    name = ""
    usage = ""
    auth_error = ""
    emitter_class: type[Emitter] = Emitter

    def parse(self, args: list[str]) -> Invocation:
        raise NotImplementedError

    def read_prompt(self, inv: Invocation) -> None:
        raise NotImplementedError

    def check_traps(self, inv: Invocation) -> None:
        pass

    def version(self, inv: Invocation) -> str:
        return VERSIONS[self.name]

    @staticmethod
    def _special(parsed: Parsed, inv: Invocation, version_key: str = "version") -> bool:
        if parsed.has("help"):
            inv.action = "help"
        elif parsed.has(version_key):
            inv.action = "version"
        return inv.action != "run"


class Claude(FakeCli):
    name = "claude"
    usage = "Usage: claude [options] [command] [prompt]"
    auth_error = "Invalid API key · Fix external API key"
    emitter_class = ClaudeEmitter
    table = option_table(CLAUDE_OPTIONS)
    flavour = Commander()

    def parse(self, args: list[str]) -> Invocation:
        inv = Invocation(self.name, parse_args(args, self.table, self.flavour))
        if self._special(inv.parsed, inv):
            return inv
        positionals = inv.parsed.positionals
        if positionals and positionals[0] in CLAUDE_COMMANDS:
            raise unsupported(self.name, f"`claude {positionals[0]}`")
        if len(positionals) > 1:
            raise self.flavour.too_many(positionals, 1)
        if not inv.parsed.has("print"):
            raise unsupported(self.name, "interactive mode (no -p/--print)")
        return inv

    def read_prompt(self, inv: Invocation) -> None:
        piped = read_stdin(wait=3.0).strip()
        parts = [p for p in (piped, *inv.parsed.positionals) if p]
        if not parts:
            raise CliExit(
                1,
                "Error: Input must be provided either through stdin or as a prompt argument "
                "when using --print",
            )
        inv.prompt = "\n".join(parts)

    def check_traps(self, inv: Invocation) -> None:
        opts = inv.parsed
        if (
            opts.has("dangerously-skip-permissions")
            and os.environ.get("MALAMAR_FAKE_ROOT_TRAP") == "1"
            and os.geteuid() == 0
            and os.environ.get("IS_SANDBOX") != "1"
        ):
            raise CliExit(
                1,
                "--dangerously-skip-permissions cannot be used with root/sudo privileges "
                "for security reasons",
            )
        if opts.get("output-format") == "stream-json" and not opts.has("verbose"):
            raise CliExit(
                1, "Error: When using --print, --output-format=stream-json requires --verbose"
            )
        schema = opts.get("json-schema")
        if schema is not None:
            try:
                json.loads(str(schema))
            except json.JSONDecodeError as exc:
                raise CliExit(1, f"Error: Invalid JSON provided to --json-schema: {exc}") from None


class Gemini(FakeCli):
    name = "gemini"
    usage = "Usage: gemini [options] [command]"
    emitter_class = GeminiEmitter
    table = option_table(GEMINI_OPTIONS)
    flavour = Yargs(usage)

    @property
    def auth_error(self) -> str:  # errors go to stderr as JSON
        error = {
            "type": "Error",
            "message": "[API Error: API key not valid. Please pass a valid API key.]",
            "code": 1,
        }
        return json.dumps({"session_id": uuid4(), "error": error}, indent=2)

    def parse(self, args: list[str]) -> Invocation:
        inv = Invocation(self.name, parse_args(args, self.table, self.flavour))
        if self._special(inv.parsed, inv):
            return inv
        opts, positionals = inv.parsed, inv.parsed.positionals
        if positionals and positionals[0] in GEMINI_COMMANDS:
            raise unsupported(self.name, f"`gemini {positionals[0]}`")
        if positionals and "prompt" in opts.opts:
            raise CliExit(
                1, "Cannot use both a positional prompt and the --prompt (-p) flag together"
            )
        if opts.has("yolo") and "approval-mode" in opts.opts:
            raise CliExit(
                1,
                "Cannot use both --yolo (-y) and --approval-mode together. "
                "Use --approval-mode=yolo instead.",
            )
        if "prompt-interactive" in opts.opts:
            raise unsupported(self.name, "interactive mode (-i)")
        return inv

    def read_prompt(self, inv: Invocation) -> None:
        prompt = inv.parsed.get("prompt") or " ".join(inv.parsed.positionals)
        if not prompt:
            raise CliExit(
                1,
                "No input provided via stdin. Input can be provided by piping data into gemini "
                "or using the --prompt option.",
            )
        inv.prompt = str(prompt)

    def check_traps(self, inv: Invocation) -> None:
        yolo = "YOLO mode is enabled. All tool calls will be automatically approved."
        trusted = os.environ.get("GEMINI_CLI_TRUST_WORKSPACE") == "true"
        if inv.parsed.has("skip-trust") or trusted:
            if inv.parsed.has("yolo"):
                sys.stderr.write(yolo + "\n")  # real gemini says so on every yolo run
            return
        lines = []
        if inv.parsed.has("yolo"):
            lines += [
                yolo,
                'Approval mode overridden to "default" because the current folder is not trusted.',
            ]
        lines.append(
            "Gemini CLI is not running in a trusted directory. To proceed, either use "
            "`--skip-trust`, set the `GEMINI_CLI_TRUST_WORKSPACE=true` environment variable, "
            "or trust this directory in interactive mode. For more details, see "
            "https://geminicli.com/docs/cli/trusted-folders/#headless-and-automated-environments"
        )
        raise CliExit(55, "\n".join(lines))


class Codex(FakeCli):
    name = "codex"
    usage = "Usage: codex [OPTIONS] [PROMPT]\n       codex [OPTIONS] <COMMAND> [ARGS]"
    exec_usage = (
        "Usage: codex exec [OPTIONS] [PROMPT]\n       codex exec [OPTIONS] <COMMAND> [ARGS]"
    )
    auth_error = (
        "ERROR: unexpected status 401 Unauthorized: Incorrect API key provided, "
        "url: https://api.openai.com/v1/responses"
    )
    emitter_class = CodexEmitter
    table = option_table(CODEX_OPTIONS)
    exec_table = option_table(CODEX_EXEC_OPTIONS)

    def parse(self, args: list[str]) -> Invocation:
        top = parse_args(args, self.table, Clap(self.usage), stop_at_positional=True)
        inv = Invocation(self.name, top)
        if self._special(top, inv):
            return inv
        if not top.positionals:
            raise unsupported(self.name, "the interactive TUI (no subcommand)")
        command = top.positionals[0]
        if command not in ("exec", "e"):
            what = f"`codex {command}`" if command in CODEX_COMMANDS else "the interactive TUI"
            raise unsupported(self.name, what)
        flavour = Clap(self.exec_usage)
        inv.command = "exec"
        inv.parsed = parse_args(top.rest, self.exec_table, flavour)
        inv.parsed.opts = top.opts | inv.parsed.opts
        for key, values in top.every.items():
            inv.parsed.every[key] = values + inv.parsed.every.get(key, [])
        if self._special(inv.parsed, inv):
            return inv
        positionals = inv.parsed.positionals
        if positionals and positionals[0] in CODEX_EXEC_COMMANDS:
            raise unsupported(self.name, f"`codex exec {positionals[0]}`")
        if len(positionals) > 1:
            raise flavour.too_many(positionals, 1)
        return inv

    def version(self, inv: Invocation) -> str:
        return "codex-exec 0.169.0" if inv.command == "exec" else VERSIONS[self.name]

    def read_prompt(self, inv: Invocation) -> None:
        given = inv.parsed.positionals[0] if inv.parsed.positionals else "-"
        if given == "-":
            if _stdin_is_tty():
                raise CliExit(
                    1,
                    "No prompt provided. Either specify one as an argument or pipe "
                    "the prompt into stdin.",
                )
            inv.prompt = read_stdin().strip()
            if not inv.prompt:
                raise CliExit(1, "No prompt provided via stdin.")
            return
        # Codex reads stdin to EOF even with a prompt argument: an open pipe hangs it.
        piped = read_stdin()
        inv.prompt = f"{given}\n\n<stdin>\n{piped}\n</stdin>" if piped.strip() else given

    def check_traps(self, inv: Invocation) -> None:
        opts = inv.parsed
        root = os.path.realpath(str(opts.get("cd") or os.getcwd()))
        in_repo = any(os.path.exists(os.path.join(folder, ".git")) for folder in _up_from(root))
        if not opts.has("skip-git-repo-check") and not in_repo:
            raise CliExit(
                1, "Not inside a trusted directory and --skip-git-repo-check was not specified."
            )
        schema = opts.get("output-schema")
        if schema is not None:
            try:
                json.loads(Path(str(schema)).read_text(encoding="utf-8"))
            except OSError as exc:
                raise CliExit(
                    1, f"Error: failed to read output schema file {schema}: {exc.strerror}"
                ) from None
            except json.JSONDecodeError as exc:
                raise CliExit(
                    1, f"Error: output schema file {schema} is not valid JSON: {exc}"
                ) from None


class OpenCode(FakeCli):
    name = "opencode"
    usage = "opencode run [message..]\n\nrun opencode with a message"
    auth_error = "Error: APIError: invalid x-api-key (401)"
    emitter_class = OpenCodeEmitter
    table = option_table(OPENCODE_GLOBAL_OPTIONS)
    run_table = option_table(OPENCODE_RUN_OPTIONS)

    def parse(self, args: list[str]) -> Invocation:
        flavour = Yargs(self.usage)
        top = parse_args(args, self.table, flavour, stop_at_positional=True)
        inv = Invocation(self.name, top)
        if not top.positionals or top.positionals[0] != "run":
            if self._special(top, inv):
                return inv
            command = top.positionals[0] if top.positionals else ""
            what = f"`opencode {command}`" if command in OPENCODE_COMMANDS else "the TUI"
            raise unsupported(self.name, what)
        inv.command = "run"
        inv.parsed = parse_args(top.rest, self.run_table, flavour)
        inv.parsed.opts = top.opts | inv.parsed.opts
        if self._special(inv.parsed, inv):
            return inv
        if inv.parsed.has("interactive"):
            raise unsupported(self.name, "interactive mode (-i)")
        return inv

    def check_traps(self, inv: Invocation) -> None:
        # opencode 1.18.33 `run` works in $PWD, not in its process's working directory
        # (run.ts: `root = Filesystem.resolve(process.env.PWD ?? process.cwd())`).
        pwd = os.environ.get("PWD")
        if pwd and os.path.isdir(pwd):
            os.chdir(pwd)

    def read_prompt(self, inv: Invocation) -> None:
        # Like opencode: an argument with a space reaches the model wrapped in quotes.
        words = inv.parsed.positionals
        message = " ".join(f'"{w}"' if " " in w else w for w in words)
        if not _stdin_is_tty():
            inv.stdin = read_stdin()
            message += "\n" + inv.stdin
        if not message.strip():
            raise CliExit(1, "Error: You must provide a message or a command")
        inv.prompt = message.strip()


CLIS: dict[str, type[FakeCli]] = {cli.name: cli for cli in (Claude, Gemini, Codex, OpenCode)}


# --------------------------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------------------------


# Variables whose value a test checks (the environment Malamar builds for every CLI).
LOGGED_ENV = (
    "IS_SANDBOX",
    "PWD",
    "TMPDIR",
    "MCP_CONNECTION_NONBLOCKING",
    "GEMINI_CLI_SYSTEM_SETTINGS_PATH",
)


def log_invocation(cli: str, argv: list[str], inv: Invocation | None) -> None:
    path = os.environ.get("MALAMAR_FAKE_LOG")
    if not path:
        return
    prompt = inv.prompt if inv else None
    match = TASK_PROMPT.fullmatch(prompt.strip()) if prompt else None
    record = {
        "cli": cli,
        "argv": argv[1:],
        "argv0": argv[0],
        "cwd": os.getcwd(),
        "stdin": inv.stdin if inv and cli == "opencode" else None,
        "env": {
            k: v
            for k, v in os.environ.items()
            if k.startswith(("MALAMAR_TEST_", "FAKE_")) or k in LOGGED_ENV
        },
        "pid": os.getpid(),
        "pgid": os.getpgid(0),
        "sid": os.getsid(0),
        "input_path": match.group(1) if match else None,
        "time": time.time(),
    }
    if match and os.environ.get("MALAMAR_FAKE_LOG_INPUT") == "1":  # (bench/chaos.py --comments)
        try:
            with open(match.group(1), errors="replace") as file:
                record["input"] = file.read()
        except OSError:
            pass
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps(record, ensure_ascii=False) + "\n").encode())
    finally:
        os.close(fd)


def answer_other_prompt(cli: FakeCli, emitter: Emitter) -> int:
    """A prompt that is not Malamar's task prompt (e.g. the health check)."""
    mode = os.environ.get("MALAMAR_FAKE_HEALTH", "")
    if mode == "fail":
        raise CliExit(1, cli.auth_error)
    if mode == "empty":
        return 0
    if mode == "hang":
        time.sleep(3600)
        return 0
    if mode.startswith("limit"):  # `limit` or `limit:EPOCH`: out of quota, as `@fake limit`
        stdout, stderr, code = limit_output(cli.name, mode.partition(":")[2])
        sys.stdout.write(stdout)
        sys.stderr.write(stderr)
        return code
    emitter.start()
    emitter.reply("OK")
    return 0


def run_prompt(cli: FakeCli, inv: Invocation) -> int:
    emitter = cli.emitter_class(inv)
    match = TASK_PROMPT.fullmatch((inv.prompt or "").strip())
    if match is None:
        return answer_other_prompt(cli, emitter)
    input_path = Path(match.group(1))
    doc = load_input(input_path)
    if doc is None:
        emitter.start()
        emitter.reply(f"I could not read {input_path}: no such file.")
        return 0
    plan = (
        chat_plan(doc)
        if doc.chat
        else task_plan(doc, McpSeen(cli.name, mcp_servers_seen(cli.name, inv)))
    )
    for step in plan.steps:
        emitter.start()
        run_step(step, emitter)
    if plan.exit is not None:
        code, text = plan.exit
        raise CliExit(code, text)
    if plan.limit is not None:
        stdout, stderr, code = limit_output(cli.name, plan.limit)
        sys.stdout.write(stdout)
        sys.stderr.write(stderr)
        return code
    emitter.start()
    if plan.outcome is not None and plan.outcome.nested and emitter.streaming:
        emitter.say('{"type":"nested","value":' + nested_json(plan.outcome.nested) + "}")
    emitter.deliver(plan.outcome or Outcome("none"), doc.output_path)
    return 0


# --------------------------------------------------------------------------------------------
# MCP servers a run was given, the way each real CLI takes them (directive `mcp-config`)
# --------------------------------------------------------------------------------------------


def _json_file_or_text(value: str) -> dict:
    text = value if value.lstrip().startswith("{") else Path(value).read_text(encoding="utf-8")
    document = json.loads(text)
    return document if isinstance(document, dict) else {}


def mcp_servers_seen(cli: str, inv: Invocation) -> dict[str, dict]:
    """{name: {"command": [argv…], "env": {…}}}: claude's `--mcp-config FILE|JSON…`, gemini's
    `mcpServers` in the system settings file GEMINI_CLI_SYSTEM_SETTINGS_PATH names, codex's
    `-c mcp_servers.NAME.KEY=TOML` overrides, opencode's `mcp` in OPENCODE_CONFIG_CONTENT."""
    servers: dict[str, dict] = {}
    if cli == "claude":
        for value in inv.parsed.get("mcp-config") or []:
            servers |= _json_file_or_text(str(value)).get("mcpServers") or {}
    elif cli == "gemini" and os.environ.get("GEMINI_CLI_SYSTEM_SETTINGS_PATH"):
        path = os.environ["GEMINI_CLI_SYSTEM_SETTINGS_PATH"]
        servers = _json_file_or_text(path).get("mcpServers") or {}
    elif cli == "codex":
        lines = [str(v) for v in inv.parsed.every.get("config", []) if str(v).startswith("mcp_")]
        import tomllib

        servers = tomllib.loads("\n".join(lines)).get("mcp_servers") or {}
    elif cli == "opencode" and os.environ.get("OPENCODE_CONFIG_CONTENT"):
        for name, server in (
            json.loads(os.environ["OPENCODE_CONFIG_CONTENT"]).get("mcp") or {}
        ).items():
            servers[name] = {"command": server["command"], "env": server.get("environment")}
        return servers
    return {
        name: {"command": [server["command"], *server.get("args", [])], "env": server.get("env")}
        for name, server in servers.items()
    }


def call_mcp_tool(server: dict, cli: str, tool: str, arguments: dict) -> dict:
    """Start `server` as the real CLI does (Codex: a minimal environment plus the server's;
    the others: their own plus the server's), call one tool over stdio, return its result."""
    if cli == "codex":
        env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "USER", "TMPDIR")}
    else:
        env = dict(os.environ)
    env.update(server.get("env") or {})
    messages = [
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": f"fake-{cli}", "version": "0"},
            },
        },
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": tool, "arguments": arguments},
        },
    ]
    import subprocess

    process = subprocess.Popen(
        server["command"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        text=True,
    )
    try:
        assert process.stdin is not None and process.stdout is not None
        process.stdin.write("".join(json.dumps(m) + "\n" for m in messages))
        process.stdin.flush()
        for line in process.stdout:
            answer = json.loads(line)
            if answer.get("id") == 2:
                break
        else:
            error = process.stderr.read() if process.stderr else ""
            raise CliExit(1, f"fakecli: the MCP server ended without answering: {error[-2000:]}")
    finally:
        if process.stdin:
            process.stdin.close()
        process.wait(timeout=30)
    result = answer.get("result") or {}
    if "error" in answer or result.get("isError"):
        raise CliExit(1, f"fakecli: MCP tool {tool} failed: {json.dumps(answer)}")
    return result


def describe_mcp(servers: dict[str, dict]) -> str:
    """One line per server: `mcp NAME: ARGV… (MALAMAR_DATA_DIR=…)`."""
    lines = []
    for name, server in sorted(servers.items()):
        data_dir = (server.get("env") or {}).get("MALAMAR_DATA_DIR", "?")
        lines.append(f"mcp {name}: {' '.join(server['command'])} (MALAMAR_DATA_DIR={data_dir})")
    return "\n".join(lines)


def resolve_cli(argv: list[str]) -> tuple[str, list[str]]:
    """The CLI name comes from argv[0]; `fakecli.py NAME ARGS...` works too."""
    name = os.path.basename(argv[0])
    if name not in CLIS and len(argv) > 1 and argv[1] in CLIS:
        return argv[1], [argv[1], *argv[2:]]
    if name not in CLIS:
        raise CliExit(2, f"fakecli: run me as one of {', '.join(CLIS)} (got {name!r})")
    return name, argv


def main(argv: list[str]) -> int:
    name, argv = resolve_cli(argv)
    cli = CLIS[name]()
    inv, error = None, None
    try:
        inv = cli.parse(argv[1:])
        if inv.action == "run":
            cli.read_prompt(inv)
    except CliExit as exc:
        error = exc
    log_invocation(name, argv, inv)
    if error is not None:
        raise error
    assert inv is not None
    if inv.action == "version":
        print(cli.version(inv))
        return 0
    if inv.action == "help":
        print(f"{cli.usage}\n\n(fakecli: see shared/cli-samples/help for the real text)")
        return 0
    cli.check_traps(inv)
    return run_prompt(cli, inv)


def entry(argv: list[str] | None = None) -> int:
    for stream in (sys.stdout, sys.stderr):
        stream.reconfigure(encoding="utf-8", errors="replace")
    try:
        return main(sys.argv if argv is None else argv)
    except CliExit as exc:
        if exc.message:
            sys.stderr.write(exc.message + "\n")
        return exc.code
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


if __name__ == "__main__":
    sys.exit(entry())
