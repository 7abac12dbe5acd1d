"""Markdown from agents and users renders richly and can never run script."""

from html.parser import HTMLParser

import pytest
from django.template import Context, Template

from core.markdown import MAX_MARKDOWN_CHARS, render_markdown

HOSTILE = [
    "<script>alert(1)</script>",
    "<img src=x onerror=alert(1)>",
    '<a href="javascript:alert(1)">x</a>',
    "[click](javascript:alert(1))",
    "[click](JaVaScRiPt:alert(1))",
    "[data](data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==)",
    "[vb](vbscript:msgbox(1))",
    '<iframe src="https://evil.example"></iframe>',
    "<svg onload=alert(1)>",
    '<div style="position:fixed;inset:0">overlay</div>',
    "```html\n<script>alert(1)</script>\n```",
    "![x](https://evil.example/track.png)",
    '[x](https://ok.example "t\\" onmouseover=\\"alert(1)")',
    "<style>body{display:none}</style>",
    "<form action=https://evil.example><button>go</button></form>",
]


class Elements(HTMLParser):
    """Every element and attribute a browser would build from the HTML."""

    def __init__(self, html: str):
        super().__init__()
        self.found: list[tuple[str, dict]] = []
        self.feed(html)

    def handle_starttag(self, tag, attrs):
        self.found.append((tag, dict(attrs)))


SAFE_TAGS = {"p", "a", "pre", "code", "span", "em", "strong", "br", "div"}


@pytest.mark.parametrize("text", HOSTILE)
def test_hostile_markdown_never_produces_active_content(text):
    for tag, attrs in Elements(render_markdown(text)).found:
        assert tag in SAFE_TAGS, tag
        assert not any(name.startswith("on") or name == "style" for name in attrs), attrs
        href = (attrs.get("href") or "").strip().lower()
        assert not href or href.startswith(("http://", "https://", "mailto:")), href


def test_images_become_links_and_links_open_safely():
    html = render_markdown("![diagram](https://example.com/a.png) [docs](https://example.com)")
    assert '<a href="https://example.com/a.png"' in html and ">diagram</a>" in html
    assert 'rel="noopener noreferrer nofollow"' in html


def test_tables_lists_task_lists_and_code_render():
    text = (
        "## Plan\n\n| file | change |\n|---|---|\n| a.py | edit |\n\n"
        "1. first\n2. second\n\n- [x] done\n- [ ] todo\n\n> note\n\n"
        "```python\ndef f():\n    return 1\n```\n\nInline `code` and **bold** ~~gone~~."
    )
    html = render_markdown(text)
    assert "<h2>Plan</h2>" in html
    assert "<table>" in html and "<td>a.py</td>" in html
    assert "<ol>" in html and "<li>first</li>" in html
    assert 'type="checkbox"' in html and "checked" in html and "disabled" in html
    assert "<blockquote>" in html
    assert '<pre class="highlight"><code class="language-python">' in html
    assert '<span class="k">def</span>' in html  # Pygments token classes
    assert "<code>code</code>" in html and "<strong>bold</strong>" in html
    assert "<s>gone</s>" in html or "<del>gone</del>" in html


def test_unknown_language_and_plain_fences_are_escaped_text():
    html = render_markdown("```nosuchlang\n<b>x</b>\n```")
    assert "&lt;b&gt;x&lt;/b&gt;" in html and "<b>" not in html


def test_huge_text_is_shown_escaped_without_markdown():
    text = "<script>x</script>" + "a" * MAX_MARKDOWN_CHARS
    html = render_markdown(text)
    assert html.startswith("<pre>&lt;script&gt;")


def test_template_filter_renders_safe_html():
    template = Template("{% load malamar %}<div class='markdown'>{{ text|markdown }}</div>")
    html = template.render(Context({"text": "**hi** <script>alert(1)</script>"}))
    assert "<strong>hi</strong>" in html
    assert "&lt;script&gt;" in html and "<script>" not in html
    assert Template("{% load malamar %}{{ none|markdown }}").render(Context({})) == ""


def test_single_line_breaks_are_kept_outside_code():
    html = render_markdown("first line\nsecond line\n\n```\ncode\nmore\n```")
    assert "first line<br>" in html or "first line<br />" in html
    assert "<pre><code>code\nmore\n</code></pre>" in html


def filtered(text: str) -> str:
    return Template("{% load malamar %}{{ text|markdown }}").render(Context({"text": text}))


def test_each_code_block_gets_a_copy_button_and_text_cannot_make_one():
    text = "Run:\n\n```python\nprint(1)\n```\n\n    indented\n\n- in a list:\n\n  ```\n  x\n  ```"
    found = Elements(filtered(text)).found
    wrappers = [attrs for tag, attrs in found if tag == "div"]
    buttons = [attrs for tag, attrs in found if tag == "button"]
    assert len(wrappers) == len(buttons) == 3 == [tag for tag, _ in found].count("pre")
    assert all(b == {"type": "button", "class": "code-block__copy"} | b for b in buttons)
    # The wrapper's markup written as text, in a link's title or in code stays text.
    for hostile in (
        '<div class="code-block"><pre>x</pre></div>',
        '[x](https://ok.example "<div class=\\"code-block\\"><pre>")',
        '`<div class="code-block">` and [y](https://ok.example "</pre></div>")',
    ):
        found = Elements(filtered(hostile)).found
        assert [tag for tag, _ in found if tag in ("div", "button", "pre")] == [], hostile
