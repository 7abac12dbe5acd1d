"""Template helpers for the pages: inline SVG icons, relative times, live-event names."""

import functools
import html
import re
from datetime import datetime

from django import template
from django.utils import timezone
from django.utils.html import escape, format_html
from django.utils.safestring import mark_safe

from core.events import EVENT_TYPES

register = template.Library()

# Lucide-style 24px stroke icons (ISC-licensed shapes, redrawn by hand).
ICONS = {
    "activity": '<path d="M22 12h-2.48a2 2 0 0 0-1.93 1.46l-2.35 8.36a.25.25 0 0 1-.48 0L9.24 '
    '2.18a.25.25 0 0 0-.48 0l-2.35 8.36A2 2 0 0 1 4.49 12H2"/>',
    "file": '<path d="M15 2H6a2 2 0 0 0-2 2v16a2 2 0 0 0 2 2h12a2 2 0 0 0 2-2V7Z"/>'
    '<path d="M14 2v4a2 2 0 0 0 2 2h4"/>',
    "list-checks": '<path d="m3 17 2 2 4-4"/><path d="m3 7 2 2 4-4"/><path d="M13 6h8"/>'
    '<path d="M13 12h8"/><path d="M13 18h8"/>',
    "alert": '<path d="m21.73 18-8-14a2 2 0 0 0-3.48 0l-8 14A2 2 0 0 0 4 21h16a2 2 0 0 0 1.73-3"/>'
    '<path d="M12 9v4"/><path d="M12 17h.01"/>',
    "arrow-down": '<path d="M12 5v14"/><path d="m19 12-7 7-7-7"/>',
    "arrow-up": '<path d="m5 12 7-7 7 7"/><path d="M12 19V5"/>',
    "bot": '<path d="M12 8V4H8"/><rect width="16" height="12" x="4" y="8" rx="2"/>'
    '<path d="M2 14h2"/><path d="M20 14h2"/><path d="M15 13v2"/><path d="M9 13v2"/>',
    "check": '<path d="M20 6 9 17l-5-5"/>',
    "chevron-down": '<path d="m6 9 6 6 6-6"/>',
    "chevron-left": '<path d="m15 18-6-6 6-6"/>',
    "chevron-right": '<path d="m9 18 6-6-6-6"/>',
    "circle-alert": '<circle cx="12" cy="12" r="10"/><path d="M12 8v4"/><path d="M12 16h.01"/>',
    "circle-check": '<circle cx="12" cy="12" r="10"/><path d="m9 12 2 2 4-4"/>',
    "clock": '<circle cx="12" cy="12" r="10"/><path d="M12 6v6l4 2"/>',
    "folder": '<path d="M20 20a2 2 0 0 0 2-2V8a2 2 0 0 0-2-2h-7.9a2 2 0 0 1-1.69-.9L9.6 '
    '3.9A2 2 0 0 0 7.93 3H4a2 2 0 0 0-2 2v13a2 2 0 0 0 2 2Z"/>',
    "git-branch": '<line x1="6" x2="6" y1="3" y2="15"/><circle cx="18" cy="6" r="3"/>'
    '<circle cx="6" cy="18" r="3"/><path d="M18 9a9 9 0 0 1-9 9"/>',
    "git-merge": '<circle cx="18" cy="18" r="3"/><circle cx="6" cy="6" r="3"/>'
    '<path d="M6 21V9a9 9 0 0 0 9 9"/>',
    "copy": '<rect width="14" height="14" x="8" y="8" rx="2" ry="2"/>'
    '<path d="M4 16c-1.1 0-2-.9-2-2V4c0-1.1.9-2 2-2h10c1.1 0 2 .9 2 2"/>',
    "grip": '<circle cx="9" cy="5" r="1"/><circle cx="9" cy="12" r="1"/><circle cx="9" cy="19" '
    'r="1"/><circle cx="15" cy="5" r="1"/><circle cx="15" cy="12" r="1"/>'
    '<circle cx="15" cy="19" r="1"/>',
    "inbox": '<path d="M22 12h-6l-2 3h-4l-2-3H2"/>'
    '<path d="M5.45 5.11 2 12v6a2 2 0 0 0 2 2h16a2 2 0 0 0 2-2v-6l-3.45-6.89A2 2 0 0 0 16.76 '
    '4H7.24a2 2 0 0 0-1.79 1.11z"/>',
    "info": '<circle cx="12" cy="12" r="10"/><path d="M12 16v-4"/><path d="M12 8h.01"/>',
    "kanban": '<rect width="18" height="18" x="3" y="3" rx="2"/><path d="M8 7v7"/>'
    '<path d="M12 7v4"/><path d="M16 7v9"/>',
    "message": '<path d="M21 15a2 2 0 0 1-2 2H7l-4 4V5a2 2 0 0 1 2-2h14a2 2 0 0 1 2 2z"/>',
    "moon": '<path d="M12 3a6 6 0 0 0 9 9 9 9 0 1 1-9-9Z"/>',
    "paperclip": '<path d="m21.44 11.05-9.19 9.19a6 6 0 0 1-8.49-8.49l8.57-8.57A4 4 0 1 1 18 '
    '8.84l-8.59 8.57a2 2 0 0 1-2.83-2.83l8.49-8.48"/>',
    "pencil": '<path d="M17 3a2.85 2.83 0 1 1 4 4L7.5 20.5 2 22l1.5-5.5Z"/><path d="m15 5 4 4"/>',
    "plus": '<path d="M5 12h14"/><path d="M12 5v14"/>',
    "link": '<path d="M10 13a5 5 0 0 0 7.54.54l3-3a5 5 0 0 0-7.07-7.07l-1.72 1.71"/>'
    '<path d="M14 11a5 5 0 0 0-7.54-.54l-3 3a5 5 0 0 0 7.07 7.07l1.71-1.71"/>',
    "log-out": '<path d="M9 21H5a2 2 0 0 1-2-2V5a2 2 0 0 1 2-2h4"/><path d="m16 17 5-5-5-5"/>'
    '<path d="M21 12H9"/>',
    "key": '<circle cx="7.5" cy="15.5" r="5.5"/><path d="m21 2-9.6 9.6"/>'
    '<path d="m15.5 7.5 3 3L22 7l-3-3"/>',
    "refresh": '<path d="M3 12a9 9 0 0 1 9-9 9.75 9.75 0 0 1 6.74 2.74L21 8"/>'
    '<path d="M21 3v5h-5"/><path d="M21 12a9 9 0 0 1-9 9 9.75 9.75 0 0 1-6.74-2.74L3 16"/>'
    '<path d="M8 16H3v5"/>',
    "search": '<circle cx="11" cy="11" r="8"/><path d="m21 21-4.3-4.3"/>',
    "send": '<path d="m22 2-7 20-4-9-9-4Z"/><path d="M22 2 11 13"/>',
    "settings": '<path d="M20 7h-9"/><path d="M14 17H5"/><circle cx="17" cy="17" r="3"/>'
    '<circle cx="7" cy="7" r="3"/>',
    "sparkles": '<path d="M9.94 15.5A2 2 0 0 0 8.5 14.06l-6.14-1.58a.5.5 0 0 1 0-.96L8.5 9.94A2 '
    "2 0 0 0 9.94 8.5l1.58-6.14a.5.5 0 0 1 .96 0L14.06 8.5A2 2 0 0 0 15.5 9.94l6.14 1.58a.5.5 0 "
    '0 1 0 .96L15.5 14.06a2 2 0 0 0-1.44 1.44l-1.58 6.14a.5.5 0 0 1-.96 0z"/>',
    "stop": '<rect width="14" height="14" x="5" y="5" rx="2"/>',
    "sun": '<circle cx="12" cy="12" r="4"/><path d="M12 2v2"/><path d="M12 20v2"/>'
    '<path d="m4.93 4.93 1.41 1.41"/><path d="m17.66 17.66 1.41 1.41"/><path d="M2 12h2"/>'
    '<path d="M20 12h2"/><path d="m6.34 17.66-1.41 1.41"/><path d="m19.07 4.93-1.41 1.41"/>',
    "terminal": '<path d="m4 17 6-6-6-6"/><path d="M12 19h8"/>',
    "trash": '<path d="M3 6h18"/><path d="M19 6v14c0 1-1 2-2 2H7c-1 0-2-1-2-2V6"/>'
    '<path d="M8 6V4c0-1 1-2 2-2h4c1 0 2 1 2 2v2"/><path d="M10 11v6"/><path d="M14 11v6"/>',
    "users": '<path d="M16 21v-2a4 4 0 0 0-4-4H6a4 4 0 0 0-4 4v2"/><circle cx="9" cy="7" r="4"/>'
    '<path d="M22 21v-2a4 4 0 0 0-3-3.87"/><path d="M16 3.13a4 4 0 0 1 0 7.75"/>',
    "x": '<path d="M18 6 6 18"/><path d="m6 6 12 12"/>',
    "more": '<circle cx="12" cy="12" r="1"/><circle cx="19" cy="12" r="1"/>'
    '<circle cx="5" cy="12" r="1"/>',
    "diff": '<path d="M12 3v14"/><path d="M5 10h14"/><path d="M5 21h14"/>',
}


@register.simple_tag
def icon(name: str, size: int = 16, css: str = ""):
    """An inline SVG icon, hidden from assistive technology (label the button instead)."""
    return _icon(name, size, css)


@functools.lru_cache(maxsize=512)
def _icon(name: str, size: int, css: str):
    """Built once per name, size and class: a board draws hundreds of the same few."""
    return format_html(
        '<svg class="icon{}" width="{}" height="{}" viewBox="0 0 24 24" fill="none" '
        'stroke="currentColor" stroke-width="2" stroke-linecap="round" stroke-linejoin="round" '
        'aria-hidden="true" focusable="false">{}</svg>',
        f" {css}" if css else "",
        size,
        size,
        mark_safe(ICONS[name]),  # constant markup from this module
    )


COPY_BUTTON = (
    '<button type="button" class="code-block__copy" aria-label="Copy code" title="Copy code">'
    f"{icon('copy', size=14)}</button>"
)


def relative_time(value: datetime, now: datetime | None = None) -> str:
    """The spec's relative format ("just now", "5 min ago", "3 hours ago", "2 days ago",
    "Jan 15", "Jan 15, 2025"). The browser re-renders it in the user's locale and time zone."""
    now = now or timezone.now()
    seconds = (now - value).total_seconds()
    if seconds < 60:
        return "just now"
    minutes = int(seconds // 60)
    if minutes < 60:
        return f"{minutes} min ago"
    hours = minutes // 60
    if hours < 24:
        return "1 hour ago" if hours == 1 else f"{hours} hours ago"
    days = hours // 24
    if days < 7:
        return "1 day ago" if days == 1 else f"{days} days ago"
    local = timezone.localtime(value)
    label = f"{MONTHS[local.month - 1]} {local.day}"
    return label if local.year == timezone.localtime(now).year else f"{label}, {local.year}"


# strftime's %b, without a strftime per time (a board or a chat writes hundreds of them).
MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


def full_time(value: datetime) -> str:
    local = timezone.localtime(value)
    month = MONTHS[local.month - 1]
    return f"{month} {local.day}, {local.year}, {local.hour:02d}:{local.minute:02d} UTC"


@register.simple_tag
def reltime(value, prefix: str = ""):
    """`<time>` with ISO datetime, a server-side fallback text and the full time on hover."""
    if not value:
        return ""
    # Only the prefix needs escaping: the times are digits, month names and punctuation (a
    # board draws hundreds of these, and format_html's escaping of each part was most of it).
    prefix = escape(prefix) if prefix else ""
    return mark_safe(
        f'<time datetime="{value.isoformat()}" data-relative data-prefix="{prefix}"'
        f' title="{full_time(value)}">{prefix}{relative_time(value)}</time>'
    )


@register.filter
def first_paragraph(text: str) -> str:
    """The first paragraph of a text (for one-glance snippets; the page clamps it further)."""
    for chunk in (text or "").strip().split("\n\n"):
        if chunk.strip():
            return chunk.strip()
    return ""


@register.simple_tag
def live_event_types() -> str:
    """The event names the page's EventSource listens for (one source of truth: core.events)."""
    return " ".join(sorted(EVENT_TYPES))


@register.filter(name="markdown")
def markdown_filter(text) -> str:
    """Render agent/user markdown as sanitised HTML (core.markdown); use inside `.markdown`.
    Each code block gets its copy button (app.js copies), added after the sanitiser, which
    never has to allow buttons."""
    # Imported on use: the worker loads this tag library for its system checks only.
    from core.markdown import CODE_BLOCK, render_markdown

    html = render_markdown(str(text or ""))  # sanitised by nh3
    # Safe: nh3 writes every quote of an attribute's value as &quot; and every "<" of a text
    # as &lt;, so this exact tag is always one of core.markdown's wrappers.
    return mark_safe(html.replace(CODE_BLOCK, CODE_BLOCK + COPY_BUTTON))


@register.filter
def tokens(value) -> str:
    """12345 → "12.3k", 2_400_000 → "2.4M"."""
    try:
        number = int(value or 0)
    except (TypeError, ValueError):
        return ""
    if number < 1000:
        return str(number)
    if number < 1_000_000:
        return f"{number / 1000:.1f}".rstrip("0").rstrip(".") + "k"
    return f"{number / 1_000_000:.1f}".rstrip("0").rstrip(".") + "M"


@register.filter
def usd(value) -> str:
    """A cost in dollars: "$3.40", "<$0.01" for tiny non-zero amounts."""
    try:
        amount = float(value)
    except (TypeError, ValueError):
        return ""
    if 0 < amount < 0.01:
        return "<$0.01"
    return f"${amount:,.2f}"


@register.filter
def run_duration(run) -> str:
    """How long a run took (or has been running): "8s", "1m 12s", "1h 3m"."""
    end = run.ended_at or timezone.now()
    seconds = max(0, int((end - run.started_at).total_seconds()))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m {seconds % 60}s"
    return f"{seconds // 3600}h {seconds % 3600 // 60}m"


@register.filter
def seconds(value) -> str:
    """A short duration given in seconds: "0.4s", "12s", "2m 5s" ("" when unknown)."""
    if value is None or value == "":
        return ""
    value = max(0.0, float(value))
    if value < 10:
        return f"{value:.1f}s"
    whole = round(value)
    if whole < 60:
        return f"{whole}s"
    return f"{whole // 60}m {whole % 60}s"


def _text(value) -> str:
    """Escaped as the templates escape a value (Django's escape is html.escape of its str)."""
    return html.escape(str(value))


def _input_attrs(attrs: dict) -> str:
    """A widget's attributes as django/forms/widgets/attrs.html writes them."""
    return "".join(
        f" {_text(name)}" if value is True else f' {_text(name)}="{_text(value)}"'
        for name, value in attrs.items()
        if value is not False
    )


def _picker_option(option) -> str:
    data = option.data
    value = "" if data["value"] is None else f' value="{_text(data["value"])}"'
    return (
        f'<li class="picker__option" data-picker-option><input type="{_text(data["type"])}" '
        f'name="{_text(data["name"])}"{value}{_input_attrs(data["attrs"])}>'
        f'<label for="{_text(option.id_for_label)}">{_text(option.choice_label)}</label></li>'
    )


@register.simple_tag
def picker_options(field) -> str:
    """components/picker.html's options, the chosen ones first: each checkbox written as
    Django's widget templates write it, without a template render per option (a "Waits for"
    list holds up to 500 tasks, and rendering them was most of the task popup's time)."""
    options = field.subwidgets
    chosen = [option for option in options if option.data["selected"]]
    others = [option for option in options if not option.data["selected"]]
    return mark_safe("".join(_picker_option(option) for option in chosen + others))


# Characters with a meaning in a pattern attribute (a JavaScript regex in its "v" mode, where
# escaping any other character outside a class is itself an error).
PATTERN_SYNTAX = re.compile(r"[\\^$.*+?()\[\]{}|/]")


@register.filter
def exact_pattern(value) -> str:
    """A pattern attribute that an input matches only when it holds `value` (spaces around aside):
    "type the name to confirm" is the browser's own form validation."""
    return r"\s*" + PATTERN_SYNTAX.sub(lambda m: "\\" + m.group(), str(value)) + r"\s*"
