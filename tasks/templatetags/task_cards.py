"""The board's cards, written in Python: `{% task_cards column.tasks %}`.

A board draws up to 200 cards, and Django's template engine spent ~0.35 ms on each (two thirds
of the page at 2,000 tasks): the markup is built here, the links' fixed parts looked up once.
The markup is the one `tasks/board.html` had (tests and tasks.js read its classes and ids); a
failing card's error block is still the template's `card_error` partial (it is shared with the
popup, and few cards fail).
"""

import functools
from html import escape
from urllib.parse import quote, quote_plus

from django import template
from django.template.loader import get_template
from django.urls import get_script_prefix, reverse
from django.utils.http import RFC3986_SUBDELIMS
from django.utils.safestring import mark_safe
from django.utils.text import Truncator

from core.templatetags.malamar import icon, reltime, seconds
from tasks.models import ChecksStatus, TaskStatus
from workspaces.links import workspace_tab_url

register = template.Library()

CARD_ERROR = "tasks/board.html#card_error"
SUMMARY_IN_LABEL = 60  # characters of the summary in the move button's label
WAITING_FOR_PERSON = (TaskStatus.IN_REVIEW, TaskStatus.DONE)
URL_SAFE = RFC3986_SUBDELIMS + "/~:@"  # what django.urls.reverse() leaves unquoted
MINUS = "\u2212"  # before the lines removed: the minus sign, as wide as the "+"


@functools.lru_cache(maxsize=8)
def _detail_url_prefix(script_prefix: str) -> str:
    """`/tasks/` of `/tasks/<id>/`: resolved once, not once per card."""
    marker = "0"
    return reverse("task_detail", args=[marker])[: -len(marker) - 1]


@functools.lru_cache(maxsize=1024)
def _tasks_tab_url(script_prefix: str, workspace_id: str) -> str:
    return workspace_tab_url(workspace_id, "tasks")


class _Links:
    """A card's links, their fixed parts looked up once per column rather than per card."""

    def __init__(self):
        self.script_prefix = get_script_prefix()
        self.detail_prefix = _detail_url_prefix(self.script_prefix)

    def detail(self, task_id: str) -> str:
        """reverse("task_detail", args=[task_id]), quoted as reverse() quotes."""
        return f"{self.detail_prefix}{quote(task_id, safe=URL_SAFE)}/"

    def move_choices(self, task_id: str) -> str:
        """reverse("task_move_choices", args=[task_id]): the detail's URL and "move/"."""
        return f"{self.detail(task_id)}move/"

    def task_tab(self, workspace_id: str, task_id: str) -> str:
        """workspace_tab_url(workspace_id, "tasks", task=task_id), without its urlencode."""
        tab = _tasks_tab_url(self.script_prefix, workspace_id)
        return escape(f"{tab}&task={quote_plus(task_id)}")


def _plural(count: int) -> str:
    return "" if count == 1 else "s"


def _move_label(summary: str) -> str:
    # Truncator counts characters as the template's truncatechars did (a short summary as is).
    short = (
        summary if len(summary) <= SUMMARY_IN_LABEL else Truncator(summary).chars(SUMMARY_IN_LABEL)
    )
    return escape(short)


@register.simple_tag
def checks_badge(task, badge_id: str = "") -> str:
    """The checks' verdict once the task waits for the person (issue 30): "Checks passed"
    (their names and times on hover) or "Checks failing"; "" otherwise."""
    if task.status not in WAITING_FOR_PERSON:
        return ""
    id_attr = f' id="{escape(badge_id)}"' if badge_id else ""
    if task.checks_status == ChecksStatus.PASSED:
        ran = ", ".join(
            f"{escape(str(r.get('name', '')))} ({escape(seconds(r.get('duration')))})"
            for r in task.checks_result or ()
        )
        return mark_safe(
            f'<span class="badge badge--success checks-badge"{id_attr} title="Checks passed: '
            f'{ran}">{icon("circle-check", 12)}Checks passed</span>'
        )
    if task.checks_status == ChecksStatus.FAILING:
        return mark_safe(
            f'<span class="badge badge--danger checks-badge"{id_attr} title="The agents could not'
            f' make the checks pass: you decide">{icon("circle-alert", 12)}Checks failing'
            "</span>"
        )
    return ""


def _working(task) -> str:
    run = task.current_run
    agent = escape(run.agent_name) if run else "Working"
    action = ""
    if run:
        action = (
            f'<span class="task-card__action" data-task-current="{escape(task.id)}" '
            f'data-current-run="{escape(run.id)}">{escape(run.current_action or "Starting…")}'
            "</span>"
        )
    return (
        '<span class="task-card__working"><span class="spinner" aria-hidden="true"></span>'
        f'<span class="task-card__agent">{agent}</span>{action}</span>'
    )


def _waiting_cli(task) -> str:
    label, reason = escape(task.waiting_label), escape(task.waiting_reason)
    if reason:
        title = (
            f"{label} cannot run: this task continues where it stopped once it works again "
            "(Settings → CLIs)"
        )
    else:
        title = f"{label} is out of quota: this task continues where it stopped when it is back"
    return (
        f'<span class="badge badge--waiting task-card__waiting" data-task-waiting='
        f'"{escape(task.id)}" title="{title}">{icon("clock", 12)}Waits for {label}'
        f"{': ' + reason if reason else ''}</span>"
    )


def _meta(task) -> str:
    parts = []
    if task.is_priority:
        parts.append(f'<span class="badge badge--priority">{icon("arrow-up", 12)}Priority</span>')
    if task.is_unmerged:
        parts.append(
            '<span class="badge badge--warning task-card__unmerged" title="Finished without '
            f'merging {escape(task.branch_name)}">unmerged</span>'
        )
    parts.append(checks_badge(task))
    if task.changes_files:
        files = task.changes_files
        parts.append(
            f'<span class="badge badge--count task-card__changes" title="{files} file'
            f'{_plural(files)} changed"><span class="diff-plus">+{task.changes_added}</span> '
            f'<span class="diff-minus">{MINUS}{task.changes_removed}</span></span>'
        )
    if task.comment_count:
        count, s = task.comment_count, _plural(task.comment_count)
        parts.append(
            f'<span class="badge badge--count" title="{count} comment{s}">'
            f'{icon("message", 12)}{count}<span class="visually-hidden"> comment{s}</span>'
            "</span>"
        )
    if task.blockers and not task.is_waiting:
        count = len(task.blockers)
        parts.append(
            f'<span class="badge task-card__chain" title="Waited for {count} task{_plural(count)}">'
            f'{icon("link", 12)}<span class="visually-hidden">Part of a chain</span></span>'
        )
    parts.append(f'<span class="task-card__time">{reltime(task.updated_at)}</span>')
    return f'<span class="task-card__meta">{"".join(parts)}</span>'


def _waiting_for_tasks(task, links: _Links) -> str:
    blockers = ", ".join(
        f'<a href="{href}" hx-get="{links.detail(blocker.id)}" hx-target="#task-dialog-body" '
        f'hx-push-url="{href}" class="task-card__blocker">{escape(blocker.summary)}</a>'
        for blocker in task.open_blockers
        for href in [links.task_tab(task.workspace_id, blocker.id)]
    )
    return (
        f'<p class="task-card__waiting" data-task-waiting="{escape(task.id)}">'
        f"{icon('link', 12)}<span>Waiting for</span>\n{blockers}</p>"
    )


def card(task, links: _Links | None = None) -> str:
    """One card (`tasks.selectors.board` prepared the task: blockers, run, error, CLI wait)."""
    task_id = escape(task.id)
    links = links or _Links()
    href = links.task_tab(task.workspace_id, task.id)
    classes = f"task-card status--{escape(task.status)}"
    classes += " is-working" if task.is_processing else ""
    classes += " task-card--priority" if task.is_priority else ""
    blocked_by = ""
    if task.blocked_by:
        blocked_by = f' data-blocked-by="{escape(" ".join(task.blocked_by))}"'
    error = ""
    if task.error_state:
        error = get_template(CARD_ERROR).render({"task": task})
    # The move button's grip is drawn by CSS (an inline icon on each of up to 200 cards weighed
    # ~75 KB); its id keeps the focus on it across the board's refresh (htmx).
    return (
        f'<li class="task-card-item" id="task-card-{task_id}" data-task-id="{task_id}" '
        f'draggable="true"{blocked_by}>\n'
        '<button type="button" class="btn btn--ghost btn--icon btn--sm task-card__move" '
        f'id="task-card-move-{task_id}" data-card-move hx-get="{links.move_choices(task.id)}" '
        'hx-target="#task-move-body" aria-haspopup="dialog" '
        f'aria-label="Move “{_move_label(task.summary)}” to another column" '
        'title="Move to another column (or drag the card)"></button>\n'
        f'<a class="{classes}" id="task-link-{task_id}" href="{href}" '
        f'hx-get="{links.detail(task.id)}" hx-target="#task-dialog-body" hx-push-url="{href}">'
        f'<span class="task-card__summary">{escape(task.summary)}</span>'
        f"{_working(task) if task.is_processing else ''}{error}"
        f"{_waiting_cli(task) if task.waiting_label else ''}{_meta(task)}</a>"
        f"{_waiting_for_tasks(task, links) if task.is_waiting else ''}</li>\n"
    )


@register.simple_tag
def task_cards(tasks) -> str:
    """The `<li>` cards of one column, in order."""
    links = _Links()
    return mark_safe("".join(card(task, links) for task in tasks))
