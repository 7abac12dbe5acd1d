"""A chat popup's messages, written in Python: `{% chat_messages chat.message_list chat_url %}`.

A long chat shows hundreds of messages, and Django's template engine spent most of the popup's
time on their markup (the same as the board's cards: tasks/templatetags/task_cards.py). The
markup is the one `chats/popup.html` had (tests and the chat's scripts read its classes and ids);
`chats.selectors.chat_popup` prepared each message (`kind`, `cards`, the upload's name and path).
"""

from html import escape

from django import template
from django.utils.safestring import mark_safe

from core.templatetags.malamar import icon, markdown_filter, reltime

register = template.Library()

INCLUDE_TITLE = "Agents see this message from their next answer on only when it is included"
CARD_ICONS = {"create_task": "kanban", "update_workspace": "settings", "rename_chat": "pencil"}


def _text(value) -> str:
    """Escaped as the templates escape a value."""
    return escape(str(value))


def _system(m) -> str:
    if m.kind == "upload":
        body = (
            f'{icon("paperclip", 14)}\n<span class="chat-system__text">You uploaded <strong '
            f'class="chat-system__file">{_text(m.upload_name)}</strong> <span class="chat-system__'
            f'path mono" title="{_text(m.upload_path)}">{_text(m.upload_path)}</span></span>'
        )
    else:
        symbol = icon("circle-alert" if m.kind == "error" else "info", 14)
        body = f'{symbol}<span class="chat-system__text">{_text(m.message)}</span>'
    role = ' role="note"' if m.kind == "error" else ""
    return (
        f'<li class="chat-msg chat-msg--system chat-msg--{_text(m.kind)}" id="msg-{_text(m.id)}">'
        f'\n<div class="chat-system"{role}>\n{body}\n'
        f'<span class="chat-system__time">{reltime(m.created_at)}</span>\n</div>\n</li>'
    )


def _card_icon(card: dict) -> str:
    if card["result"] == "failed":
        return icon("circle-alert", 14)
    if card["result"] == "ignored":
        return icon("info", 14)
    return icon(CARD_ICONS.get(card["type"], "bot"), 14)


def _card(card: dict) -> str:
    task = f' data-task-id="{_text(card["task_id"])}"' if card.get("task_id") else ""
    detail = ""
    if card["detail"]:
        detail = f' <span class="chat-action__detail">“{_text(card["detail"])}”</span>'
    status = ""
    if card["result"] == "failed":
        error = f": {_text(card['error'])}" if card["error"] else ""
        status = f'<span class="chat-action__status">Failed{error}</span>'
    elif card["result"] == "ignored":
        status = '<span class="chat-action__status">Ignored</span>'
    link = ""
    if card["href"]:
        link = (
            f'<a class="chat-action__link" href="{_text(card["href"])}">'
            f"{_text(card['link_label'])}{icon('chevron-right', 14)}</a>"
        )
    return (
        f'<li class="chat-action chat-action--{_text(card["result"])}" data-action-type='
        f'"{_text(card["type"])}"{task}>\n<span class="chat-action__icon" aria-hidden="true">'
        f'{_card_icon(card)}</span>\n<span class="chat-action__text">\n<span class="chat-action__'
        f'label">{_text(card["label"])}</span>{detail}\n{status}\n</span>\n{link}\n</li>'
    )


def _said(m, chat_url: str) -> str:
    if m.role == "user":
        author = "You"
    else:
        symbol = icon("bot" if m.agent_id else "sparkles", 14)
        author = f"{symbol}{_text(m.agent_name or 'Malamar')}"
    bubble = ""
    if m.message or not m.cards:
        bubble = (
            '<div class="chat-msg__bubble"><div class="markdown">'
            f"{markdown_filter(m.message)}</div></div>\n"
        )
    cards = ""
    if m.cards:
        items = "\n".join(_card(card) for card in m.cards)
        cards = f'<ul class="chat-actions" aria-label="Actions">\n{items}\n</ul>\n'
    message_id = _text(m.id)
    return (
        f'<li class="chat-msg chat-msg--{_text(m.role)}{"" if m.included else " is-excluded"}" '
        f'id="msg-{message_id}" data-role="{_text(m.role)}">\n<div class="chat-msg__meta">\n'
        f'<span class="chat-msg__author">{author}</span>\n'
        f'<span class="chat-msg__time">{reltime(m.created_at)}</span>\n</div>\n{bubble}{cards}'
        f'<label class="chat-include" title="{INCLUDE_TITLE}">\n<input type="checkbox" '
        f'id="include-{message_id}" name="included" value="1"{" checked" if m.included else ""}'
        f'\nhx-post="{_text(chat_url)}messages/{message_id}/included/" hx-trigger="change" '
        'hx-swap="none">\n<span>Include in context</span>\n</label>\n</li>'
    )


@register.simple_tag
def chat_messages(messages, chat_url: str) -> str:
    """The `<li>` of each message, oldest first (`chat_url`: the popup's, reversed once)."""
    return mark_safe(
        "\n".join(_system(m) if m.role == "system" else _said(m, chat_url) for m in messages)
    )
