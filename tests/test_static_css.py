"""The stylesheets parse as written: every block closed, no rule nested in another.

A lost `}` (a merge dropped one after `.task-deps__edit select`) is not an error to a browser:
with CSS nesting, every later rule silently becomes a descendant of the unclosed one and stops
applying (the whole Changes tab lost its styles). Malamar's CSS nests rules only in at-rules.
"""

import re
from pathlib import Path

import pytest

CSS_DIR = Path(__file__).resolve().parent.parent / "malamar_site" / "static" / "css"
COMMENT = re.compile(r"/\*.*?\*/", re.S)
STRING = re.compile(r"\"(?:\\.|[^\"\\])*\"|'(?:\\.|[^'\\])*'")


def nesting_problems(css: str) -> list[str]:
    """Where a style rule opens inside another style rule, or a block is never closed."""
    text = STRING.sub('""', COMMENT.sub(lambda m: "\n" * m.group().count("\n"), css))
    problems, stack, start = [], [], 0
    for match in re.finditer(r"[{};]", text):
        line = text.count("\n", 0, match.start()) + 1
        prelude = text[start : match.start()].strip()
        start = match.end()
        if match.group() == "{":
            kind = "at" if prelude.startswith("@") else "rule"
            if kind == "rule" and stack and stack[-1][0] == "rule":
                problems.append(f"line {line}: {prelude!r} inside the rule of line {stack[-1][1]}")
            stack.append((kind, line))
        elif match.group() == "}":
            if not stack:
                problems.append(f"line {line}: a `}}` closes nothing")
            else:
                stack.pop()
    problems += [f"line {line}: this block is never closed" for _, line in stack]
    return problems


@pytest.mark.parametrize("path", sorted(CSS_DIR.glob("*.css")), ids=lambda path: path.name)
def test_every_block_is_closed_and_no_rule_is_nested(path):
    assert nesting_problems(path.read_text()) == []


def test_the_check_finds_a_lost_brace():
    css = ".a {\n  width: 100%;\n\n.b {\n  color: red;\n}\n"
    assert nesting_problems(css) == [
        "line 4: '.b' inside the rule of line 1",
        "line 1: this block is never closed",
    ]
    assert nesting_problems("@media (x) {\n  .a { color: red; }\n}\n") == []


# What the compositor animates alone: an endless animation of anything else repaints its element
# every frame for as long as it shows (an agent at work: 15-25 % of a core per page, measured).
COMPOSITED = {"opacity", "transform"}


def endless_animations_that_repaint(css: str) -> list[str]:
    """The keyframes an infinite animation uses that change more than COMPOSITED."""
    text = COMMENT.sub("", css)
    endless = set(re.findall(r"animation:\s*([\w-]+)[^;]*\binfinite\b", text))
    problems = []
    keyframes = r"@keyframes\s+([\w-]+)\s*\{((?:[^{}]*\{[^{}]*\})*)[^{}]*\}"
    for name, body in re.findall(keyframes, text):
        changed = set(re.findall(r"([\w-]+)\s*:", body))
        if name in endless and changed - COMPOSITED:
            problems.append(f"@keyframes {name}: {sorted(changed - COMPOSITED)}")
    return problems


def test_endless_animations_change_only_what_the_compositor_draws():
    # (All the sheets together: a rule may use the keyframes of another sheet.)
    css = "\n".join(path.read_text() for path in sorted(CSS_DIR.glob("*.css")))
    assert endless_animations_that_repaint(css) == []


def test_the_check_finds_an_endless_repaint():
    css = "a { animation: glow 1s infinite; } @keyframes glow { 50% { box-shadow: 0 0 2px red; } }"
    assert endless_animations_that_repaint(css) == ["@keyframes glow: ['box-shadow']"]
    css = "a { animation: glow 1s infinite; } @keyframes glow { 50% { opacity: 1; } }"
    assert endless_animations_that_repaint(css) == []
