"""What changed between two snapshot trees: the file list with +/- counts, and per-file
unified diffs split into highlighted lines. Reads only (git diff-tree in the private store)."""

import codecs
import functools
import os
import re
from collections import OrderedDict
from dataclasses import dataclass, field
from html import escape

from django.utils.safestring import mark_safe
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import get_lexer_for_filename
from pygments.lexers.special import TextLexer
from pygments.util import ClassNotFound

from runner.git import GitError, git, git_head
from runner.snapshots import store_path

STATUS = {"A": "added", "M": "modified", "T": "modified", "D": "deleted", "R": "renamed"}
HIGHLIGHT_CHARS = 400_000  # a bigger diff is shown plain: highlighting it would take too long
DIFF_READ_BYTES = 2 * 1024 * 1024  # of one git diff call: the rest is not read (a huge file)
LINE_CHARS = 2_000  # a longer line (minified code, data) is shown cut
_FORMATTER = HtmlFormatter(nowrap=True)


@dataclass
class FileChange:
    path: str  # as shown: a name that is not UTF-8 has U+FFFD for its bad bytes
    old_path: str
    status: str  # added | modified | deleted | renamed
    binary: bool
    added: int
    removed: int
    git_path: str = ""  # the name as git gives it (os.fsencode gives back its bytes)
    git_old_path: str = ""

    @property
    def lines(self) -> int:
        return self.added + self.removed


@dataclass
class DiffLine:
    kind: str  # context | add | del | hunk | note
    old: int | None
    new: int | None
    html: str


@dataclass
class FileDiff:
    lines: list[DiffLine] = field(default_factory=list)
    truncated: bool = False

    def rows_html(self) -> str:
        """The table rows, built here: a template loop over thousands of lines costs ~10x."""
        return mark_safe("".join(_row(line) for line in self.lines))  # parts escaped in _row

    def rows_html_with(self, notes: dict[tuple[str, int], str]) -> tuple[str, set]:
        """The rows with extra rows (safe HTML) after the lines `notes` names: ("new", n) after
        the row of line n as the changes left it, ("old", n) after line n as it was before
        (line comments). Returns the rows and the keys placed (a line the diff does not show
        places nothing)."""
        parts, placed = [], set()
        for line in self.lines:
            parts.append(_row(line))
            for key in (("new", line.new), ("old", line.old)):
                if key[1] is not None and key in notes and key not in placed:
                    parts.append(notes[key])
                    placed.add(key)
        return mark_safe("".join(parts)), placed  # notes are safe HTML, rows escaped in _row


def _row(line: DiffLine) -> str:
    if line.kind in ("hunk", "note"):
        return f'<tr class="diff__{line.kind}"><td colspan="3">{line.html}</td></tr>'
    old = "" if line.old is None else line.old
    new = "" if line.new is None else line.new
    return (
        f'<tr class="diff__line diff__line--{line.kind}"><td class="diff__no">{old}</td>'
        f'<td class="diff__no">{new}</td><td class="diff__code">{line.html}</td></tr>'
    )


def _store_env(store: str) -> dict[str, str]:
    return {"GIT_DIR": str(store_path(store))}


def _diff_tree(store: str, before: str, after: str, *args: str, paths=()) -> bytes:
    argv = ["-c", "core.quotePath=false", "--literal-pathspecs", "diff-tree", "-r", "-M"]
    argv += [*args, before, after]
    if paths:
        argv += ["--", *paths]
    path = store_path(store)
    return git(*argv, cwd=path, env=_store_env(store)).stdout


def changed_files(store: str, before: str, after: str) -> list[FileChange]:
    """Every file that differs between the two trees, in git's (path) order. Do not mutate."""
    if before == after:
        return []  # (the store of a folder that was always empty was never made)
    key = (store, before, after)
    files = file_lists.get(key)
    if files is None:
        files = _changed_files(store, before, after)
        file_lists.put(key, files)
    return files


def _changed_files(store: str, before: str, after: str) -> list[FileChange]:
    out = _diff_tree(store, before, after, "-z", "--raw", "--numstat", "--no-abbrev")
    tokens = out.decode("utf-8", "surrogateescape").split("\0")
    raw, i = [], 0
    while i < len(tokens) and tokens[i].startswith(":"):
        letter = tokens[i].split()[-1][0]
        if letter in "RC":
            raw.append((letter, tokens[i + 1], tokens[i + 2]))
            i += 3
        else:
            raw.append((letter, tokens[i + 1], tokens[i + 1]))
            i += 2
    files = []
    for letter, old, new in raw:
        counts = tokens[i].split("\t")
        i += 3 if counts[2] == "" else 1  # a rename's numstat names both paths after it
        binary = counts[0] == "-"
        files.append(
            FileChange(
                path=_shown(new),
                old_path=_shown(old),
                status=STATUS.get(letter, "modified"),
                binary=binary,
                added=0 if binary else int(counts[0]),
                removed=0 if binary else int(counts[1]),
                git_path=new,
                git_old_path=old,
            )
        )
    return files


def totals_between(store: str, pairs: list[tuple[str, str]]) -> list[dict]:
    """`totals` of each (before, after) pair of trees, in one git call for them all; the same
    counts as `totals(changed_files(...))` (renames found the same way), without the lists."""
    asked = list(dict.fromkeys(pair for pair in pairs if pair[0] != pair[1]))
    found = {pair: totals([]) for pair in pairs}
    if asked:
        lines = "".join(f"{before} {after}\n" for before, after in asked).encode()
        argv = ["diff-tree", "--stdin", "-r", "-M", "-z", "--numstat"]
        out = git(*argv, cwd=store_path(store), env=_store_env(store), input=lines).stdout
        counted = _numstat_by_pair(out.decode("utf-8", "surrogateescape"))
        for pair in asked:
            if pair not in counted:  # git skips a pair it cannot read: say so
                raise GitError(f"git diff-tree: cannot compare trees {pair[0]} and {pair[1]}")
            found[pair] = counted[pair]
    return [found[pair] for pair in pairs]


def _numstat_by_pair(out: str) -> dict[tuple[str, str], dict]:
    """Read `diff-tree --stdin -z --numstat`: each pair's line of its two trees, then a field
    per file (added, removed and path, tab-separated; a rename has an empty path and its two
    paths as the next fields)."""
    counted: dict[tuple[str, str], dict] = {}
    current = None
    fields = iter(out.split("\0"))
    for field_ in fields:
        while _PAIR_LINE.match(field_):
            current = counted.setdefault(tuple(field_[:81].split(" ")), totals([]))
            field_ = field_[82:]
        if not field_ or current is None:
            continue
        added, removed, path = field_.split("\t", 2)
        if path == "":  # a rename: its two paths follow
            next(fields, None), next(fields, None)
        current["files_changed"] += 1
        if added != "-":
            current["lines_added"] += int(added)
            current["lines_removed"] += int(removed)
    return counted


_PAIR_LINE = re.compile(r"[0-9a-f]{40} [0-9a-f]{40}\n")


def _shown(name: str) -> str:
    """A file name git printed (decoded with surrogateescape) as text a page can hold."""
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


class Patch(str):
    """A file's diff text; `cut` when git printed more than DIFF_READ_BYTES."""

    cut = False


def _cut(text: str) -> Patch:
    patch = Patch(text)
    patch.cut = True
    return patch


def totals(files: list[FileChange]) -> dict:
    return {
        "files_changed": len(files),
        "lines_added": sum(f.added for f in files),
        "lines_removed": sum(f.removed for f in files),
    }


def _paths(files: list[FileChange]) -> list[str]:
    paths = []
    for f in files:
        old, new = f.git_old_path or f.old_path, f.git_path or f.path
        paths += [old, new] if old != new else [new]
    return paths


def patches(store: str, before: str, after: str, files: list[FileChange]) -> list[Patch]:
    """The unified diff text of each of `files` (same order), in one git call that reads at most
    DIFF_READ_BYTES (a file whose diff goes past it has a `cut` patch)."""
    if not files:
        return []
    argv = ["-c", "core.quotePath=false", "--literal-pathspecs", "diff-tree", "-r", "-M", "-p"]
    argv += ["--no-color", before, after, "--", *_paths(files)]
    out, more = git_head(*argv, cwd=store_path(store), env=_store_env(store), limit=DIFF_READ_BYTES)
    blocks = [Patch(block) for block in _split_blocks(out.decode("utf-8", "replace"))]
    if len(files) == 1:
        return [_cut("\n".join(blocks)) if more else Patch("\n".join(blocks))]
    if more:  # the last block read is cut short: it and the files after it one by one
        blocks = blocks[:-1]
        done = len(blocks)
        return blocks + [patches(store, before, after, [f])[0] for f in files[done:]]
    if len(blocks) == len(files):
        return blocks
    # Unexpected pairing (rename detection differs within the subset): one call per file.
    return [patches(store, before, after, [f])[0] for f in files]


def _split_blocks(text: str) -> list[str]:
    blocks: list[list[str]] = []
    for line in text.splitlines():
        if line.startswith("diff --git "):
            blocks.append([line])
        elif blocks:
            blocks[-1].append(line)
    return ["\n".join(block) for block in blocks]


def _lexer(path: str):
    return _lexer_for(os.path.splitext(path)[1].lower() or os.path.basename(path))


@functools.lru_cache(maxsize=256)
def _lexer_for(name: str):
    """Looking a lexer up scans every Pygments lexer: once per file extension."""
    try:
        return get_lexer_for_filename(
            f"x{name}" if name.startswith(".") else name, stripnl=False, ensurenl=False
        )
    except ClassNotFound:
        return TextLexer(stripnl=False, ensurenl=False)


class BoundedCache:
    """An LRU cache bounded by what it holds as well as by entries: `weight(value)` (files of a
    list, lines of a diff) summed stays under `max_weight`, and a value heavier than that is not
    kept. Snapshot trees never change, so a cached value is always still right."""

    def __init__(self, *, max_items: int, max_weight: int, weight):
        self.max_items, self.max_weight, self.weight = max_items, max_weight, weight
        self.items: OrderedDict = OrderedDict()
        self.held = 0

    def get(self, key):
        value = self.items.get(key)
        if value is not None:
            self.items.move_to_end(key)
        return value

    def put(self, key, value) -> None:
        weight = self.weight(value)
        if weight > self.max_weight:
            return
        old = self.items.pop(key, None)
        if old is not None:
            self.held -= self.weight(old)
        self.items[key] = value
        self.held += weight
        while self.held > self.max_weight or len(self.items) > self.max_items:
            self.held -= self.weight(self.items.popitem(last=False)[1])


# Rendered diffs by (store, before, after, path, limit): Pygments is the slow part.
rendered = BoundedCache(max_items=512, max_weight=200_000, weight=lambda diff: len(diff.lines))
# Changed-file lists by (store, before, after): one run that made 100,000 files (an installed
# node_modules) is ~50 MB of rows, which 64 unbounded entries would keep in every process.
file_lists = BoundedCache(max_items=64, max_weight=50_000, weight=len)


def _highlighted(path: str, codes: list[str]) -> list[str]:
    if not codes:
        return []
    text = "\n".join(codes)
    if len(text) > HIGHLIGHT_CHARS:
        return [escape(code) for code in codes]
    html = highlight(text, _lexer(path), _FORMATTER).split("\n")
    if len(html) < len(codes):  # never happens with these options; stay safe
        return [escape(code) for code in codes]
    return html[: len(codes)]


def render(block: str, path: str, *, max_lines: int) -> FileDiff:
    """A file's diff block as numbered, highlighted lines (hunk headers kept)."""
    rows: list[tuple[str, int | None, int | None, str]] = []
    old = new = 0
    in_hunks = False
    for line in block.splitlines():
        if line.startswith("@@"):
            in_hunks = True
            old, new = _hunk_start(line)
            rows.append(("hunk", None, None, line))
        elif not in_hunks:
            continue  # the header (index, mode, ---/+++): the file list already says it
        elif line.startswith("+"):
            rows.append(("add", None, new, line[1:]))
            new += 1
        elif line.startswith("-"):
            rows.append(("del", old, None, line[1:]))
            old += 1
        elif line.startswith("\\"):
            rows.append(("note", None, None, line))
        else:
            rows.append(("context", old, new, line[1:]))
            old, new = old + 1, new + 1
    truncated = len(rows) > max_lines or getattr(block, "cut", False)
    rows = rows[:max_lines]
    if any(len(row[3]) > LINE_CHARS for row in rows):
        truncated = True
        rows = [(*row[:3], _line_cut(row[3])) for row in rows]
    code_rows = [row for row in rows if row[0] in ("add", "del", "context")]
    html = iter(_highlighted(path, [row[3] for row in code_rows]))
    lines = []
    for kind, old_no, new_no, text in rows:
        markup = next(html) if kind in ("add", "del", "context") else escape(text)
        lines.append(
            DiffLine(kind, old_no, new_no, mark_safe(markup))
        )  # Pygments or escape() made it
    return FileDiff(lines, truncated)


def _line_cut(text: str) -> str:
    if len(text) <= LINE_CHARS:
        return text
    return f"{text[:LINE_CHARS]} … ({len(text) - LINE_CHARS:,} more characters)"


def _hunk_start(header: str) -> tuple[int, int]:
    """`@@ -12,3 +14,5 @@ ...` -> (12, 14)."""
    try:
        old_part, new_part = header.split(" ")[1:3]
        return int(old_part[1:].split(",")[0]), int(new_part[1:].split(",")[0])
    except (ValueError, IndexError):
        return 0, 0


# line comments (tasks.anchors) -------------------------------------------------------------

FILE_READ_BYTES = 4 * 1024 * 1024  # of one file a line comment quotes: lines past it are refused
WHOLE_FILE = None  # changed_hunks: the file went (or is binary): every line of it changed


def file_lines(store: str, tree: str, path: str) -> tuple[list[str], bool]:
    """The lines of the file `path` (git's name) in `tree`, without their line ends, and
    whether the file goes on past FILE_READ_BYTES (its later lines are not read)."""
    out, more = git_head(
        "cat-file", "blob", f"{tree}:{path}",
        cwd=store_path(store), env=_store_env(store), limit=FILE_READ_BYTES,
    )  # fmt: skip
    text = out.decode("utf-8", "replace")
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the file's last line end
    elif more and lines:
        lines.pop()  # cut inside its last line
    return [line.removesuffix("\r") for line in lines], more


def changed_hunks(
    store: str, before: str, after: str, paths: list[str]
) -> dict[str, list[tuple[int, int]] | None]:
    """Which lines of `before` each of `paths` changed on the way to `after`: its hunks as
    (first line, line count) on the `before` side (a count of 0: lines were inserted after that
    line), or WHOLE_FILE for a file that is gone or binary. Paths that did not change are not
    in the answer. Renames count as a removal (the old name is gone)."""
    if not paths or before == after:
        return {}
    argv = ["-c", "core.quotePath=false", "--literal-pathspecs", "diff-tree", "-r", "-p"]
    argv += ["--no-renames", "-U0", "--no-color", "--no-ext-diff", before, after, "--", *paths]
    out, _more = git_head(
        *argv, cwd=store_path(store), env=_store_env(store), limit=DIFF_READ_BYTES
    )
    found: dict[str, list[tuple[int, int]] | None] = {}
    for block in _split_blocks(out.decode("utf-8", "surrogateescape")):
        lines = block.split("\n")
        path = _block_path(lines[0])
        if path is None:
            continue
        gone = any(line == "+++ /dev/null" or line.startswith("Binary files") for line in lines)
        hunks = [_hunk_old_range(line) for line in lines if line.startswith("@@")]
        found[path] = WHOLE_FILE if gone or not hunks else hunks
    return found


def _block_path(header: str) -> str | None:
    """The path of a `diff --git a/P b/P` line (no renames: both sides name the same path)."""
    rest = header.removeprefix("diff --git ")
    half = (len(rest) - 1) // 2
    first = rest[:half]
    if first.startswith('"') and first.endswith('"'):
        first = _unquoted(first)
    return first[2:] if first.startswith("a/") else None


def _unquoted(text: str) -> str:
    """A name git printed C-quoted ("a/tab\\there"), as git's own bytes decode."""
    raw = codecs.escape_decode(text[1:-1].encode("utf-8", "surrogateescape"))[0]
    return raw.decode("utf-8", "surrogateescape")


def _hunk_old_range(header: str) -> tuple[int, int]:
    """`@@ -12,3 +14,5 @@` → (12, 3); `@@ -12 +12 @@` → (12, 1)."""
    try:
        old = header.split(" ")[1][1:]
        start, _, count = old.partition(",")
        return int(start), int(count) if count else 1
    except (ValueError, IndexError):
        return 1, 1 << 30  # unreadable: take it as touching everything
