"""Snapshots and the Changes data (issue 18): per-run and whole-task diffs in both
working-directory modes, made by the fake CLI's file directives in real git repositories made
here (never the project's own), the proof that a user's repository is never written, cleanup,
and the JSON API returning what the tab shows."""

import hashlib
import os
import re
import subprocess
import threading

import pytest
from django.conf import settings

from agents.services import agent_create
from chats.models import ChatQueueItem
from chats.services import chat_delete, chat_start
from core.actors import USER
from core.models import OutboxEvent
from runner import changes as changes_reads
from runner import diffs, snapshots
from runner.files import temp_dir
from runner.models import AgentRun
from runner.selectors import snapshot_trees_by_store
from runner.services import worker_register
from tasks.models import TaskQueueItem, TaskStatus
from tasks.services import (
    comment_create_and_send_around,
    task_create,
    task_delete,
    task_status_set,
)
from tests.htmltree import parse
from tests.live import wait_until
from tests.stack import FAKES_BIN
from worker import jobs, process, snapshotting
from worker.membership import recover
from worker.pipeline import ChatReply, TaskPass
from workspaces.services import workspace_create

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def setup(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", f"{FAKES_BIN}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(settings, "DATA_DIR", str(tmp_path / "data"))


def sh(cwd, *args) -> str:
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    done = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, check=True)
    return done.stdout.decode()


def make_repo(path):
    path.mkdir()
    sh(path, "init", "-q", "-b", "main")
    (path / "app.py").write_text("def main():\n    return 1\n")
    (path / "old.txt").write_text("to be renamed\n" * 5)
    (path / "gone.txt").write_text("bye\n")
    (path / ".gitignore").write_text("build/\n")
    sh(path, "add", ".")
    sh(path, "-c", "user.name=U", "-c", "user.email=u@x", "commit", "-qm", "start")
    (path / "build").mkdir()
    (path / "build" / "out.bin").write_text("ignored\n")
    return path


def run_task(workspace, description, names=("Builder",)):
    for name in names:
        if not workspace.agents.filter(name=name).exists():
            agent_create(workspace=workspace, name=name, instruction="Work.", cli_type="claude")
    task = task_create(workspace=workspace, summary="Change files", description=description)
    run_pass(task)
    return task


def run_pass(task):
    item = TaskQueueItem.objects.queued().get(task=task)
    assert TaskQueueItem.objects.claim(item.id)
    TaskPass(item, stop=threading.Event(), shutdown=threading.Event()).run()


def by_path(files):
    return {f.path: (f.status, f.binary, f.added, f.removed, f.old_path) for f in files}


EDITS = "\n".join(
    [
        "@fake Builder: write app.py def\\smain():\\n\\s\\s\\s\\sreturn\\s2\\n",
        "@fake Reviewer: rename old.txt new.txt delete gone.txt binary logo.png"
        " write notes/todo.md one\\ntwo\\n write build/skip.txt x",
    ]
)


def test_per_run_and_whole_task_diffs_in_a_users_repository(tmp_path):
    repo = make_repo(tmp_path / "repo")
    workspace = workspace_create(
        title="Repo", working_directory_mode="static", working_directory_path=str(repo)
    )
    task = run_task(workspace, EDITS, names=("Builder", "Reviewer"))

    first, second = task.runs.order_by("started_at")
    assert first.working_directory == str(repo) and first.git_branch == "main"
    assert (first.files_changed, first.lines_added, first.lines_removed) == (1, 1, 1)
    run1 = changes_reads.task_changes(task, first.id)
    assert by_path(run1.files) == {"app.py": ("modified", False, 1, 1, "app.py")}
    run2 = changes_reads.task_changes(task, second.id)
    assert by_path(run2.files) == {
        "gone.txt": ("deleted", False, 0, 1, "gone.txt"),
        "logo.png": ("added", True, 0, 0, "logo.png"),
        "new.txt": ("renamed", False, 0, 0, "old.txt"),
        "notes/todo.md": ("added", False, 2, 0, "notes/todo.md"),
    }  # build/ is ignored by the repository's .gitignore
    whole = changes_reads.task_changes(task)
    assert set(by_path(whole.files)) == {
        "app.py",
        "gone.txt",
        "logo.png",
        "new.txt",
        "notes/todo.md",
    }
    assert whole.totals == {"files_changed": 5, "lines_added": 3, "lines_removed": 2}
    assert (second.task_files_changed, second.task_lines_added) == (5, 3)
    views = changes_reads.file_views(whole)
    app = next(v for v in views if v.change.path == "app.py")
    kinds = [line.kind for line in app.diff.lines]
    assert kinds == ["hunk", "context", "del", "add"]
    assert "return" in app.diff.lines[3].html and "<span" in app.diff.lines[3].html
    updated = OutboxEvent.objects.filter(type="task.changes_updated").order_by("id")
    assert [e.payload["files_changed"] for e in updated] == [1, 4]
    assert updated.last().payload["task_files_changed"] == 5


def test_edits_inside_a_repository_nested_in_the_users_repository_are_listed(tmp_path):
    repo = make_repo(tmp_path / "repo")
    vendored = repo / "vendor" / "lib"
    vendored.mkdir(parents=True)
    sh(vendored, "init", "-q", "-b", "main")
    (vendored / "lib.py").write_text("VERSION = 1\n")
    sh(vendored, "add", ".")
    sh(vendored, "-c", "user.name=U", "-c", "user.email=u@x", "commit", "-qm", "vendored")
    workspace = workspace_create(
        title="Repo", working_directory_mode="static", working_directory_path=str(repo)
    )
    task = run_task(workspace, "@fake write vendor/lib/lib.py VERSION\\s=\\s2\\n")
    run = task.runs.get()
    assert run.snapshot_error == "" and run.files_changed == 1
    assert by_path(changes_reads.task_changes(task, run.id).files) == {
        "vendor/lib/lib.py": ("modified", False, 1, 1, "vendor/lib/lib.py")
    }


# What `git init newapp` leaves (a repository before its first commit), written by the agent.
GIT_INIT = (
    "write newapp/.git/HEAD ref:\\srefs/heads/main\\n write newapp/.git/objects/.keep x"
    " write newapp/.git/refs/.keep x"
)


def test_an_agent_that_runs_git_init_breaks_neither_the_changes_nor_later_runs(tmp_path):
    workspace = workspace_create(title="Temp")
    task = run_task(
        workspace,
        f"@fake Builder: {GIT_INIT} write newapp/src/main.rs fn\\smain()\\s{{}}\\n\n"
        "@fake Reviewer: append newapp/src/main.rs //\\sok\\n",
        names=("Builder", "Reviewer"),
    )
    first, second = task.runs.order_by("started_at")
    assert (first.snapshot_error, second.snapshot_error) == ("", "")
    assert by_path(changes_reads.task_changes(task, first.id).files) == {
        "newapp/src/main.rs": ("added", False, 1, 0, "newapp/src/main.rs")
    }
    assert by_path(changes_reads.task_changes(task, second.id).files) == {
        "newapp/src/main.rs": ("modified", False, 1, 0, "newapp/src/main.rs")
    }
    assert second.tree_before == first.tree_after  # one snapshot between the two runs


@pytest.fixture
def git_commands(monkeypatch):
    """How many times each git command ran (every git process goes through subprocess.run)."""
    counted: dict[str, int] = {}
    real = subprocess.run

    def run(argv, *args, **kwargs):
        if os.path.basename(str(argv[0])) == "git":
            words = iter(argv[1:])
            for word in words:
                if word == "-c":
                    next(words)
                elif not word.startswith("-"):
                    counted[word] = counted.get(word, 0) + 1
                    break
        return real(argv, *args, **kwargs)

    monkeypatch.setattr(subprocess, "run", run)
    return counted


def test_one_snapshot_between_two_agents_and_none_while_nothing_changes(monkeypatch, git_commands):
    monkeypatch.setattr(snapshots, "now_ns", lambda: 2**62)  # no file looks racily new
    workspace = workspace_create(title="Temp")
    names = ("A", "B", "C", "D")
    edits = "\n".join(f"@fake {name}: append a.txt {name}\\n" for name in names)
    task = run_task(workspace, edits, names=names)
    # The empty folder needs no git; then the store is made once (one git call); one snapshot
    # after each run, which is the next run's "before", without git (a temp folder, where no
    # ignore rule applies: the file made, then appended to, is hashed here); each run's totals
    # and the task's in one call; no ref written on the way.
    assert git_commands == {"init": 1, "diff-tree": 4}
    runs = list(task.runs.order_by("started_at"))
    assert [r.tree_before for r in runs[1:]] == [r.tree_after for r in runs[:-1]]
    assert [r.task_lines_added for r in runs] == [1, 2, 3, 4]

    git_commands.clear()
    task.refresh_from_db()
    task_status_set(task=task, status=TaskStatus.TODO, actor=USER)
    comment_create_and_send_around(task=task, content="@fake skip", actor=USER)
    run_pass(task)
    assert git_commands == {"diff-tree": 1}  # only the task's totals, once a pass
    last = task.runs.order_by("started_at").last()
    assert (last.files_changed, last.task_files_changed, last.task_lines_added) == (0, 1, 4)


@pytest.fixture
def spawned(monkeypatch) -> list:
    """The working folders of the CLI processes started so far (made ready or not)."""
    started, spawn = [], process.spawn

    def spawning(*args, **kwargs):
        started.append(kwargs["env"]["PWD"])
        return spawn(*args, **kwargs)

    monkeypatch.setattr(process, "spawn", spawning)
    return started


TWO_EDITS = "@fake A: append a.txt one\\n\n@fake B: append a.txt two\\n"


def test_a_runs_totals_are_counted_while_the_next_agent_runs(monkeypatch, spawned):
    """The `git diff-tree` of a run's totals is not between one agent and the next: it runs
    once the next agent's CLI started (its totals reach the run's row with a later finish,
    their task.changes_updated with them); the last run's totals come with its own record."""
    workspace = workspace_create(title="Temp")
    count, counted_after = diffs.totals_between, []

    def counting(store, pairs):
        counted_after.append(len(spawned))  # how many CLIs were started by then
        return count(store, pairs)

    monkeypatch.setattr(diffs, "totals_between", counting)
    task = run_task(workspace, TWO_EDITS, names=("A", "B"))

    assert counted_after == [2, 2]  # A's totals once B's CLI was started (never with 1)
    first, second = task.runs.order_by("started_at")
    assert (first.files_changed, first.lines_added, first.task_lines_added) == (1, 1, 1)
    assert (second.files_changed, second.lines_added, second.task_lines_added) == (1, 1, 2)
    updated = OutboxEvent.objects.filter(type="task.changes_updated").order_by("id")
    assert [(e.payload["run_id"], e.payload["lines_added"]) for e in updated] == [
        (first.id, 1),
        (second.id, 1),
    ]


def test_a_new_folders_store_is_made_while_its_first_agent_works(monkeypatch, spawned):
    """A task's new temp folder has no snapshot store until something is in it: the store
    (`git init`) is made once the first agent's CLI started, beside it, not by the snapshot
    between that agent and the next (worker.snapshotting: start_counting)."""
    workspace = workspace_create(title="Temp")
    create, made = snapshots._create_store, []

    def creating(path):
        made.append((threading.current_thread().name, len(spawned)))
        return create(path)

    monkeypatch.setattr(snapshots, "_create_store", creating)
    task = run_task(workspace, TWO_EDITS, names=("A", "B"))

    ((thread, started),) = made
    assert (thread, started >= 1) == ("malamar-snapshot-store", True)  # once A's CLI started
    first, second = task.runs.order_by("started_at")
    assert second.tree_before == first.tree_after != snapshots.EMPTY_TREE
    assert (first.lines_added, second.lines_added, second.task_lines_added) == (1, 1, 2)


def test_a_tasks_first_tree_is_read_while_its_first_agent_works(monkeypatch, spawned):
    """The task's totals need the tree its first run started from: read from the database
    once the first agent's CLI started (before its next agent's was made ready), not between
    that agent and the next."""
    workspace = workspace_create(title="Temp")
    read, read_with = snapshotting.task_first_tree, []

    def reading(task_id, store):
        read_with.append(len(spawned))
        return read(task_id, store)

    monkeypatch.setattr(snapshotting, "task_first_tree", reading)
    task = run_task(workspace, TWO_EDITS, names=("A", "B"))

    assert read_with == [1]  # A's CLI only: B's was not made ready yet
    second = task.runs.order_by("started_at").last()
    assert (second.task_lines_added, second.task_files_changed) == (2, 1)


TOTALS = (
    "files_changed",
    "lines_added",
    "lines_removed",
    "task_files_changed",
    "task_lines_added",
    "task_lines_removed",
)


@pytest.mark.pg
def test_a_recovery_counts_the_totals_a_dead_worker_left_for_the_next_finish():
    """A run's totals reach its row with the next run's finish (count_later): a worker killed
    before that finish leaves the run with both trees and no totals. A recovery counts them
    from the trees on its row (open pages are told); a live worker's runs are its own."""
    workspace = workspace_create(title="Temp")
    task = run_task(workspace, TWO_EDITS, names=("A", "B"))
    first, second = task.runs.order_by("started_at")
    counted = {run.id: [getattr(run, name) for name in TOTALS] for run in (first, second)}
    assert counted[second.id] == [1, 1, 0, 1, 2, 0]
    live = worker_register(hostname="there", pid=1, capacity=1, clis=(), version="x")
    AgentRun.objects.filter(task=task).update(**dict.fromkeys(TOTALS))  # as a kill leaves them
    AgentRun.objects.filter(id=second.id).update(worker_id=live.id)
    last_event = OutboxEvent.objects.order_by("id").last().id

    assert recover(hostname="here", worker_id=None) == 0  # (no item to re-queue)

    first.refresh_from_db()
    second.refresh_from_db()
    assert [getattr(first, name) for name in TOTALS] == counted[first.id]
    assert second.files_changed is None  # its worker lives: its next finish writes them
    updated = OutboxEvent.objects.filter(type="task.changes_updated", id__gt=last_event)
    assert [(e.payload["run_id"], e.payload["task_lines_added"]) for e in updated] == [
        (first.id, 1)
    ]


@pytest.mark.pg
def test_a_branch_name_longer_than_the_column_is_cut_not_a_failed_run(tmp_path):
    # git allows long branch names (folders of refs); PostgreSQL refuses to store more than
    # the column holds where SQLite kept everything.
    repo = make_repo(tmp_path / "repo")
    branch = "feature/" + "a" * 200 + "/" + "b" * 100
    sh(repo, "checkout", "-q", "-b", branch)
    workspace = workspace_create(
        title="Repo", working_directory_mode="static", working_directory_path=str(repo)
    )
    task = run_task(workspace, "@fake Builder: write app.py x")
    (run,) = task.runs.all()
    limit = AgentRun._meta.get_field("git_branch").max_length
    assert run.git_branch == branch[:limit] and run.files_changed == 1


def test_per_run_and_whole_task_diffs_in_the_tasks_temp_folder(tmp_path):
    workspace = workspace_create(title="Temp")
    task = run_task(workspace, "@fake Builder: write a.txt one\\n write b.txt two\\n")
    folder = temp_dir() / f"malamar_task_{task.id}"
    (run,) = task.runs.all()
    assert run.working_directory == str(folder) and run.git_branch == ""
    assert by_path(changes_reads.task_changes(task, run.id).files) == {
        "a.txt": ("added", False, 1, 0, "a.txt"),
        "b.txt": ("added", False, 1, 0, "b.txt"),
    }
    assert not (folder / ".git").exists()  # the folder was not made a repository
    task.refresh_from_db()
    task_status_set(task=task, status=TaskStatus.TODO, actor=USER)
    comment_create_and_send_around(
        task=task, content="@fake Builder: append a.txt more\\n delete b.txt", actor=USER
    )
    run_pass(task)
    second = task.runs.order_by("started_at").last()
    assert by_path(changes_reads.task_changes(task, second.id).files) == {
        "a.txt": ("modified", False, 1, 0, "a.txt"),
        "b.txt": ("deleted", False, 0, 1, "b.txt"),
    }
    assert by_path(changes_reads.task_changes(task).files) == {
        "a.txt": ("added", False, 2, 0, "a.txt")
    }


def repo_state(repo) -> dict:
    index = (repo / ".git" / "index").read_bytes()
    return {
        "status": sh(
            repo,
            "--no-optional-locks",
            "status",
            "--porcelain",
            "--untracked-files=all",
            "--ignored",
        ),
        "refs": sh(repo, "for-each-ref"),
        "index": hashlib.sha256(index).hexdigest(),
        "objects": sh(repo, "count-objects", "-v"),
        "config": (repo / ".git" / "config").read_text(),
        "files": sorted(str(p.relative_to(repo)) for p in (repo / ".git").rglob("*")),
    }


def test_snapshots_never_write_the_users_repository(tmp_path):
    repo = make_repo(tmp_path / "repo")
    (repo / "untracked.txt").write_text("not added\n")
    (repo / "app.py").write_text("changed before the task\n")  # a dirty work tree stays dirty
    workspace = workspace_create(
        title="Repo", working_directory_mode="static", working_directory_path=str(repo)
    )
    agent_create(workspace=workspace, name="Builder", instruction="Work.", cli_type="claude")
    git_before = repo_state(repo)
    task = task_create(
        workspace=workspace,
        summary="Edit",
        description="@fake write app.py new\\n write src/x.py y\\n delete gone.txt",
    )
    run_pass(task)
    (repo / "src" / "x.py").unlink()
    (repo / "src").rmdir()
    (repo / "app.py").write_text("changed before the task\n")
    (repo / "gone.txt").write_text("bye\n")
    assert repo_state(repo) == git_before
    assert task.runs.get().files_changed == 3


def has_object(store, sha) -> bool:
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_DIR": str(store)}
    return subprocess.run(["git", "cat-file", "-e", sha], cwd=store, env=env).returncode == 0


def prune_now():
    return snapshots.prune(snapshot_trees_by_store(), expire="now")


def test_a_chat_reply_is_snapshotted_and_deleting_the_chat_lets_cleanup_remove_it(tmp_path):
    workspace = workspace_create(title="Chat")
    chat = chat_start(workspace=workspace, message="@fake write hello.txt hi\\n reply done")
    item = ChatQueueItem.objects.queued().get(chat=chat)
    assert ChatQueueItem.objects.claim(item.id)
    ChatReply(item, stop=threading.Event(), shutdown=threading.Event()).run()
    run = AgentRun.objects.get(chat=chat)
    assert run.files_changed == 1 and run.tree_after
    store = snapshots.store_path(run.snapshot_store)
    assert prune_now()["trees_kept"] == 2  # even pruned right away, the run's trees stay
    assert has_object(store, run.tree_before) and has_object(store, run.tree_after)
    chat_delete(chat=chat)
    assert prune_now()["stores_removed"] == 1
    assert not store.exists()


def test_cleanup_keeps_the_trees_of_runs_and_prunes_those_of_deleted_tasks(tmp_path):
    repo = make_repo(tmp_path / "repo")
    workspace = workspace_create(
        title="Repo", working_directory_mode="static", working_directory_path=str(repo)
    )
    dropped = run_task(workspace, "@fake write dropped.txt two")
    dropped_tree = dropped.runs.get().tree_after
    (repo / "dropped.txt").unlink()
    kept = run_task(workspace, "@fake write kept.txt one")
    store = snapshots.store_path(kept.runs.get().snapshot_store)
    assert dropped.runs.get().snapshot_store == kept.runs.get().snapshot_store  # one store
    task_delete(task=dropped)
    assert jobs.cleanup()["snapshot_stores_pruned"] == 1  # (keeps what is under an hour old)
    assert has_object(store, dropped_tree)
    assert prune_now() == {"stores_removed": 0, "stores_pruned": 1, "trees_kept": 2}
    assert not has_object(store, dropped_tree)
    assert by_path(changes_reads.task_changes(kept).files) == {
        "kept.txt": ("added", False, 1, 0, "kept.txt")
    }


def test_a_cleanup_while_a_run_works_keeps_the_tree_it_started_from(tmp_path):
    repo = make_repo(tmp_path / "repo")
    (repo / "draft.txt").write_text("only in the snapshot store\n")
    workspace = workspace_create(
        title="Repo", working_directory_mode="static", working_directory_path=str(repo)
    )
    agent_create(workspace=workspace, name="Builder", instruction="Work.", cli_type="claude")
    task = task_create(workspace=workspace, summary="Slow", description="@fake hold 60 skip")
    item = TaskQueueItem.objects.queued().get(task=task)
    assert TaskQueueItem.objects.claim(item.id)
    worker = threading.Thread(
        target=TaskPass(item, stop=threading.Event(), shutdown=threading.Event()).run
    )
    worker.start()
    try:
        wait_until(lambda: task.runs.exists(), timeout=60, what="the run to start")
        before = task.runs.get().tree_before  # in the run's row from its start
        store = snapshots.store_path(task.runs.get().snapshot_store)
        (repo / "draft.txt").write_text("changed meanwhile\n")
        snapshots.take(repo)  # another snapshot of the folder: the store's index moves on
        prune_now()
        assert has_object(store, before)
    finally:
        (repo / "release").touch()
        worker.join()
    run = task.runs.get()
    assert run.tree_before == before and run.files_changed == 1


def test_cleanup_drops_the_refs_older_versions_kept_per_run(tmp_path):
    workspace = workspace_create(title="Temp")
    task = run_task(workspace, "@fake write a.txt one")
    run = task.runs.get()
    store = snapshots.store_path(run.snapshot_store)
    for side, tree in (("before", run.tree_before), ("after", run.tree_after)):
        sh(store, "--git-dir", str(store), "update-ref", f"refs/malamar/runs/{run.id}/{side}", tree)
    jobs.cleanup()
    refs = sh(store, "--git-dir", str(store), "for-each-ref", "--format=%(refname)")
    assert refs.split() == ["refs/malamar/keep"]
    assert prune_now()["trees_kept"] == 2 and has_object(store, run.tree_after)


def test_without_git_the_run_goes_on_and_the_tab_says_why(tmp_path, monkeypatch):
    monkeypatch.setattr("runner.git.git_binary", lambda: None)
    workspace = workspace_create(title="Temp")
    task = run_task(workspace, "@fake write a.txt one\\n comment Did it")
    run = task.runs.get()
    assert run.status == "completed" and "git is not installed" in run.snapshot_error
    assert task.comments.filter(content="Did it").exists()
    whole = changes_reads.task_changes(task)
    assert whole.files == [] and "git is not installed" in whole.problem


def test_a_huge_file_diff_is_collapsed_and_never_rendered_whole(tmp_path):
    workspace = workspace_create(title="Temp")
    task = run_task(workspace, "@fake write small.txt x\\n lines big.txt 30000")
    whole = changes_reads.task_changes(task)
    views = {v.change.path: v for v in changes_reads.file_views(whole)}
    assert views["big.txt"].collapsed == "large" and views["big.txt"].diff is None
    assert views["small.txt"].diff is not None
    page = changes_reads.file_diff(whole, views["big.txt"].change)
    assert page.truncated and len(page.lines) == changes_reads.PAGE_LINES


def test_diff_parsing_handles_renames_with_edits_and_odd_names(tmp_path):
    root = tmp_path / "plain"
    root.mkdir()
    (root / "with space.txt").write_text("".join(f"line {n}\n" for n in range(50)))
    (root / "ünïcode.py").write_text("x = 1\n")
    a = snapshots.take(root)
    (root / "with space.txt").rename(root / "moved name.txt")
    with (root / "moved name.txt").open("a") as f:
        f.write("one more\n")
    (root / "ünïcode.py").write_text("x = 2\n")
    b = snapshots.take(root)
    files = by_path(diffs.changed_files(a.store, a.tree, b.tree))
    assert files == {
        "moved name.txt": ("renamed", False, 1, 0, "with space.txt"),
        "ünïcode.py": ("modified", False, 1, 1, "ünïcode.py"),
    }
    blocks = diffs.patches(a.store, a.tree, b.tree, diffs.changed_files(a.store, a.tree, b.tree))
    assert "+one more" in blocks[0] and "+x = 2" in blocks[1]


def tab(client, task, run_id=""):
    query = f"?run={run_id}" if run_id else ""
    response = client.get(f"/tasks/{task.id}/changes/{query}", HTTP_HX_REQUEST="true")
    assert response.status_code == 200
    return response.content.decode()


def tab_files(html: str) -> list[str]:
    return re.findall(r'data-change-path="([^"]*)"', html)


def test_the_api_returns_what_the_tab_shows(tmp_path, api):
    repo = make_repo(tmp_path / "repo")
    workspace = workspace_create(
        title="Repo", working_directory_mode="static", working_directory_path=str(repo)
    )
    task = run_task(workspace, EDITS, names=("Builder", "Reviewer"))
    client = api.client
    for run_id in ["", *task.runs.order_by("started_at").values_list("id", flat=True)]:
        body = api.get(f"/api/tasks/{task.id}/changes?run_id={run_id}").json()
        html = tab(client, task, run_id)
        assert tab_files(html) == [f["path"] for f in body["files"]]
        totals = re.search(
            r'id="task-changes-totals">(\d+) files? changed, .*?\+(\d+).*?\u2212(\d+)', html
        )
        assert totals.groups() == tuple(
            str(body[k]) for k in ("files_changed", "lines_added", "lines_removed")
        )
        assert body["working_directory"] == str(repo) and body["branch"] == "main"
        assert str(repo) in html and "main" in html
    assert [r["number"] for r in body["runs"]] == [1, 2]
    second = task.runs.order_by("started_at").last()
    assert api.get(f"/api/runs/{second.id}/changes").json()["files"] == body["files"]

    one = api.get(f"/api/tasks/{task.id}/changes/file?path=app.py").json()
    assert one["status"] == "modified" and "-    return 1\n+    return 2" in one["diff"]
    assert not one["truncated"]
    fragment = client.get(
        f"/tasks/{task.id}/changes/file/?path=app.py", HTTP_HX_REQUEST="true"
    ).content.decode()
    fragment = parse(fragment)
    assert fragment.find(tag="html") is None
    assert fragment.find("diff__line--add", tag="tr").text.endswith("return 2")
    page = parse(client.get(f"/tasks/{task.id}/changes/file/?path=app.py").content.decode())
    assert page.find(tag="html") is not None
    assert page.find("diff__line--del", tag="tr").text.endswith("return 1")

    assert api.get(f"/api/tasks/{task.id}/changes/file?path=nope").status_code == 400
    assert api.get(f"/api/tasks/{task.id}/changes?run_id=nope").status_code == 404
    assert api.get("/api/tasks/nope/changes").status_code == 404
    assert (
        client.get(f"/tasks/{task.id}/changes/?run=nope", HTTP_HX_REQUEST="true").status_code == 404
    )


def test_the_board_card_and_the_activity_timeline_show_the_totals(tmp_path, api):
    repo = make_repo(tmp_path / "repo")
    workspace = workspace_create(
        title="Repo", working_directory_mode="static", working_directory_path=str(repo)
    )
    task = run_task(workspace, EDITS, names=("Builder", "Reviewer"))
    board = api.client.get(f"/workspaces/{workspace.id}/tasks/", HTTP_HX_REQUEST="true")
    card = board.content.decode().split(f'id="task-card-{task.id}"')[1].split("</li>")[0]
    assert re.search(r"\+3</span> <span class=\"diff-minus\">\u22122", card)
    activity = api.client.get(
        f"/tasks/{task.id}/", HTTP_HX_REQUEST="true", HTTP_HX_TARGET="task-activity"
    )
    first = task.runs.order_by("started_at").first()
    link = parse(activity.content.decode()).find("run__changes", data_changes_run=first.id)
    assert link.text.startswith("changed 1 file,")


def test_the_tab_says_why_it_is_empty(tmp_path, api, monkeypatch):
    workspace = workspace_create(title="Temp")
    task = task_create(workspace=workspace, summary="Nothing yet")
    empty = parse(tab(api.client, task)).by_id("task-changes-empty")
    assert empty.text.startswith("No agent has run on this task yet")
    monkeypatch.setattr("runner.git.git_binary", lambda: None)
    task = run_task(workspace, "@fake write a.txt one")
    assert "git is not installed" in parse(tab(api.client, task)).by_id("task-changes-empty").text


def test_a_repository_index_git_cannot_reuse_is_not_a_failure(tmp_path):
    repo = make_repo(tmp_path / "repo")
    sh(repo, "update-index", "--split-index")  # the index now needs .git/sharedindex.*
    (repo / "app.py").write_text("changed\n")
    snapshot = snapshots.take(repo)
    store = snapshots.store_path(snapshot.store)
    listed = sh(store, "--git-dir", str(store), "ls-tree", "-r", "--name-only", snapshot.tree)
    assert listed.split() == [".gitignore", "app.py", "gone.txt", "old.txt"]
    assert sh(store, "--git-dir", str(store), "show", f"{snapshot.tree}:app.py") == "changed\n"


def test_a_folder_too_big_to_snapshot_in_time_does_not_hold_up_the_run(tmp_path, monkeypatch):
    monkeypatch.setattr(snapshots, "ADD_TIMEOUT_SECONDS", 0.000001)
    workspace = workspace_create(title="Temp")
    # (An ignore file: what the agent made is git's to add, as in any large folder.)
    task = run_task(workspace, "@fake write .gitignore *.log\\n write a.txt one\\n comment Did it")
    run = task.runs.get()
    assert run.status == "completed" and "took longer than" in run.snapshot_error
    assert task.comments.filter(content="Did it").exists()
