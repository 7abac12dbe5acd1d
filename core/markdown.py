"""Markdown from agents and users → safe HTML.

markdown-it (CommonMark + tables + strikethrough + task lists, raw HTML off) renders, Pygments
highlights fenced code, and nh3 sanitises the result, so nothing an agent writes can run
script, load remote content or restyle the page. Rendering is cached: popups re-render the
same comments on every live refresh.
"""

from functools import lru_cache

import nh3
from markdown_it import MarkdownIt
from mdit_py_plugins.tasklists import tasklists_plugin
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import get_lexer_by_name
from pygments.util import ClassNotFound

# Longer texts are shown as plain preformatted text: rendering megabytes of agent output as
# markdown would stall the page for no reader's benefit.
MAX_MARKDOWN_CHARS = 200_000

_FORMATTER = HtmlFormatter(nowrap=True)

TAGS = {
    "div",  # a code block's wrapper (CODE_BLOCK): markdown-it writes no other, raw HTML is off
    *("p", "br", "hr", "h1", "h2", "h3", "h4", "h5", "h6", "strong", "em", "del", "s"),
    *("code", "pre", "blockquote", "ul", "ol", "li", "a", "span", "input"),
    *("table", "thead", "tbody", "tr", "th", "td"),
}
ATTRIBUTES = {
    "div": {"class"},
    "a": {"href", "title"},
    "span": {"class"},
    "code": {"class"},
    "pre": {"class"},
    "ol": {"start"},
    "ul": {"class"},
    "li": {"class"},
    "input": {"type", "checked", "disabled", "class"},
}


def _highlight(code: str, lang: str, _attrs) -> str:
    name = (lang or "").strip().split()[0].lower() if (lang or "").strip() else ""
    try:
        lexer = get_lexer_by_name(name) if name else None
    except ClassNotFound:
        lexer = None
    if lexer is None:
        return ""  # markdown-it escapes and wraps it itself
    body = highlight(code, lexer, _FORMATTER)
    return f'<pre class="highlight"><code class="language-{name}">{body}</code></pre>'


_PARSER = (
    # breaks: a single line break stays a line break, as in GitHub comments (people and agents
    # write messages line by line, not as paragraphs).
    MarkdownIt("commonmark", {"html": False, "breaks": True, "highlight": _highlight})
    .enable(["table", "strikethrough"])
    .use(tasklists_plugin)
)
# Images would load remote URLs (tracking, mixed content): show them as links instead.
_PARSER.add_render_rule(
    "image",
    lambda self, tokens, idx, options, env: (
        f'<a href="{_escape(tokens[idx].attrGet("src") or "")}">'
        f"{_escape(tokens[idx].content or 'image')}</a>"
    ),
)


def _escape(text: str) -> str:
    return (
        text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")
    )


# Each code block sits in a wrapper that its copy button joins (the `markdown` template filter):
# wrapped before sanitising, where "<pre" can only be markdown-it's own tag (it escapes every
# "<" of the text, attributes included).
CODE_BLOCK = '<div class="code-block">'


def _wrap_code_blocks(html: str) -> str:
    return html.replace("<pre", f"{CODE_BLOCK}<pre").replace("</pre>", "</pre></div>")


def sanitize(html: str) -> str:
    return nh3.clean(
        html,
        tags=TAGS,
        attributes=ATTRIBUTES,
        url_schemes={"http", "https", "mailto"},
        link_rel="noopener noreferrer nofollow",
        set_tag_attribute_values={"a": {"target": "_blank"}},
        strip_comments=True,
    )


@lru_cache(maxsize=1024)
def render_markdown(text: str) -> str:
    """Sanitised HTML for `text` (never raises; empty text gives an empty string)."""
    if not text:
        return ""
    if len(text) > MAX_MARKDOWN_CHARS:
        return f"<pre>{_escape(text)}</pre>"
    return sanitize(_wrap_code_blocks(_PARSER.render(text)))
