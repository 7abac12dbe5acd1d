"""Review verdicts (issue 29, DESIGN "Review verdicts"): approve, request changes and comment
through the JSON API; line comments anchored to the task's snapshots, that reach the agents'
input and turn outdated; Done means merged (the merge choice, no second merge, deletes that
ask, chains that wait for a merge). Real git repositories, the fake CLIs as agents, task passes
in-process."""

import threading
from pathlib import Path

from agents.services import agent_create
from runner.files import task_input_path
from runner.git import git_text
from tasks import branches
from tasks.models import Task, TaskComment, TaskQueueItem, TaskStatus
from tasks.selectors import activity_entries
from tasks.services import task_create
from tests import test_branches
from tests.conftest import error_of
from tests.gitrepo import commit, make_repo
from worker.pipeline import TaskPass
from workspaces.services import workspace_create

# The branch tests' repository, data folder (autouse) and database marker.
repo, data_dir, pass_db = test_branches.repo, test_branches.data_dir, test_branches.pass_db

FIVE_LINES = "one\\ntwo\\nthree\\nfour\\nfive\\n"


def make_workspace(repo: Path, instruction: str, **fields):
    workspace = workspace_create(
        title="Repo", working_directory_mode="static", working_directory_path=str(repo), **fields
    )
    agent_create(workspace=workspace, name="Implementer", instruction=instruction)
    return workspace


def run_pass(task) -> Task:
    item = TaskQueueItem.objects.queued().get(task_id=task.id)
    assert TaskQueueItem.objects.claim(item.id)
    TaskPass(item, stop=threading.Event(), shutdown=threading.Event()).run()
    return Task.objects.select_related("workspace").get(id=task.id)


def in_review(
    repo,
    instruction=f"@fake write app.py {FIVE_LINES}",
    summary="Feature",
    description="",
    **fields,
):
    """A task whose agent rewrote app.py (five lines), waiting In Review."""
    workspace = make_workspace(repo, instruction, **fields)
    task = task_create(workspace=workspace, summary=summary, description=description)
    task = run_pass(task)
    assert task.status == TaskStatus.IN_REVIEW
    return task


def branch_task(repo, **fields):
    """A branch task In Review whose branch adds feature.txt (its description says so: the
    workspace's other tasks write nothing)."""
    return in_review(
        repo,
        instruction="@fake skip",
        description="@fake write feature.txt done\\n",
        isolation="branch",
        **fields,
    )


def review(api, task, **body):
    return api.post(f"/api/tasks/{task.id}/review", body)


def logs(task, event_type: str) -> list[dict]:
    rows = task.logs.filter(event_type=event_type).order_by("created_at")
    return [row.metadata for row in rows]


# --- the three verdicts ----------------------------------------------------------------------


@pass_db
def test_request_changes_posts_the_comments_and_sends_the_task_back(api, repo):
    task = in_review(repo)
    response = review(
        api,
        task,
        verdict="request_changes",
        body="Two things.",
        line_comments=[
            {"path": "app.py", "line": 2, "body": "Spell it out."},
            {"path": "app.py", "line": 4, "end_line": 5, "body": "Drop these."},
        ],
    )
    assert response.status_code == 200, response.content
    answer = response.json()
    assert answer["verdict"] == "request_changes" and answer["task"]["status"] == "todo"
    body, first, second = answer["comments"]
    assert (body["content"], body["line"], body["verdict"]) == (
        "Two things.",
        None,
        "request_changes",
    )
    assert first["line"] == {
        "path": "app.py",
        "line": 2,
        "end_line": 2,
        "side": "new",
        "run_id": "",
        "tree": first["line"]["tree"],
        "code": "two",
        "outdated": False,
    }
    assert len(first["line"]["tree"]) == 40
    assert (second["line"]["code"], second["content"]) == ("four\nfive", "Drop these.")
    assert TaskQueueItem.objects.queued().filter(task_id=task.id).exists()
    assert logs(task, "review_submitted") == [
        {"verdict": "request_changes", "comments": 3, "line_comments": 2}
    ]
    listed = api.get(f"/api/tasks/{task.id}/comments").json()["comments"]
    assert [c["line"]["path"] for c in listed if c["line"]] == ["app.py", "app.py"]
    words = [entry["text"] for entry in activity_entries(task)]
    assert "User requested changes (2 line comments)" in words


@pass_db
def test_the_comment_verdict_is_a_note_that_starts_no_pass(api, repo):
    task = in_review(repo)
    response = review(api, task, verdict="comment", body="Looks good so far; tests next time.")
    assert response.status_code == 200, response.content
    assert response.json()["task"]["status"] == "in_review"
    assert not TaskQueueItem.objects.filter(task_id=task.id, status="queued").exists()
    note = TaskComment.objects.notes().get(task_id=task.id)
    assert (note.content, note.kind) == ("Looks good so far; tests next time.", "user")
    activity = api.get(f"/api/tasks/{task.id}/logs").json()["logs"]
    assert activity[-1]["event_type"] == "review_submitted"
    assert activity[-1]["metadata"]["verdict"] == "comment"


@pass_db
def test_approve_finishes_a_task_without_a_branch(api, repo):
    task = in_review(repo)
    response = review(api, task, verdict="approve", body="Thanks!")
    assert response.status_code == 200, response.content
    assert response.json()["task"]["status"] == "done" and response.json()["merge"] is None
    assert logs(task, "review_submitted")[0]["verdict"] == "approve"
    assert not TaskQueueItem.objects.queued().filter(task_id=task.id).exists()


@pass_db
def test_approve_merges_a_branch_task_then_finishes_it(api, repo):
    task = branch_task(repo)
    branch = task.branch_name
    refused = review(api, task, verdict="approve")
    assert refused.status_code == 409
    assert error_of(refused)["code"] == "MERGE_CHOICE_REQUIRED"
    assert (error_of(refused)["branch"], error_of(refused)["base"]) == (branch, "main")
    assert api.get(f"/api/tasks/{task.id}").json()["status"] == "in_review"

    response = review(api, task, verdict="approve", merge=True)
    assert response.status_code == 200, response.content
    answer = response.json()
    main = git_text("rev-parse", "main", cwd=repo)
    assert answer["merge"]["how"] == "fast-forward" and answer["merge"]["commit"] == main
    assert answer["task"]["status"] == "done" and answer["task"]["merge_commit"] == main
    assert answer["task"]["is_unmerged"] is False
    assert (repo / "feature.txt").read_text() == "done\n"
    assert not branches.worktree_path(task.id).exists()
    assert not git_text("branch", "--list", branch, cwd=repo)  # merged: deleted
    assert logs(task, "branch_merged")[0]["commit"] == main
    # No second merge, nothing to discard.
    again = api.post(f"/api/tasks/{task.id}/merge")
    assert again.status_code == 409 and "already merged into main" in error_of(again)["message"]
    assert api.post(f"/api/tasks/{task.id}/discard").status_code == 409
    assert task.comments.filter(content__startswith="Merged").count() == 1


@pass_db
def test_a_refused_merge_leaves_the_task_in_review_and_says_why(api, repo):
    task = in_review(repo, instruction="@fake write app.py print('agent')", isolation="branch")
    commit(repo, {"app.py": "print('user')\n"}, "user edit")
    response = review(api, task, verdict="approve", body="Ship it", merge=True)
    assert response.status_code == 409
    refusal = error_of(response)
    assert refusal["conflicts"] == ["app.py"] and refusal["dirty"] == []
    assert "these files conflict" in refusal["message"]
    task.refresh_from_db()
    assert task.status == TaskStatus.IN_REVIEW and task.merged_at is None
    assert not logs(task, "review_submitted")  # the verdict did not happen
    assert not task.comments.filter(content="Ship it").exists()
    assert "these files conflict" in task.comments.order_by("-created_at").first().content


@pass_db
def test_finish_without_merging_keeps_the_branch_and_merging_later_works(api, repo):
    task = branch_task(repo)
    response = review(api, task, verdict="approve", merge=False)
    assert response.status_code == 200, response.content
    done = response.json()["task"]
    assert (done["status"], done["is_unmerged"], done["merged_at"]) == ("done", True, None)
    assert git_text("branch", "--list", task.branch_name, cwd=repo)
    assert not (repo / "feature.txt").exists()
    assert logs(task, "branch_kept") == [{"branch": task.branch_name, "base": "main"}]
    merged = api.post(f"/api/tasks/{task.id}/merge")
    assert merged.status_code == 200, merged.content
    assert merged.json()["task"]["is_unmerged"] is False
    assert (repo / "feature.txt").read_text() == "done\n"


@pass_db
def test_move_to_done_on_a_branch_task_needs_the_merge_choice(api, repo):
    task = branch_task(repo)
    url = f"/api/tasks/{task.id}"
    refused = api.put(url, {"status": "done"})
    assert refused.status_code == 409 and error_of(refused)["code"] == "MERGE_CHOICE_REQUIRED"
    mixed = api.put(url, {"status": "done", "merge": True, "summary": "Renamed"})
    assert mixed.status_code == 400 and "alone" in error_of(mixed)["message"]
    no_status = api.put(url, {"merge": False})
    assert no_status.status_code == 400 and 'status "done"' in error_of(no_status)["message"]
    assert api.get(url).json()["summary"] == "Feature"
    merged = api.put(url, {"status": "done", "merge": True})
    assert merged.status_code == 200, merged.content
    assert merged.json()["status"] == "done" and merged.json()["merged_at"]
    assert (repo / "feature.txt").exists()


@pass_db
def test_a_branch_its_base_already_holds_needs_no_choice(api, repo):
    task = in_review(repo, instruction="@fake skip", isolation="branch")  # no commits
    response = api.put(f"/api/tasks/{task.id}", {"status": "done"})
    assert response.status_code == 200, response.content
    assert response.json()["merged_at"] and not response.json()["is_unmerged"]
    assert logs(task, "branch_merged")[0]["how"] == "already merged"
    assert not git_text("branch", "--list", task.branch_name, cwd=repo)


# --- refusals ---------------------------------------------------------------------------------


@pass_db
def test_review_refusals_say_what_is_wrong(api, repo):
    task = in_review(repo)

    def refused(status, **body):
        response = review(api, task, **body)
        assert response.status_code == status, response.content
        return error_of(response)["message"]

    assert "verdict" in refused(400, verdict="merge")
    assert "needs a comment" in refused(400, verdict="request_changes", body="  ")
    assert "needs a comment" in refused(400, verdict="comment")
    line = {"path": "app.py", "line": 1, "body": "x"}
    assert "is not among the changed files" in refused(
        400, verdict="comment", line_comments=[{**line, "path": "README.md"}]
    )
    assert "has 5 lines" in refused(
        400, verdict="comment", line_comments=[{**line, "line": 4, "end_line": 9}]
    )
    assert "must not come before" in refused(
        400, verdict="comment", line_comments=[{**line, "line": 3, "end_line": 2}]
    )
    assert "line must be a line number" in refused(
        400, verdict="comment", line_comments=[{**line, "line": 0}]
    )
    assert "has no run" in refused(400, verdict="comment", line_comments=[{**line, "run_id": "x"}])
    assert "needs a body" in refused(400, verdict="comment", line_comments=[{**line, "body": ""}])
    assert "is not a known field" in refused(
        400, verdict="comment", line_comments=[{**line, "colour": "red"}]
    )
    assert "At most 100" in refused(400, verdict="comment", line_comments=[line] * 101)
    assert not TaskComment.objects.filter(task_id=task.id, verdict__gt="").exists()
    # State: only an In Review task is reviewed.
    Task.objects.filter(id=task.id).update(status=TaskStatus.DONE)
    assert "Only an In Review task" in refused(409, verdict="approve")
    assert review(api, Task(id="nope"), verdict="approve").status_code == 404


@pass_db
def test_line_comments_on_the_old_side_and_on_one_run(api, repo):
    task = in_review(repo)
    run = task.runs.get()
    new_file = {"path": "app.py", "line": 1, "body": "was fine", "side": "old"}
    response = review(api, task, verdict="comment", line_comments=[{**new_file, "run_id": run.id}])
    assert response.status_code == 200, response.content
    anchor = response.json()["comments"][0]["line"]
    assert (anchor["code"], anchor["side"], anchor["run_id"]) == ("print(1)", "old", run.id)
    assert anchor["tree"] == run.tree_after  # the snapshot it was made on
    added = in_review(
        make_repo(repo.parent / "second", {"README.md": "x\n"}),
        instruction="@fake write new.txt a\\n",
        summary="New file",
    )
    old_side = review(
        api,
        added,
        verdict="comment",
        line_comments=[{"path": "new.txt", "line": 1, "side": "old", "body": "?"}],
    )
    assert (
        old_side.status_code == 400
        and "is new: it has no old lines" in error_of(old_side)["message"]
    )


# --- what agents receive; outdated -----------------------------------------------------------


@pass_db
def test_three_line_comments_reach_the_next_agent_and_turn_outdated_when_rewritten(api, repo):
    task = in_review(repo)
    rewrite = "@fake write app.py one\\nTWO\\nthree\\nfour\\nfive\\n"
    response = review(
        api,
        task,
        verdict="request_changes",
        line_comments=[
            {"path": "app.py", "line": 2, "body": f"Capitals, please.\n{rewrite}"},
            {"path": "app.py", "line": 4, "end_line": 5, "body": "Keep these two."},
            {"path": "app.py", "line": 1, "side": "old", "body": "Why was print(1) removed?"},
        ],
    )
    assert response.status_code == 200, response.content

    task = run_pass(task)  # the Implementer reads them (and rewrites line 2)
    text = task_input_path(task.id).read_text()
    assert "Comment on `app.py`, line 2:\n\n```\ntwo\n```\n\nCapitals, please." in text.replace(
        "\\n", "\n"
    )
    assert "Comment on `app.py`, lines 4 to 5:\n\n```\nfour\nfive\n```\n\nKeep these two." in (
        text.replace("\\n", "\n")
    )
    assert (
        "Comment on `app.py`, line 1 (before the changes):\n\n```\nprint(1)\n```\n\n"
        "Why was print(1) removed?" in text.replace("\\n", "\n")
    )
    assert '"review": "requested changes"' in text
    assert "outdated" not in text  # nothing had changed them yet
    assert (repo / "app.py").read_text().splitlines()[1] == "TWO"

    listed = api.get(f"/api/tasks/{task.id}/comments").json()["comments"]
    outdated = {c["line"]["line"]: c["line"]["outdated"] for c in listed if c["line"]}
    # Line 2 was rewritten; lines 4-5 were not; the old side's file changed since.
    assert outdated == {2: True, 4: False, 1: True}

    # The next agent reads which ones are outdated (a note: it waits for the next pass).
    assert review(api, task, verdict="comment", body="One more look.").status_code == 200
    assert not TaskQueueItem.objects.queued().filter(task_id=task.id).exists()
    assert api.put(f"/api/tasks/{task.id}", {"status": "todo"}).status_code == 200
    run_pass(task)
    text = task_input_path(task.id).read_text().replace("\\n", "\n")
    assert "line 2 (outdated: later changes rewrote these lines):" in text
    assert "lines 4 to 5:" in text and "lines 4 to 5 (outdated" not in text
    assert '"review": "a note from the review (the task waited In Review)"' in text
    assert "One more look." in text


@pass_db
def test_a_request_for_changes_keeps_the_task_going_until_read_and_a_note_does_not(api, repo):
    """DESIGN "No lost comment" meets "Review verdicts": the body and line comments of a
    request for changes keep the task going until an agent's input held them; a note (the
    verdict "Comment") never does, and is delivered with the next pass all the same."""
    task = in_review(repo)
    assert review(api, task, verdict="comment", body="A note.").status_code == 200
    assert not TaskComment.objects.undelivered().filter(task_id=task.id).exists()
    line = {"path": "app.py", "line": 2, "body": "This line."}
    answer = review(api, task, verdict="request_changes", body="Fix it.", line_comments=[line])
    assert answer.status_code == 200, answer.content
    waiting = TaskComment.objects.undelivered().filter(task_id=task.id)
    waiting_for = sorted(waiting.values_list("content", flat=True))
    assert waiting_for == ["Fix it.", "This line."]

    task = run_pass(task)
    assert task.status == TaskStatus.IN_REVIEW
    reviewed = TaskComment.objects.filter(task_id=task.id, content__in=["A note.", *waiting_for])
    assert [c.delivered_at is not None for c in reviewed] == [True] * 3


# --- Done means merged: chains, deletes -------------------------------------------------------


def chained(repo):
    """A branch task In Review and a task that waits for it (not started)."""
    first = branch_task(repo)
    second = task_create(workspace=first.workspace, summary="Next", blocked_by=[first.id])
    item = TaskQueueItem.objects.queued().get(task_id=second.id)
    assert not TaskQueueItem.objects.claim(item.id)  # waits for its blocker
    return first, second


@pass_db
def test_a_chain_waits_for_the_merge_and_starts_from_a_base_that_holds_it(api, repo):
    first, second = chained(repo)
    assert api.put(f"/api/tasks/{first.id}", {"status": "done"}).status_code == 409
    item = TaskQueueItem.objects.queued().get(task_id=second.id)
    assert not TaskQueueItem.objects.claim(item.id)  # the refused move released nothing
    assert review(api, first, verdict="approve", merge=True).status_code == 200
    second = run_pass(second)
    assert "feature.txt" in git_text("ls-tree", "--name-only", second.branch_name, cwd=repo)


@pass_db
def test_finish_without_merging_lets_the_chain_start_from_the_base_as_it_is(api, repo):
    first, second = chained(repo)
    assert review(api, first, verdict="approve", merge=False).status_code == 200
    second = run_pass(second)
    assert "feature.txt" not in git_text("ls-tree", "--name-only", second.branch_name, cwd=repo)


@pass_db
def test_deletes_that_lose_unmerged_work_ask_first(api, repo):
    task = branch_task(repo)
    workspace_id = task.workspace_id
    refused = api.delete(f"/api/tasks/{task.id}")
    assert refused.status_code == 409
    error = error_of(refused)
    assert error["code"] == "UNMERGED_BRANCHES"
    assert error["branches"] == [
        {"task_id": task.id, "summary": "Feature", "branch": task.branch_name, "base": "main"}
    ]
    refused = api.delete(f"/api/workspaces/{workspace_id}")
    assert refused.status_code == 409 and error_of(refused)["branches"][0]["task_id"] == task.id
    assert review(api, task, verdict="approve", merge=False).status_code == 200
    refused = api.delete(f"/api/workspaces/{workspace_id}/tasks/done")
    assert refused.status_code == 409 and task.branch_name in error_of(refused)["message"]
    assert git_text("branch", "--list", task.branch_name, cwd=repo)  # nothing was deleted
    response = api.delete(f"/api/workspaces/{workspace_id}/tasks/done?confirm=true")
    assert response.json() == {"deleted": 1}
    assert not git_text("branch", "--list", task.branch_name, cwd=repo)
    assert api.delete(f"/api/workspaces/{workspace_id}").status_code == 204  # nothing to lose


@pass_db
def test_reopening_a_merged_task_starts_a_new_branch_from_the_base(api, repo):
    task = branch_task(repo)
    assert review(api, task, verdict="approve", merge=True).status_code == 200
    assert api.put(f"/api/tasks/{task.id}", {"status": "todo"}).status_code == 200
    reopened = api.get(f"/api/tasks/{task.id}").json()
    assert (reopened["branch_name"], reopened["merged_at"], reopened["merge_commit"]) == (
        "",
        None,
        "",
    )
    task = run_pass(Task.objects.get(id=task.id))
    assert task.branch_name and task.status == TaskStatus.IN_REVIEW
    assert not any("deleted outside Malamar" in c.content for c in task.comments.all())


# --- which lines a later snapshot changed -----------------------------------------------------


def test_changed_hunks_read_quoted_names_and_tell_insertions_inside_a_range(tmp_path):
    from runner import diffs, snapshots
    from tasks.anchors import _overlaps

    folder = tmp_path / "work"
    folder.mkdir()
    odd = 'say "hi".txt'  # git quotes this name in a diff header
    (folder / odd).write_text("".join(f"line {n}\n" for n in range(1, 11)))
    (folder / "gone.txt").write_text("x\n")
    before = snapshots.take(folder)
    lines = (folder / odd).read_text().splitlines(keepends=True)
    lines.insert(5, "inserted after line 5\n")  # inside 4-6, after the end of 1-5
    (folder / odd).write_text("".join(lines))
    (folder / "gone.txt").unlink()
    after = snapshots.take(folder)
    found = diffs.changed_hunks(before.store, before.tree, after.tree, [odd, "gone.txt", "no"])
    assert found == {odd: [(5, 0)], "gone.txt": diffs.WHOLE_FILE}
    assert _overlaps(found[odd], 4, 6) and not _overlaps(found[odd], 1, 5)
    assert not _overlaps(found[odd], 6, 8) and _overlaps(found["gone.txt"], 1, 1)
    assert diffs.file_lines(after.store, after.tree, odd) == (
        [line.rstrip("\n") for line in lines],
        False,
    )
