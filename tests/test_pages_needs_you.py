"""The "Needs you" page (issue 29): its rows across workspaces, the verdicts, retry and "mark as
read" from a row, the header's count on every page, the home page's section, what refreshes
them live, and the links notifications carry to it."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from chats import services as chat_services
from chats.models import Chat, ChatMessage
from core.actors import SYSTEM
from core.events import OutboxEvent
from core.settings_store import settings_update
from malamar_site import context_processors
from malamar_site.needs_you import LIVE_EVENTS, needs_you_count
from notifications import services as notification_services
from tasks import services
from tasks.models import Task, TaskQueueItem, TaskStatus
from tests.failures import fail_task
from tests.htmltree import parse
from tests.pages import html, hx, live_events, triggers
from tests.test_review_surfaces import fake_clis, reviewed_branch_task  # noqa: F401 (fixture)
from workspaces.services import workspace_create

pytestmark = pytest.mark.django_db


def refused(response) -> str:
    """The error toast of an answer that changes nothing on the page ("" if it is not one)."""
    toast = triggers(response).get("malamar:toast", {})
    swapped = response.headers.get("HX-Reswap") != "none"
    if response.status_code != 200 or swapped or toast.get("level") != "error":
        return ""
    return toast["message"]


def in_review(workspace, summary: str) -> Task:
    task = services.task_create(workspace=workspace, summary=summary)
    services.task_status_set(task=task, status=TaskStatus.IN_PROGRESS, actor=SYSTEM)
    services.task_status_set(task=task, status=TaskStatus.IN_REVIEW, actor=SYSTEM)
    return task


def replied_chat(workspace, title: str, reply: str = "All set up") -> Chat:
    chat = chat_services.chat_create(workspace=workspace, title=title)
    ChatMessage.objects.create(chat=chat, role="agent", message=reply, agent_name="Malamar")
    return chat


def rows(page: str, kind: str) -> list:
    return parse(page).find_all("inbox-row", tag="li", **{"data-kind": kind})


def titles(page: str, kind: str) -> list[str]:
    return [row.find("inbox-row__title").text for row in rows(page, kind)]


@pytest.fixture
def waiting_work(db):
    """Two workspaces: reviews, a failing task, one waiting for a CLI, an unread reply."""
    shop = workspace_create(title="Shop")
    blog = workspace_create(title="Blog")
    first = in_review(shop, "Checkout page")
    second = in_review(blog, "RSS feed")
    failing = services.task_create(workspace=shop, summary="Payments")
    fail_task(failing, "CLI exited with code 7\nmore")
    waiting = services.task_create(workspace=blog, summary="Images")
    TaskQueueItem.objects.filter(task=waiting).update(waiting_for_cli="codex")
    services.task_create(workspace=blog, summary="Quiet")  # waits for nothing and nobody
    chat = replied_chat(blog, "Setup")
    return {"first": first, "second": second, "failing": failing, "chat": chat, "shop": shop}


def test_the_page_lists_what_waits_in_every_workspace_with_its_actions(client, waiting_work):
    page = html(client.get("/needs-you/"))
    assert titles(page, "review") == ["Checkout page", "RSS feed"]  # oldest first
    first = parse(page).by_id(f"needs-you-task-{waiting_work['first'].id}")
    assert "Shop" in first.text and "Ready for review" in first.text
    assert first.find(tag="a").attrs["href"].endswith(f"?tab=tasks&task={waiting_work['first'].id}")
    approve = first.find(tag="form")
    assert approve.attrs["hx-post"] == f"/needs-you/tasks/{waiting_work['first'].id}/review/"
    assert approve.attrs["hx-target"] == "closest [data-needs-you]"
    assert (
        first.find("inbox-row__changes", tag="details").find(tag="textarea").attrs["name"] == "body"
    )
    assert sorted(titles(page, "trouble")) == ["Images", "Payments"]
    payments = parse(page).by_id(f"needs-you-task-{waiting_work['failing'].id}")
    assert "Failed 1 time" in payments.text and "CLI exited with code 7" in payments.text
    assert payments.find(tag="form").attrs["hx-post"].endswith("/retry/")
    images = next(row for row in rows(page, "trouble") if "Images" in row.text)
    assert "Waits for Codex CLI" in images.text and images.find(tag="form") is None
    [chat] = rows(page, "chat")
    assert "Malamar replied" in chat.text and "All set up" in chat.text and "Blog" in chat.text
    assert chat.find(tag="a").attrs["href"].endswith(f"?tab=chat&chat={waiting_work['chat'].id}")
    assert parse(page).by_id("needs-you-count").find("nav-count__n").text == "5"


def test_the_list_refreshes_on_any_workspaces_news_and_its_parts_come_from_one_url(
    client, waiting_work
):
    page = html(client.get("/needs-you/"))
    for region in ("needs-you-list", "needs-you-count"):
        assert live_events(page, region) == set(LIVE_EVENTS.split())
    assert {"chat.seen", "task.reviewed", "task.status_changed", "cli.limited"} <= set(
        LIVE_EVENTS.split()
    )
    # The header's count hears every workspace's events, on a workspace's page too.
    workspace_page = html(client.get(f"/workspaces/{waiting_work['shop'].id}/"))
    count = parse(workspace_page).by_id("needs-you-count")
    assert "data-all-workspaces" in count.attrs and count.find("nav-count__n").text == "5"
    assert html(hx(client, "get", "/needs-you/", target="needs-you-count")).count("5") == 1
    part = html(hx(client, "get", "/needs-you/", target="needs-you-list"))
    assert "<html" not in part and len(rows(part, "review")) == 2


def test_nothing_waiting_says_how_many_tasks_the_agents_work_on(client, workspace):
    task = services.task_create(workspace=workspace, summary="Busy")
    services.task_status_set(task=task, status=TaskStatus.IN_PROGRESS, actor=SYSTEM)
    page = html(client.get("/needs-you/"))
    empty = parse(page).by_id("needs-you-empty")
    assert "Nothing needs you" in empty.text and "Agents are working on 1 task." in empty.text
    assert parse(page).by_id("needs-you-count").text == ""


def test_approve_from_a_row_finishes_the_task_and_answers_the_list_without_it(client, waiting_work):
    first = waiting_work["first"]
    response = hx(
        client,
        "post",
        f"/needs-you/tasks/{first.id}/review/",
        {"verdict": "approve"},
        target="needs-you-list",
    )
    assert response.status_code == 200
    assert titles(html(response), "review") == ["RSS feed"]
    assert triggers(response)["malamar:toast"]["message"] == "Approved: the task is Done"
    assert Task.objects.get(id=first.id).status == TaskStatus.DONE
    assert first.logs.filter(event_type="review_submitted", metadata__verdict="approve").exists()
    # A second verdict on it is refused with the reason, and nothing is swapped.
    again = hx(client, "post", f"/needs-you/tasks/{first.id}/review/", {"verdict": "approve"})
    assert refused(again)
    assert "Only an In Review task can be reviewed" in triggers(again)["malamar:toast"]["message"]


def test_request_changes_from_a_row_needs_words_and_sends_the_task_back(client, waiting_work):
    second = waiting_work["second"]
    url = f"/needs-you/tasks/{second.id}/review/"
    empty = hx(client, "post", url, {"verdict": "request_changes", "body": "  "})
    assert refused(empty)
    assert triggers(empty)["malamar:toast"]["message"].startswith("Request changes needs")
    assert Task.objects.get(id=second.id).status == TaskStatus.IN_REVIEW
    response = hx(
        client,
        "post",
        url,
        {"verdict": "request_changes", "body": "Add the **tags** too"},
        target="home-needs-you",
    )
    assert response.status_code == 200
    assert parse(html(response)).find("home-inbox") is not None  # the home page's part
    assert triggers(response)["malamar:toast"]["message"] == "Sent back to the agents"
    assert Task.objects.get(id=second.id).status == TaskStatus.TODO
    assert TaskQueueItem.objects.queued().filter(task_id=second.id).exists()
    assert second.comments.get(verdict="request_changes").content == "Add the **tags** too"


@pytest.mark.django_db(transaction=True)
def test_approve_of_an_unmerged_branch_asks_merge_or_keep(client, tmp_path, fake_clis):  # noqa: F811
    task = reviewed_branch_task(tmp_path)
    url = f"/needs-you/tasks/{task.id}/review/"
    page = html(client.get("/needs-you/"))
    row = parse(page).by_id(f"needs-you-task-{task.id}")
    assert task.branch_name in row.text  # the branch it may merge
    assert parse(page).by_id("merge-choice-body") is not None
    asked = hx(client, "post", url, {"verdict": "approve"}, target="needs-you-list")
    assert asked.headers["HX-Retarget"] == "#merge-choice-body"
    dialog = parse(html(asked))
    merge = dialog.by_id("merge-choice-merge")
    assert merge.attrs["hx-post"] == url and merge.attrs["hx-target"] == "#needs-you-list"
    assert (
        '"merge": "1"' in merge.attrs["hx-vals"]
        and '"verdict": "approve"' in merge.attrs["hx-vals"]
    )
    assert '"merge": "0"' in dialog.by_id("merge-choice-keep").attrs["hx-vals"]
    assert Task.objects.get(id=task.id).status == TaskStatus.IN_REVIEW  # nothing happened yet
    merged = hx(client, "post", url, {"verdict": "approve", "merge": "1"}, target="needs-you-list")
    assert triggers(merged)["malamar:toast"]["message"] == "Merged into main and finished"
    assert "malamar:dialog-close" in triggers(merged)
    task = Task.objects.get(id=task.id)
    assert task.status == TaskStatus.DONE and task.merged_at is not None


def test_retry_and_mark_as_read_from_their_rows(client, waiting_work):
    failing = waiting_work["failing"]
    response = hx(client, "post", f"/needs-you/tasks/{failing.id}/retry/", target="needs-you-list")
    assert triggers(response)["malamar:toast"]["message"] == "Retrying now"
    assert Task.objects.get(id=failing.id).retry_not_before is None
    chat = waiting_work["chat"]
    seen = hx(client, "post", f"/needs-you/chats/{chat.id}/seen/", target="needs-you-list")
    assert rows(html(seen), "chat") == []
    gone = hx(client, "post", "/needs-you/chats/nope/seen/")
    assert refused(gone) and "no longer exists" in triggers(gone)["malamar:toast"]["message"]


def test_a_look_at_a_chat_tells_other_tabs_once(db, workspace):
    chat = replied_chat(workspace, "Setup")
    assert chat_services.chat_seen(chat=chat)
    assert OutboxEvent.objects.filter(type="chat.seen", payload__chat_id=chat.id).count() == 1
    assert not chat_services.chat_seen(chat=chat)  # nothing new since: no event, no write
    assert OutboxEvent.objects.filter(type="chat.seen").count() == 1


def test_a_chat_opened_with_the_page_is_seen(client, workspace):
    chat = replied_chat(workspace, "Setup")
    page = client.get(f"/workspaces/{workspace.id}/", {"tab": "chat", "chat": chat.id})
    assert parse(html(page)).by_id("chat-dialog") is not None
    assert not rows(html(client.get("/needs-you/")), "chat")


def test_without_javascript_a_verdict_comes_back_to_the_page_with_a_message(client, waiting_work):
    first = waiting_work["first"]
    response = client.post(f"/needs-you/tasks/{first.id}/review/", {"verdict": "approve"})
    assert response.status_code == 302 and response["Location"] == "/needs-you/"
    page = html(client.get("/needs-you/"))
    assert "Approved: the task is Done" in parse(page).by_id("flash-messages").text


def test_the_home_page_shows_what_waits_first_and_nothing_when_nothing_does(client, waiting_work):
    page = parse(html(client.get("/")))
    section = page.by_id("home-needs-you")
    assert section.attrs["hx-get"] == "/needs-you/" and "data-needs-you" in section.attrs
    assert set(section.attrs["data-live"].split()) == set(LIVE_EVENTS.split())
    assert "5 things need you" in section.find("home-inbox__title").text
    assert "2 to review · 2 failing or waiting · 1 reply" in section.text
    shown = [row.attrs["data-kind"] for row in section.find_all("inbox-row")]
    assert shown == ["review", "review", "trouble", "trouble", "chat"]
    # It comes before the workspaces.
    order = [el.attrs.get("id") for el in page.iter() if el.attrs.get("id")]
    assert order.index("home-needs-you") < order.index("workspace-results")
    Task.objects.all().delete()
    Chat.objects.all().delete()
    assert parse(html(client.get("/"))).by_id("home-needs-you").find("home-inbox") is None


def test_the_header_count_is_read_once_by_a_page_and_never_by_a_fragment(
    client, waiting_work, monkeypatch
):
    reads = []

    def counted() -> int:
        reads.append(1)
        return 5

    monkeypatch.setattr(context_processors, "needs_you_count", counted)
    hx(client, "get", f"/workspaces/{waiting_work['shop'].id}/tasks/", target="task-board")
    assert reads == []
    page = html(client.get("/settings/"))
    assert reads == [1] and parse(page).by_id("needs-you-count").find("nav-count__n").text == "5"
    with CaptureQueriesContext(connection) as queries:
        assert needs_you_count() == 5
    assert len(queries) == 3


def test_notifications_link_to_the_task_and_to_needs_you(
    task, monkeypatch, django_capture_on_commit_callbacks
):
    sent = {}
    monkeypatch.setattr(notification_services, "_pool", Immediate())
    monkeypatch.setattr(notification_services, "mailgun_send", lambda _v, **mail: sent.update(mail))
    monkeypatch.setattr(
        notification_services, "webhook_post", lambda _url, payload: sent.update(hook=payload)
    )
    settings_update(
        changes={
            "mailgun_api_key": "key-1",
            "mailgun_domain": "mg.example.com",
            "mailgun_from_email": "m@mg.example.com",
            "mailgun_to_email": "me@example.com",
            "webhook_urls": ["http://127.0.0.1:9/hook"],
        }
    )
    with django_capture_on_commit_callbacks(execute=True):
        notification_services.notify_task_in_review(task=task, last_comment="done")
    assert f"?tab=tasks&task={task.id}" in sent["text"]
    assert "Everything that waits for you: http://" in sent["text"]
    assert sent["text"].rstrip().endswith("/needs-you/")
    assert sent["hook"]["needs_you_link"].endswith("/needs-you/")
    assert sent["hook"]["link"].endswith(f"?tab=tasks&task={task.id}")


class Immediate:
    """A sending pool that sends at once (the test reads what was sent)."""

    def submit(self, function, *args):
        function(*args)


def test_a_review_whose_checks_fail_is_marked_in_its_row_and_counted(client, waiting_work):
    from tasks.models import ChecksStatus

    Task.objects.filter(pk=waiting_work["first"].pk).update(checks_status=ChecksStatus.FAILING)
    Task.objects.filter(pk=waiting_work["second"].pk).update(checks_status=ChecksStatus.PASSED)
    page = parse(html(client.get("/needs-you/")))
    failing = page.by_id(f"needs-you-checks-{waiting_work['first'].id}")
    assert failing.text == "Checks failing" and "badge--danger" in failing.attrs["class"]
    assert page.by_id(f"needs-you-checks-{waiting_work['second'].id}").text == "Checks passed"
    assert "1 with checks failing" in page.by_id("needs-you-review-title").text
