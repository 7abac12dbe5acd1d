"""The review's fragments (issue 29): the In Review composer's verdicts, Approve's and "Move to
Done"'s merge choice, line comments in the Comments tab and under their lines in the Changes
tab (outdated ones above the diff), long comments that collapse, the popup head's phone menu
and the Activity tab's order. Real git repositories, the fake CLIs, task passes in-process."""

import json
import os

import pytest

from tasks.models import LineCommentDraft, Task, TaskComment, TaskStatus
from tests.htmltree import parse
from tests.pages import html, hx, live_events, triggers
from tests.stack import FAKES_BIN
from tests.test_reviews import FIVE_LINES, branch_task, in_review, run_pass
from workspaces.services import workspace_create

pass_db = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def data_dir(tmp_path, settings, monkeypatch):
    settings.DATA_DIR = tmp_path / "malamar-data"
    settings.DATA_DIR.mkdir()
    monkeypatch.setenv("PATH", f"{FAKES_BIN}{os.pathsep}{os.environ['PATH']}")
    return settings.DATA_DIR


@pytest.fixture
def repo(tmp_path):
    from tests.gitrepo import make_repo

    return make_repo(tmp_path / "repo", {"README.md": "hello\n", "app.py": "print(1)\n"})


def composer(client, task) -> str:
    return html(hx(client, "get", f"/tasks/{task.id}/", target="task-composer"))


def review(client, task, verdict: str, content: str = "", line_comments=None):
    data = {"verdict": verdict, "content": content}
    if line_comments is not None:
        data["line_comments"] = json.dumps(line_comments)
    return hx(client, "post", f"/tasks/{task.id}/review/", data)


def changes(client, task, run: str = "") -> str:
    return html(hx(client, "get", f"/tasks/{task.id}/changes/?run={run}"))


# --- the composer ------------------------------------------------------------------------------


@pass_db
def test_an_in_review_task_offers_three_verdicts_and_others_the_comment_box(client, repo):
    task = in_review(repo)
    page = composer(client, task)
    form = parse(page).by_id("task-comment-form")
    assert form.attrs["hx-post"] == f"/tasks/{task.id}/review/"
    verdicts = [b.attrs["value"] for b in parse(page).find_all(tag="button", name="verdict")]
    assert verdicts == ["request_changes", "comment", "approve"]
    assert "data-review-pending" in page  # the drafted line comments' count
    # The footer refreshes itself when the status changes (a verdict, a move elsewhere).
    whole = html(hx(client, "get", f"/tasks/{task.id}/"))
    assert {"task.status_changed"} <= live_events(whole, "task-composer")

    Task.objects.filter(id=task.id).update(status=TaskStatus.DONE)
    page = composer(client, task)
    assert parse(page).by_id("task-comment-form").attrs["hx-post"].endswith("/comments/new/")
    assert 'name="verdict"' not in page


@pass_db
def test_comment_leaves_a_note_and_request_changes_sends_it_back(client, repo):
    task = in_review(repo)
    response = review(client, task, "comment", "Looks good so far.")
    assert triggers(response)["malamar:toast"]["message"].startswith("Note added")
    assert triggers(response)["review:sent"] == {"task_id": task.id}
    note = parse(html(response)).find("verdict")
    assert note is not None and note.text == "Note"
    assert Task.objects.get(id=task.id).status == TaskStatus.IN_REVIEW

    response = review(client, task, "", "Rename it.")  # Ctrl+Enter presses no button
    assert triggers(response)["malamar:toast"]["message"].startswith("Changes requested")
    assert "Requested changes" in html(response)
    assert Task.objects.get(id=task.id).status == TaskStatus.TODO


@pass_db
def test_a_refused_review_keeps_what_was_typed_and_says_why(client, repo):
    task = in_review(repo)
    response = review(client, task, "request_changes", "")
    assert response.headers["HX-Retarget"] == "#task-comment-form"
    form = parse(html(response)).by_id("task-comment-form")  # app.js drops the stand-in
    assert "Request changes needs a comment" in form.by_id("task_comment_errors").text
    assert form.find(tag="textarea").attrs["aria-invalid"] == "true"
    bad_line = [{"path": "app.py", "line": 99, "body": "Here"}]
    response = review(client, task, "comment", "Typed text", bad_line)
    page = html(response)
    assert "line 99 is not one of them" in page and "Typed text" in page
    assert not TaskComment.objects.filter(task=task).exclude(kind="system").exists()


@pass_db
def test_approve_finishes_a_task_without_a_branch(client, repo):
    task = in_review(repo)
    response = review(client, task, "approve")
    assert triggers(response)["malamar:toast"]["message"] == "Approved"
    assert Task.objects.get(id=task.id).status == TaskStatus.DONE


@pass_db
def test_approve_on_an_unmerged_branch_asks_how_and_merges(client, repo):
    task = branch_task(repo)
    page = composer(client, task)
    approve = parse(page).by_id("task-review-approve")
    assert approve.attrs["popovertarget"] == "task-approve-choice"
    choice = parse(page).by_id("task-approve-choice")
    assert "Merge into main and finish" in choice.text
    assert "Finish without merging (keep the branch)" in choice.text

    # A checkout of main with uncommitted changes: the merge is refused, the task stays.
    (repo / "README.md").write_text("edited by hand\n")
    response = review(client, task, "approve_merge")
    assert "uncommitted" in parse(html(response)).by_id("task_comment_errors").text
    assert Task.objects.get(id=task.id).status == TaskStatus.IN_REVIEW
    (repo / "README.md").write_text("hello\n")

    response = review(client, task, "approve_merge")
    assert triggers(response)["malamar:toast"]["message"] == "Approved and merged into main"
    task = Task.objects.get(id=task.id)
    assert task.status == TaskStatus.DONE and task.merged_at is not None
    head = html(hx(client, "get", f"/tasks/{task.id}/", target="task-head"))
    merged = parse(head).by_id("task-branch-merged").text
    assert merged.startswith(f"Merged into main ({task.merge_commit[:7]},")
    assert 'id="task-merge"' not in head and 'id="task-discard"' not in head


@pass_db
def test_approve_without_merging_marks_the_task_unmerged(client, repo):
    task = branch_task(repo)
    response = review(client, task, "approve_keep")
    assert (
        triggers(response)["malamar:toast"]["message"] == "Approved; the branch is kept, unmerged"
    )
    head = html(hx(client, "get", f"/tasks/{task.id}/", target="task-head"))
    assert parse(head).by_id("task-unmerged").text == "unmerged"
    assert 'id="task-merge"' in head  # the merge, later
    delete = parse(head).by_id("task-delete").attrs["data-confirm-text"]
    assert "which was never merged into main" in delete
    # Deleting the workspace names it too.
    settings = html(client.get(f"/workspaces/{task.workspace_id}/settings/"))
    unmerged = parse(settings).by_id("delete-unmerged").text
    assert "1 task holds work that was never merged" in unmerged and task.branch_name in unmerged


# --- line comments --------------------------------------------------------------------------


@pass_db
def test_a_line_comment_shows_its_lines_and_sits_under_its_line_in_the_diff(client, repo):
    task = in_review(repo)
    lines = [{"path": "app.py", "line": 2, "end_line": 3, "body": "Why these two?"}]
    review(client, task, "comment", "", lines)
    comment = TaskComment.objects.get(task=task, anchor_path="app.py")
    page = html(hx(client, "get", f"/tasks/{task.id}/", target="task-comments"))
    item = parse(page).by_id(f"comment-{comment.id}")
    link = item.find("line-anchor__link")
    assert link.text.strip() == "app.py, lines 2\u20133"
    assert link.attrs["data-review-focus"] == comment.id and link.attrs["data-changes-run"] == ""
    assert item.find("line-anchor__code").text == "two three"  # (whitespace collapsed)

    tab = changes(client, task)
    assert parse(tab).find("changes").attrs["data-review-task"] == task.id
    row = parse(tab).by_id(f"diff-comment-{comment.id}")
    assert row.tag == "tr" and "Why these two?" in row.text
    # It follows the row of new line 3 (the last line it names).
    rows = tab.split(f'id="diff-comment-{comment.id}"')[0]
    last_row = rows[rows.rindex('<tr class="diff__line') :]
    assert '<td class="diff__no">3</td>' in last_row


@pass_db
def test_an_outdated_line_comment_is_marked_and_still_readable(client, repo):
    task = in_review(repo)
    lines = [{"path": "app.py", "line": 2, "body": "Capitals."}]
    review(client, task, "request_changes", "", lines)
    comment = TaskComment.objects.get(task=task, anchor_path="app.py")
    Task.objects.filter(id=task.id).update(
        description="@fake write app.py one\\nTWO\\nthree\\nfour\\nfive\\n"
    )
    run_pass(task)
    page = html(hx(client, "get", f"/tasks/{task.id}/", target="task-comments"))
    anchor = parse(page).by_id(f"comment-{comment.id}").find("line-anchor")
    assert "outdated" in anchor.text and anchor.find("line-anchor__code").text == "two"
    tab = changes(client, task)
    listed = parse(tab).by_id(f"diff-comment-{comment.id}")
    assert listed.tag == "li" and "is-outdated" in listed.attrs["class"]
    assert "Capitals." in listed.text and "outdated" in listed.text


@pass_db
def test_the_changes_tab_takes_line_comments_only_while_in_review(client, repo):
    workspace = workspace_create(
        title="R", working_directory_mode="static", working_directory_path=str(repo)
    )
    from agents.services import agent_create
    from tasks.services import task_create

    agent_create(workspace=workspace, name="Impl", instruction=f"@fake write app.py {FIVE_LINES}")
    task = run_pass(task_create(workspace=workspace, summary="F"))
    assert 'tabindex="0"' in changes(client, task)
    Task.objects.filter(id=task.id).update(status=TaskStatus.DONE)
    tab = changes(client, task)
    assert "data-review-task" not in tab and 'tabindex="0"' not in tab


# --- line comments drafted in the Changes tab, kept on the server ----------------------------


def draft(client, task, line: int, end_line: int | None = None, body="A note.", **fields):
    data = {"path": "app.py", "side": "new", "line": line, "end_line": end_line or line}
    return hx(
        client, "post", f"/tasks/{task.id}/drafts/", {**data, "run": "", "body": body, **fields}
    )


def pending(page: str, pending_id: str):
    return parse(page).by_id(pending_id)


@pass_db
def test_a_draft_is_kept_under_its_line_and_counted_until_deleted(client, repo):
    task = in_review(repo)
    response = draft(client, task, 2, 3, "Why these two?")
    added = LineCommentDraft.objects.get(task=task)
    row = parse(html(response)).find("diff__draft")
    assert row.tag == "tr" and "Why these two?" in row.text and "lines 2\u20133" in row.text
    delete = row.find_all(tag="button")[0].attrs
    assert delete["hx-post"] == f"/tasks/{task.id}/drafts/{added.id}/delete/"
    for pending_id in ("task-changes-pending", "task-review-pending"):  # (out of band)
        count = pending(html(response), pending_id)
        assert count.attrs["hx-swap-oob"] == "true" and "hidden" not in count.attrs
        assert count.text == "1 comment pending: sent with your verdict"
    draft(client, task, 5)

    # A reload (or another device): the composer counts them, the diff shows them under their
    # last lines; a draft made on one run's diff shows there only.
    draft(client, task, 1, run="other-run")
    count = pending(composer(client, task), "task-review-pending")
    assert count.text == "3 comments pending: sent with your verdict"
    tab = changes(client, task)
    assert tab.count('class="diff__draft"') == 2
    rows = tab.split("Why these two?")[0]
    assert '<td class="diff__no">3</td>' in rows[rows.rindex('<tr class="diff__line') :]

    response = hx(client, "post", f"/tasks/{task.id}/drafts/{added.id}/delete/")
    assert "diff__draft" not in html(response)
    count = pending(html(response), "task-changes-pending")
    assert count.text == "2 comments pending: sent with your verdict"
    assert LineCommentDraft.objects.filter(task=task).count() == 2
    assert changes(client, task).count('class="diff__draft"') == 1


@pass_db
def test_a_draft_with_no_text_or_on_a_task_not_in_review_is_refused(client, repo):
    task = in_review(repo)
    response = draft(client, task, 2, body="  ")
    assert triggers(response)["malamar:toast"] == {
        "level": "error",
        "message": "Write the comment first",
    }
    response = draft(client, task, 3, 2)
    assert (
        "end_line (2) must not come before line (3)"
        in triggers(response)["malamar:toast"]["message"]
    )
    Task.objects.filter(id=task.id).update(status=TaskStatus.DONE)
    response = draft(client, task, 2)
    assert (
        "Only an In Review task can be reviewed" in triggers(response)["malamar:toast"]["message"]
    )
    assert not LineCommentDraft.objects.filter(task=task).exists()


@pass_db
def test_a_verdict_sends_the_drafts_and_they_are_gone(client, repo):
    task = in_review(repo)
    draft(client, task, 1, body="Why one?")
    draft(client, task, 5, body="And five.")
    response = review(client, task, "comment")  # (no body: the drafts are the review)
    assert triggers(response)["review:sent"] == {"task_id": task.id}
    sent = TaskComment.objects.filter(task=task, verdict="comment").order_by("created_at")
    assert [(c.anchor_start_line, c.content) for c in sent] == [(1, "Why one?"), (5, "And five.")]
    assert not LineCommentDraft.objects.filter(task=task).exists()
    assert "diff__draft" not in changes(client, task)
    # The tab and the composer reload after a verdict (the drafts' rows and count go).
    whole = parse(html(hx(client, "get", f"/tasks/{task.id}/")))
    for region in ("task-changes", "task-composer"):
        assert "review:sent from:body" in whole.by_id(region).attrs["hx-trigger"]


@pass_db
def test_a_refused_verdict_keeps_the_drafts_and_the_api_leaves_them_alone(client, api, repo):
    task = in_review(repo)
    draft(client, task, 9, body="A line the diff does not have.")
    response = review(client, task, "request_changes")
    assert "review:sent" not in triggers(response)
    assert LineCommentDraft.objects.filter(task=task).count() == 1
    LineCommentDraft.objects.filter(task=task).update(start_line=2, end_line=2)
    # The API's review sends what it is given: the person's drafts wait for their verdict.
    response = api.post(f"/api/tasks/{task.id}/review", {"verdict": "comment", "body": "Hm."})
    assert response.status_code == 200
    assert LineCommentDraft.objects.filter(task=task).count() == 1
    assert not TaskComment.objects.filter(task=task, anchor_path="app.py").exists()


# --- long comments, the head, activity -------------------------------------------------------


@pass_db
def test_a_long_comment_collapses_behind_show_all(client, repo):
    task = in_review(repo)
    log = "\n".join(f"line {n} of a pasted log" for n in range(8000))  # ~190 KB
    TaskComment.objects.create(
        task=task, workspace=task.workspace, user_id="u", content=log, kind="user"
    )
    TaskComment.objects.create(
        task=task, workspace=task.workspace, user_id="u", content="Short", kind="user"
    )
    page = parse(html(hx(client, "get", f"/tasks/{task.id}/", target="task-comments")))
    long_bodies = page.find_all("comment__body--long")
    assert len(long_bodies) == 1 and "line 7999 of a pasted log" in long_bodies[0].text
    more = page.find("comment__more")
    assert more.tag == "details" and "Show all (" in more.text


@pass_db
def test_the_head_keeps_the_primary_action_out_of_its_menu(client, repo):
    task = in_review(repo)
    head = parse(html(hx(client, "get", f"/tasks/{task.id}/", target="task-head")))
    primary = head.by_id("task-actions")
    assert primary.find(tag="button", id="task-move-done") is not None
    menu = head.by_id("task-head-more")
    assert "popover" in menu.attrs
    for button in ("task-move-todo", "task-delete"):
        assert menu.find(tag="button", id=button) is not None
    assert head.by_id("task-head-more-toggle").attrs["popovertarget"] == "task-head-more"


@pass_db
def test_activity_shows_the_runs_before_the_history(client, repo):
    task = in_review(repo)
    page = html(hx(client, "get", f"/tasks/{task.id}/", target="task-activity"))
    assert page.index('id="task-runs-title"') < page.index('id="task-log-title"')
