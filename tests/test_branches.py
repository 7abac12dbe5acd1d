"""Branch per task (issue 18): worktrees under the data directory, a commit per agent run,
merge, discard and delete, parallel tasks; real git repositories made in each test, the fake
CLIs as agents, task passes in-process."""

import json
import os
import re
import shutil
import threading
from pathlib import Path

import pytest

from agents.services import agent_create
from core.actors import USER
from core.errors import Conflict, ValidationFailed
from malamar_site.services import workspace_delete
from runner.git import git, git_text
from runner.models import AgentRun
from tasks import branches
from tasks.models import QueueStatus, Task, TaskComment, TaskQueueItem, TaskStatus
from tasks.services import (
    comment_create_and_send_around,
    task_branch_merge,
    task_create,
    task_delete,
)
from tests.conftest import error_of
from tests.gitrepo import commit, make_repo
from tests.htmltree import parse
from tests.live import wait_until
from tests.pages import element_text, elements, html, hx, triggers
from tests.stack import FAKES_BIN
from worker import jobs, pickup, pipeline, prompts
from worker.loop import Worker
from worker.pipeline import TaskPass
from workspaces.services import workspace_create, workspace_update

pass_db = pytest.mark.django_db(transaction=True)  # on_commit hooks run (worktree removal)


@pytest.fixture
def repo(tmp_path) -> Path:
    return make_repo(tmp_path / "repo", {"README.md": "hello\n", "app.py": "print(1)\n"})


@pytest.fixture(autouse=True)
def data_dir(tmp_path, settings, monkeypatch):
    settings.DATA_DIR = tmp_path / "malamar-data"
    settings.DATA_DIR.mkdir()
    monkeypatch.setenv("PATH", f"{FAKES_BIN}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("MALAMAR_FAKE_LOG", str(tmp_path / "fake.log"))
    return settings.DATA_DIR


def isolated(repo: Path, agents=(("Implementer", "Work."),), **fields):
    workspace = workspace_create(
        title="Repo",
        working_directory_mode="static",
        working_directory_path=str(repo),
        isolation="branch",
        **fields,
    )
    for name, instruction in agents:
        agent_create(workspace=workspace, name=name, instruction=instruction, cli_type="claude")
    return workspace


def run_pass(task) -> Task:
    item = TaskQueueItem.objects.queued().get(task_id=task.id)
    assert TaskQueueItem.objects.claim(item.id)
    TaskPass(item, stop=threading.Event(), shutdown=threading.Event()).run()
    return Task.objects.select_related("workspace").get(id=task.id)


def user_state(repo: Path) -> tuple:
    """What the user sees of their checkout."""
    return (
        git_text("status", "--porcelain", "--untracked-files=all", cwd=repo),
        git_text("rev-parse", "HEAD", cwd=repo),
        git_text("symbolic-ref", "HEAD", cwd=repo),
        sorted(p.name for p in repo.iterdir()),
    )


def log_of(task, event_type: str) -> list[dict]:
    return [log.metadata for log in task.logs.filter(event_type=event_type).order_by("created_at")]


def system_comments(task) -> list[str]:
    return list(
        TaskComment.objects.filter(task_id=task.id, kind__in=["system", "error"])
        .order_by("created_at")
        .values_list("content", flat=True)
    )


def branch_files(repo: Path, branch: str) -> set[str]:
    return set(git_text("ls-tree", "-r", "--name-only", branch, cwd=repo).splitlines())


# --- settings --------------------------------------------------------------------------------


def test_branch_per_task_needs_a_static_git_repository(db, repo, tmp_path):
    with pytest.raises(ValidationFailed, match="static working directory") as error:
        workspace_create(title="T", isolation="branch")
    assert error.value.field == "isolation"
    plain = tmp_path / "plain"
    plain.mkdir()
    with pytest.raises(ValidationFailed, match="missing does not exist: create it first"):
        workspace_create(
            title="T",
            working_directory_mode="static",
            working_directory_path=str(tmp_path / "missing"),
            isolation="branch",
        )
    for path in (plain, repo / "sub"):
        (repo / "sub").mkdir(exist_ok=True)
        with pytest.raises(ValidationFailed, match="not the top folder of one"):
            workspace_create(
                title="T",
                working_directory_mode="static",
                working_directory_path=str(path),
                isolation="branch",
            )
    with pytest.raises(ValidationFailed, match="Base branch nope does not exist") as error:
        isolated(repo, base_branch="nope")
    assert error.value.field == "base_branch"
    workspace = isolated(repo, base_branch="main", parallel_tasks=3)
    assert (workspace.isolated, workspace.parallel_limit) == (True, 3)
    with pytest.raises(ValidationFailed, match="static working directory"):
        workspace_update(workspace=workspace, working_directory_mode="temp")


def test_branch_per_task_without_git_says_so(db, repo, monkeypatch):
    monkeypatch.setattr("runner.git.shutil.which", lambda name: None)
    with pytest.raises(ValidationFailed, match="needs git: install the git package"):
        isolated(repo)


def test_parallel_tasks_need_branch_per_task(db, repo):
    with pytest.raises(ValidationFailed, match="parallel_tasks above 1 needs isolation"):
        workspace_create(title="T", parallel_tasks=2)
    for bad in (0, 17, "2", True):
        with pytest.raises(ValidationFailed, match="parallel_tasks must be"):
            isolated(repo, parallel_tasks=bad)
    with pytest.raises(ValidationFailed, match="setup_command cannot be read"):
        isolated(repo, setup_command="echo 'unclosed")
    workspace = workspace_create(title="Plain")
    assert (workspace.isolation, workspace.parallel_limit, workspace.base_branch) == (
        "none",
        1,
        "",
    )


def test_the_api_sets_and_refuses_isolation(api, repo, tmp_path):
    created = api.post(
        "/api/workspaces",
        {"title": "A", "working_directory_mode": "static", "working_directory_path": str(repo)},
    ).json()
    url = f"/api/workspaces/{created['id']}"
    assert created["isolation"] == "none" and created["parallel_tasks"] == 1
    response = api.put(url, {"isolation": "branch", "parallel_tasks": 2, "setup_command": "true"})
    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["isolation"], body["parallel_tasks"], body["setup_command"]) == (
        "branch",
        2,
        "true",
    )
    plain = tmp_path / "plain"
    plain.mkdir()
    response = api.put(url, {"working_directory_path": str(plain)})
    assert response.status_code == 400
    assert "git repository" in error_of(response)["message"]


def test_the_settings_page_shows_the_isolation_error(client, db, tmp_path):
    workspace = workspace_create(title="Page")
    form = {
        "title": "Page",
        "working_directory_mode": "temp",
        "retention_days": 7,
        "stall_kill_minutes": 0,
        "notify_on_error": "inherit",
        "notify_on_in_review": "inherit",
        "isolation": "branch",
        "parallel_tasks": 1,
    }
    response = client.post(f"/workspaces/{workspace.id}/settings/", form)
    assert response.status_code == 422
    errors = [error.text for error in parse(html(response)).find_all("field__error")]
    assert "Branch per task needs a static working directory" in " ".join(errors)
    page = parse(client.get(f"/workspaces/{workspace.id}/settings/").content.decode())
    for name in ("isolation", "base_branch", "setup_command", "parallel_tasks"):
        assert page.by_id("isolation-settings").find(name=name) is not None, name


# --- a task on its branch --------------------------------------------------------------------


@pass_db
def test_the_next_agent_reads_the_commit_of_the_one_before_as_the_database_has_it(
    repo, monkeypatch
):
    """The Implementer goes before the Planner's finish is written (worker.pipeline's early go):
    its input shows the Planner's branch commit log, the very row that finish writes."""
    inputs = []
    write_private = pipeline.write_private
    monkeypatch.setattr(
        pipeline, "write_private", lambda p, text: inputs.append(text) or write_private(p, text)
    )
    workspace = isolated(
        repo, agents=[("Planner", "@fake write PLAN.md the\\splan"), ("Implementer", "@fake skip")]
    )
    task = run_pass(task_create(workspace=workspace, summary="Plan it"))

    [committed] = task.logs.filter(event_type="branch_committed")
    second = next(text for text in inputs if 'You are the agent "Implementer"' in text)
    row = prompts.log_row(committed)
    assert json.dumps(row["metadata"])[1:-1] in second and row["created_at"] in second
    assert committed.metadata["commit"] == git_text("rev-parse", task.branch_name, cwd=repo)


@pass_db
def test_each_agent_run_is_a_commit_on_the_task_branch_and_the_checkout_is_untouched(repo):
    before = user_state(repo)
    workspace = isolated(
        repo,
        agents=[
            ("Planner", "@fake write PLAN.md the\\splan"),
            ("Implementer", "@fake write app.py print(2)"),
            ("Reviewer", "@fake skip"),
        ],
    )
    task = task_create(workspace=workspace, summary="Add the login page!")
    task = run_pass(task)

    assert task.status == TaskStatus.IN_REVIEW
    assert task.branch_name == branches.branch_name_for(task)
    assert task.branch_name.endswith("-add-the-login-page")
    assert task.branch_base == "main"
    path = branches.worktree_path(task.id)
    assert path.is_dir() and git_text("branch", "--show-current", cwd=path) == task.branch_name
    history = git_text("log", "--format=%an <%ae>|%s", f"main..{task.branch_name}", cwd=repo)
    assert history.splitlines() == [
        "Implementer <implementer@malamar.local>|Implementer: work on task “Add the login page!”",
        "Planner <planner@malamar.local>|Planner: work on task “Add the login page!”",
    ]
    assert git_text("show", f"{task.branch_name}:app.py", cwd=repo) == "print(2)"
    assert user_state(repo) == before  # the user's checkout: same files, HEAD, status
    assert [m["agent_name"] for m in log_of(task, "branch_committed")] == [
        "Planner",
        "Implementer",
    ]
    log_lines = Path(os.environ["MALAMAR_FAKE_LOG"]).read_text().splitlines()
    runs = [json.loads(line) for line in log_lines]
    assert {run["cwd"] for run in runs} == {str(path)}
    text = Path(runs[0]["input_path"]).read_text()
    assert "## Git Branch" in text and f"`{task.branch_name}`, made from `main`" in text


@pass_db
def test_a_second_pass_continues_on_the_same_branch(repo):
    workspace = isolated(repo, agents=[("Implementer", "@fake write notes.txt one")])
    task = run_pass(task_create(workspace=workspace, summary="Notes"))
    first = task.branch_name
    git("checkout", "-q", "-b", "elsewhere", cwd=repo)  # the user moves on: the base stays main
    comment_create_and_send_around(
        task=task, content="@fake write notes.txt two", actor=USER
    )  # → Todo
    task = run_pass(task)
    assert (task.branch_name, task.branch_base) == (first, "main")
    assert git_text("show", f"{first}:notes.txt", cwd=repo) == "two"
    assert len(git_text("log", "--format=%H", f"main..{first}", cwd=repo).splitlines()) == 2


@pass_db
def test_a_repository_an_agent_makes_in_the_worktree_is_committed_as_its_files(repo):
    # `git init newapp` (no commit yet), then a file: `git add -A` alone refuses the folder
    # ("does not have a commit checked out") and every run of the task failed on it.
    git_init = (
        "write newapp/.git/HEAD ref:\\srefs/heads/main\\n write newapp/.git/objects/.keep x"
        " write newapp/.git/refs/.keep x"
    )
    workspace = isolated(
        repo,
        agents=[
            ("Builder", f"@fake {git_init} write newapp/src/main.rs fn\\smain(){{}}"),
            ("Fixer", "@fake append newapp/src/main.rs //ok"),
        ],
    )
    task = run_pass(task_create(workspace=workspace, summary="New app"))
    assert task.status == TaskStatus.IN_REVIEW, system_comments(task)
    assert "newapp/src/main.rs" in branch_files(repo, task.branch_name)
    assert git_text("show", f"{task.branch_name}:newapp/src/main.rs", cwd=repo) == (
        "fn main(){}//ok"
    )
    assert [m["agent_name"] for m in log_of(task, "branch_committed")] == ["Builder", "Fixer"]


# --- setup command ---------------------------------------------------------------------------


@pass_db
def test_the_setup_command_runs_once_in_a_new_worktree_and_shows_in_the_activity(repo):
    script = "import os; print('installed in', os.path.basename(os.getcwd()))"
    workspace = isolated(repo, setup_command=f'python3 -c "{script}"')
    task = run_pass(task_create(workspace=workspace, summary="Setup"))
    [setup] = log_of(task, "setup_ran")
    assert setup["exit_code"] == 0 and setup["output"] == f"installed in {task.id}"
    comment_create_and_send_around(task=task, content="again", actor=USER)
    task = run_pass(task)
    assert len(log_of(task, "setup_ran")) == 1  # once per worktree


@pass_db
def test_a_failing_setup_is_a_task_error_with_its_output_and_no_agent_runs(repo):
    script = "import sys; print('npm ERR! missing package.json'); sys.exit(3)"
    workspace = isolated(repo, setup_command=f'python3 -c "{script}"')
    task = run_pass(task_create(workspace=workspace, summary="Setup fails"))
    [error] = system_comments(task)
    assert "The setup command" in error and "exit code 3" in error
    assert "npm ERR! missing package.json" in error
    assert task.failure_streak == 1 and not task.runs.exists()
    assert log_of(task, "setup_ran")[0]["exit_code"] == 3


# --- merge, discard, delete ------------------------------------------------------------------


def reviewed(repo, agents=(("Implementer", "@fake write feature.txt done\\n"),), **fields):
    workspace = isolated(repo, agents=agents, **fields)
    task = run_pass(task_create(workspace=workspace, summary="Feature"))
    assert task.status == TaskStatus.IN_REVIEW
    return task


@pass_db
def test_merge_fast_forwards_the_checked_out_base_and_moves_the_task_to_done(repo, api):
    task = reviewed(repo)
    response = api.post(f"/api/tasks/{task.id}/merge")
    assert response.status_code == 200, response.content
    assert response.json()["how"] == "fast-forward"
    assert response.json()["task"]["status"] == "done"
    assert (repo / "feature.txt").read_text() == "done\n"
    main = git_text("rev-parse", "main", cwd=repo)
    assert git_text("log", "-1", "--format=%an", "main", cwd=repo) == "Implementer"
    task.refresh_from_db()
    assert task.status == TaskStatus.DONE
    assert (task.merge_commit, task.merged_at is not None) == (main, True)
    assert response.json()["task"]["merge_commit"] == main
    assert (
        f"Merged `{task.branch_name}` into `main` (fast-forward, now at {main[:7]})"
        in (system_comments(task)[-1])
    )
    assert git_text("status", "--porcelain", cwd=repo) == ""
    # Once merged: the worktree and the branch go (the workspace does not keep them).
    assert not branches.worktree_path(task.id).exists()
    assert not git_text("branch", "--list", task.branch_name, cwd=repo)


@pass_db
def test_merge_makes_a_merge_commit_when_the_base_moved_on(repo):
    task = reviewed(repo)
    commit(repo, {"other.txt": "user work\n"}, "user work")
    result = task_branch_merge(task=task)
    assert result.how == "merge commit"
    parents = git_text("log", "-1", "--format=%P", "main", cwd=repo).split()
    assert len(parents) == 2
    assert (repo / "feature.txt").exists() and (repo / "other.txt").exists()
    assert git_text("status", "--porcelain", cwd=repo) == ""


@pass_db
def test_merge_into_a_base_that_is_not_checked_out_moves_only_its_ref(repo):
    git("branch", "develop", cwd=repo)
    task = reviewed(repo, base_branch="develop")
    commit(repo, {"main-only.txt": "x\n"}, "on main")
    before = user_state(repo)
    commit_on_develop = git_text("rev-parse", "develop", cwd=repo)
    assert task_branch_merge(task=task).how == "fast-forward"
    assert git_text("rev-parse", "develop", cwd=repo) != commit_on_develop
    assert "feature.txt" in branch_files(repo, "develop")
    assert user_state(repo) == before


@pass_db
def test_a_conflict_changes_nothing_and_lists_the_files(repo, api):
    task = reviewed(repo, agents=[("Implementer", "@fake write app.py print('agent')")])
    commit(repo, {"app.py": "print('user')\n"}, "user edit")
    before = (user_state(repo), git_text("rev-parse", task.branch_name, cwd=repo))
    response = api.post(f"/api/tasks/{task.id}/merge")
    assert response.status_code == 409, response.content
    refusal = error_of(response)
    assert (refusal["conflicts"], refusal["dirty"]) == (["app.py"], [])
    assert "these files conflict" in refusal["message"]
    assert api.get(f"/api/tasks/{task.id}").json()["status"] == "in_review"
    assert (user_state(repo), git_text("rev-parse", task.branch_name, cwd=repo)) == before
    assert not (repo / ".git" / "MERGE_HEAD").exists()
    assert "these files conflict" in system_comments(task)[-1]
    assert "- `app.py`" in system_comments(task)[-1]


@pass_db
def test_a_dirty_checkout_of_the_base_is_never_overwritten(repo):
    task = reviewed(repo)
    (repo / "README.md").write_text("my unsaved edit\n")
    (repo / "scratch.txt").write_text("new\n")
    result = task_branch_merge(task=task)
    assert not result.merged and set(result.dirty) == {"README.md", "scratch.txt"}
    assert (repo / "README.md").read_text() == "my unsaved edit\n"
    assert not (repo / "feature.txt").exists()
    task.refresh_from_db()
    assert task.status == TaskStatus.IN_REVIEW
    assert "uncommitted changes" in system_comments(task)[-1]


@pass_db
def test_merge_and_discard_only_for_a_task_that_waits_for_the_user(repo, api):
    workspace = isolated(repo)
    task = task_create(workspace=workspace, summary="No branch yet")
    response = api.post(f"/api/tasks/{task.id}/merge")
    assert response.status_code == 409
    assert "no branch" in error_of(response)["message"]
    task = reviewed(repo)
    Task.objects.filter(id=task.id).update(status=TaskStatus.IN_PROGRESS)
    response = api.post(f"/api/tasks/{task.id}/discard")
    assert response.status_code == 409
    assert "In Review or Done" in error_of(response)["message"]


@pass_db
def test_discard_removes_the_worktree_and_the_branch(repo, api):
    task = reviewed(repo)
    branch = task.branch_name
    response = api.post(f"/api/tasks/{task.id}/discard")
    assert response.status_code == 200 and response.json()["branch_name"] == ""
    assert not branches.worktree_path(task.id).exists()
    assert not git_text("branch", "--list", branch, cwd=repo)
    assert git_text("worktree", "list", "--porcelain", cwd=repo).count("worktree ") == 1
    assert f"Discarded branch `{branch}`" in system_comments(task)[-1]


@pass_db
def test_deleting_a_task_removes_its_worktree_and_its_unmerged_branch(repo):
    task = reviewed(repo)
    task_id = task.id
    task_delete(task=task, confirm_unmerged=True)
    assert not branches.worktree_path(task_id).exists()
    assert not git_text("branch", "--list", "malamar/*", cwd=repo)


@pass_db
def test_a_workspace_that_keeps_merged_branches_keeps_them_through_merge_and_delete(repo):
    task = reviewed(repo, keep_merged_branches=True)
    task_id = task.id
    task_branch_merge(task=task)
    assert not branches.worktree_path(task_id).exists()  # the worktree goes either way
    assert git_text("branch", "--list", task.branch_name, cwd=repo)
    task_delete(task=Task.objects.select_related("workspace").get(id=task_id))
    assert git_text("branch", "--list", task.branch_name, cwd=repo)


@pass_db
def test_deleting_the_workspace_removes_the_worktrees(repo):
    task = reviewed(repo)
    workspace_delete(workspace=task.workspace, confirm_unmerged=True)
    assert not branches.worktree_path(task.id).exists()
    assert not git_text("branch", "--list", "malamar/*", cwd=repo)


# --- trouble ---------------------------------------------------------------------------------


@pass_db
def test_a_vanished_worktree_is_made_again_from_its_branch(repo):
    task = reviewed(repo)
    shutil.rmtree(branches.worktree_path(task.id))
    comment_create_and_send_around(task=task, content="@fake write second.txt more", actor=USER)
    task = run_pass(task)
    assert task.status == TaskStatus.IN_REVIEW
    assert any("had vanished" in text for text in system_comments(task))
    assert {"feature.txt", "second.txt"} <= branch_files(repo, task.branch_name)


@pass_db
def test_a_branch_deleted_by_hand_starts_again_from_the_base(repo):
    task = reviewed(repo)
    old = task.branch_name
    git("worktree", "remove", "--force", str(branches.worktree_path(task.id)), cwd=repo)
    git("branch", "-D", old, cwd=repo)
    comment_create_and_send_around(task=task, content="@fake write again.txt x", actor=USER)
    task = run_pass(task)
    assert task.status == TaskStatus.IN_REVIEW
    assert any("was deleted outside Malamar" in text for text in system_comments(task))
    assert branch_files(repo, task.branch_name) >= {"again.txt"}
    assert "feature.txt" not in branch_files(repo, task.branch_name)


@pass_db
def test_a_repository_moved_away_is_a_task_error_not_a_crash(repo, tmp_path):
    task = reviewed(repo)
    repo.rename(tmp_path / "moved")
    comment_create_and_send_around(task=task, content="go on", actor=USER)
    task = run_pass(task)
    assert "is gone (moved, deleted or no longer a git repository)" in system_comments(task)[-1]
    assert task.failure_streak == 1
    assert TaskQueueItem.objects.filter(task=task, status=QueueStatus.FAILED).exists()
    Task.objects.filter(id=task.id).update(status=TaskStatus.IN_REVIEW)
    with pytest.raises(Conflict, match="is gone"):  # merging says the same, and changes nothing
        task_branch_merge(task=Task.objects.select_related("workspace").get(id=task.id))


OPTION_LIKE = ("--detach", "-b", "--upload-pack=touch pwned")


@pytest.mark.parametrize("name", [*OPTION_LIKE, "two words", "bad..name", "x" * 30 + "\nnext"])
def test_a_base_branch_that_is_no_branch_name_is_refused_before_git_sees_it(db, repo, name):
    git("update-ref", f"refs/heads/{name.splitlines()[0]}", "HEAD", cwd=repo, check=False)
    with pytest.raises(ValidationFailed, match="is not a branch name") as error:
        isolated(repo, base_branch=name)
    assert error.value.field == "base_branch"


def test_the_api_refuses_an_option_as_the_base_branch(api, repo):
    workspace = isolated(repo)
    response = api.put(f"/api/workspaces/{workspace.id}", {"base_branch": "--detach"})
    assert response.status_code == 400 and "is not a branch name" in error_of(response)["message"]


@pass_db
def test_a_checkout_on_a_branch_named_like_an_option_is_a_task_error(repo):
    """The base defaults to the checkout's branch: one named `--detach` (made with update-ref)
    must not reach `git worktree add` as an option."""
    workspace = isolated(repo)
    git("update-ref", "refs/heads/--detach", "HEAD", cwd=repo)
    git("symbolic-ref", "HEAD", "refs/heads/--detach", cwd=repo)
    task = run_pass(task_create(workspace=workspace, summary="Feature"))
    assert "--detach is not a branch name Malamar can use" in system_comments(task)[-1]
    assert not task.branch_name and task.failure_streak == 1


# --- parallel tasks --------------------------------------------------------------------------


@pytest.mark.pg
def test_the_claim_honours_the_parallel_limit_and_the_pickup_order(repo, db):
    workspace = isolated(repo, parallel_tasks=2)
    old, new, urgent = (task_create(workspace=workspace, summary=s) for s in ("o", "n", "u"))
    Task.objects.filter(id=urgent.id).update(is_priority=True)
    TaskQueueItem.objects.filter(task=urgent).update(is_priority=True)
    plain = workspace_create(title="Plain")
    task_create(workspace=plain, summary="p")
    assert pickup.workspaces_with_work() == {workspace.id: 3, plain.id: 1}
    assert pickup.startable() == {workspace.id: (3, 2), plain.id: (1, 1)}  # (waiting, limit)
    first = pickup.claim_next(workspace.id, limit=2)
    second = pickup.claim_next(workspace.id, limit=2)
    assert (first.task_id, second.task_id) == (urgent.id, new.id)  # priority, then LIFO
    assert pickup.claim_next(workspace.id, limit=2) is None  # two run: the limit
    assert pickup.workspaces_with_work() == {workspace.id: 1, plain.id: 1}
    comment_create_and_send_around(
        task=urgent, content="more", actor=USER
    )  # queued again while it runs
    TaskQueueItem.objects.filter(id=first.id).update(status=QueueStatus.COMPLETED)
    third = pickup.claim_next(workspace.id, limit=2)
    assert third.task_id == urgent.id
    TaskQueueItem.objects.filter(id=second.id).update(status=QueueStatus.COMPLETED)
    comment_create_and_send_around(task=urgent, content="even more", actor=USER)
    assert pickup.claim_next(workspace.id, limit=2).task_id == old.id  # urgent still runs


@pytest.mark.pg
def test_parallel_tasks_run_at_once_in_their_own_worktrees(stack, repo):
    """The worker's loop (in-process): two of three tasks run at once."""
    before = user_state(repo)
    workspace = stack.workspace(
        agents=[("Implementer", "claude", "Work.")],
        working_directory_mode="static",
        working_directory_path=str(repo),
        isolation="branch",
        parallel_tasks=2,
    )
    files = {"A": "@fake sleep 1.5 write a.txt from\\sA", "B": "@fake sleep 1.5 write b.txt B"}
    files["C"] = "@fake write c.txt from\\sC"
    tasks = {name: stack.task(workspace, text, summary=name) for name, text in files.items()}
    for task in tasks.values():
        stack.wait_status(task, "in_review", timeout=60)
    for name, task in tasks.items():
        branch = stack.api("GET", f"/tasks/{task['id']}")["branch_name"]
        assert branch_files(repo, branch) == {"README.md", "app.py", f"{name.lower()}.txt"}
    spans = sorted(stack.sql("SELECT started_at, ended_at FROM agent_runs"))
    assert len(spans) == 3
    assert spans[1][0] < spans[0][1], "two tasks ran at the same time"
    assert spans[2][0] >= min(spans[0][1], spans[1][1]), "the third waited for a free slot"
    assert user_state(repo) == before


@pytest.mark.pg
@pass_db
def test_a_plain_workspace_still_runs_one_task_at_a_time(tmp_path):
    workspace = workspace_create(title="Plain")
    agent_create(workspace=workspace, name="Solo", instruction="Work.", cli_type="claude")
    for name in "AB":
        task_create(workspace=workspace, summary=name, description="@fake sleep 0.2")
    worker = Worker(poll_interval=0.1, idle_runners=0)  # (its runner ends: no stop() here)
    worker.spawn_workspaces()
    worker.spawn_workspaces()  # asking twice starts no second runner
    runners = set(worker.workspaces[workspace.id])
    assert len(runners) == 1
    for thread in runners:
        thread.join(timeout=60)
    runs = sorted((r.started_at, r.ended_at) for r in AgentRun.objects.all())
    assert len(runs) == 2 and runs[1][0] >= runs[0][1]


@pytest.mark.pg
@pass_db
def test_stopping_the_worker_ends_its_idle_runner(tmp_path):
    """A runner waiting idle for another workspace (with its database connection) ends when
    the worker stops, not minutes later."""
    workspace = workspace_create(title="Plain")
    agent_create(workspace=workspace, name="Solo", instruction="Work.", cli_type="claude")
    task_create(workspace=workspace, summary="A", description="@fake skip")
    worker = Worker(poll_interval=0.1)
    worker.spawn_workspaces()
    [runner] = worker.workspaces[workspace.id]
    wait_until(lambda: worker.idle_runners, timeout=60, what="the runner to wait idle")
    worker.stop()
    runner.join(timeout=30)
    assert not runner.is_alive()


# --- the task popup --------------------------------------------------------------------------


@pass_db
def test_the_popup_shows_the_branch_with_merge_and_discard_once_in_review(repo, client):
    task = reviewed(repo)
    page = html(hx(client, "get", f"/tasks/{task.id}/", target="task-head"))
    assert element_text(page, "task-branch-name") == task.branch_name
    assert elements(page, "button", id="task-branch-copy")[0]["data-copy-text"] == task.branch_name
    assert "Merge into main" in element_text(page, "task-merge")
    (confirm,) = [field for field in elements(page, "input") if "pattern" in field]
    assert re.fullmatch(confirm["pattern"], f" {task.branch_name} ")
    assert not re.fullmatch(confirm["pattern"], task.branch_name.replace("/", "-"))
    Task.objects.filter(id=task.id).update(status=TaskStatus.IN_PROGRESS)
    page = html(hx(client, "get", f"/tasks/{task.id}/", target="task-head"))
    assert element_text(page, "task-branch-name") == task.branch_name
    ids = [element.attrs.get("id", "") for element in parse(page).iter()]
    assert element_text(page, "task-merge") is None
    assert not [found for found in ids if found.startswith("task-discard")]
    activity = parse(html(hx(client, "get", f"/tasks/{task.id}/", target="task-log")))
    texts = " | ".join(text.text for text in activity.find_all("task-log__text"))
    assert "Implementer committed" in texts and f"made branch {task.branch_name}" in texts


@pass_db
def test_merge_from_the_popup_toasts_and_refreshes_the_head(repo, client):
    task = reviewed(repo)
    commit(repo, {"feature.txt": "the user's own\n"}, "user")
    response = hx(client, "post", f"/tasks/{task.id}/merge/")
    assert triggers(response)["malamar:toast"]["level"] == "error"
    assert "files conflict" in triggers(response)["malamar:toast"]["message"]
    git("reset", "-q", "--hard", "HEAD~1", cwd=repo)
    response = hx(client, "post", f"/tasks/{task.id}/merge/")
    toast = triggers(response)["malamar:toast"]
    assert toast == {"level": "success", "message": "Merged into main"}
    assert parse(html(response)).by_id("task-status").attrs["data-status"] == "done"


@pass_db
def test_discard_from_the_popup_needs_the_branch_name(repo, client):
    task = reviewed(repo)
    url = f"/tasks/{task.id}/discard/"
    response = hx(client, "post", url, {"confirm_branch": "malamar/wrong"})
    form = parse(html(response)).by_id("task-discard-form")
    assert "The branch name does not match" in form.find("field--invalid").text
    assert response["HX-Retarget"] == "#task-discard-form"
    assert branches.worktree_path(task.id).exists()
    response = hx(client, "post", url, {"confirm_branch": task.branch_name})
    assert triggers(response)["malamar:toast"]["message"] == "Branch discarded"
    assert not branches.worktree_path(task.id).exists()
    ids = [element.attrs.get("id", "") for element in parse(html(response)).iter()]
    assert not [found for found in ids if found.startswith("task-branch")]


@pass_db
def test_the_daily_cleanup_removes_worktrees_of_tasks_that_are_gone(repo):
    task = reviewed(repo)
    orphan = branches.worktree_path("gone-task-id")
    (orphan / "src").mkdir(parents=True)
    counts = jobs.cleanup()
    assert counts["orphan_worktrees"] == 1
    assert not orphan.exists() and branches.worktree_path(task.id).is_dir()
