"""runner/snapshots.py on real git repositories (tests/gitrepo.py): repositories nested in the
working directory are recorded as their files (issue 25), whatever agents make there never
fails a snapshot, a folder that did not change is not given to git again (issue 28), and the
totals of several pairs of trees come from one git call."""

import hashlib
import os
import subprocess

import pytest
from django.conf import settings

from runner import diffs, folderwatch, gitobjects, snapshots
from runner.git import git, git_text
from tests.gitrepo import commit, make_repo
from tests.live import wait_until
from worker.snapshotting import PassSnapshots

FAR_FUTURE_NS = 2**62  # every file looks long unchanged: its timestamps can be trusted


@pytest.fixture(autouse=True)
def data_dir(monkeypatch, tmp_path):
    monkeypatch.setattr(settings, "DATA_DIR", str(tmp_path / "data"))


@pytest.fixture
def git_calls(monkeypatch):
    """The git subcommands snapshots run, in order."""
    calls = []
    real = snapshots.git

    def counted(*args, **kwargs):
        calls.append(next(arg for arg in args if not arg.startswith("-")))
        return real(*args, **kwargs)

    monkeypatch.setattr(snapshots, "git", counted)
    monkeypatch.setattr("runner.git.git", counted)  # add_all and its helpers
    return calls


def changes(a, b) -> dict:
    return {f.path: f.status for f in diffs.changed_files(a.store, a.tree, b.tree)}


def listed(snapshot) -> list[str]:
    store = snapshots.store_path(snapshot.store)
    env = {"GIT_DIR": str(store)}
    return git_text("ls-tree", "-r", "--name-only", snapshot.tree, cwd=store, env=env).split("\n")


def git_init(path, *, commit_files: dict | None = None):
    """`git init` in `path` (made if needed), like `cargo new`; with a first commit if asked."""
    path.mkdir(parents=True, exist_ok=True)
    git("init", "-q", "-b", "main", cwd=path)
    if commit_files:
        commit(path, commit_files, "vendored")


def repository_state(repo) -> dict:
    """Everything of a repository's own that a snapshot must never write."""
    dot_git = repo / ".git"
    return {
        "index": hashlib.sha256((dot_git / "index").read_bytes()).hexdigest()
        if (dot_git / "index").exists()
        else "",
        "refs": git_text("for-each-ref", cwd=repo),
        "objects": git_text("count-objects", "-v", cwd=repo),
        "files": sorted(str(p.relative_to(dot_git)) for p in dot_git.rglob("*")),
    }


# --- nested repositories (issue 25) -------------------------------------------------------------


def test_edits_inside_a_repository_nested_in_the_repository_are_listed(tmp_path):
    repo = make_repo(tmp_path / "repo", {"app.py": "x = 1\n", ".gitignore": "build/\n"})
    lib = repo / "vendor" / "lib"
    git_init(lib, commit_files={"lib.py": "y = 1\n", ".gitignore": "target/\n"})
    before = snapshots.take(repo)
    assert "vendor/lib/lib.py" in listed(before)  # its files, not a pointer to its commit
    (lib / "lib.py").write_text("y = 2\n")
    (lib / "new.py").write_text("z = 3\n")
    (lib / "target").mkdir()
    (lib / "target" / "out.o").write_text("ignored by the nested repository\n")
    after = snapshots.take(repo)
    assert changes(before, after) == {"vendor/lib/lib.py": "modified", "vendor/lib/new.py": "added"}


def test_a_git_init_before_any_commit_never_fails_a_snapshot(tmp_path):
    folder = tmp_path / "task"
    folder.mkdir()
    (folder / "notes.md").write_text("plan\n")
    before = snapshots.take(folder)
    app = folder / "newapp"
    git_init(app)  # what `cargo new newapp` does: a repository without a commit
    (app / "src").mkdir()
    (app / "src" / "main.rs").write_text("fn main() {}\n")
    (app / "Cargo.toml").write_text("[package]\n")
    after = snapshots.take(folder)
    assert changes(before, after) == {"newapp/Cargo.toml": "added", "newapp/src/main.rs": "added"}
    (app / "src" / "main.rs").write_text('fn main() { println!("hi"); }\n')
    later = snapshots.take(folder)  # and every snapshot after it
    assert changes(after, later) == {"newapp/src/main.rs": "modified"}


def test_repositories_nested_in_nested_repositories_are_listed_too(tmp_path):
    folder = tmp_path / "task"
    inner = folder / "outer" / "inner"
    git_init(folder / "outer", commit_files={"o.txt": "o\n"})
    git_init(inner)
    (inner / "i.txt").write_text("i\n")
    snapshot = snapshots.take(folder)
    assert listed(snapshot) == ["outer/inner/i.txt", "outer/o.txt"]


def test_a_submodule_of_the_repository_is_listed_as_its_files_and_never_written(tmp_path):
    repo = make_repo(tmp_path / "repo", {"app.py": "x = 1\n"})
    sub = repo / "sub"
    git_init(sub, commit_files={"s.py": "s = 1\n"})
    commit(repo, {}, "add sub")  # the repository's index and HEAD now hold a gitlink for sub/
    assert git_text("ls-files", "--stage", "sub", cwd=repo).startswith("160000 ")
    states = (repository_state(repo), repository_state(sub))
    before = snapshots.take(repo)
    (sub / "s.py").write_text("s = 2\n")
    after = snapshots.take(repo)
    assert changes(before, after) == {"sub/s.py": "modified"}
    (sub / "s.py").write_text("s = 1\n")
    assert (repository_state(repo), repository_state(sub)) == states


def test_a_store_an_older_malamar_left_with_gitlinks_lists_their_files(tmp_path):
    folder = tmp_path / "task"
    git_init(folder / "lib", commit_files={"l.py": "l\n"})
    first = snapshots.take(folder)
    store = snapshots.store_path(first.store)
    # What an older version left: the nested repository as a gitlink in the store's index.
    env = {
        "GIT_DIR": str(store),
        "GIT_WORK_TREE": str(folder),
        "GIT_INDEX_FILE": str(store / "index"),
    }
    git("rm", "-q", "-r", "--cached", "lib", cwd=folder, env=env)
    git("add", "lib", cwd=folder, env=env)
    assert git_text("ls-files", "--stage", cwd=folder, env=env).startswith("160000 ")
    (store / snapshots.NESTED_CHECKED).unlink()
    again = snapshots.take(folder)
    assert listed(again) == ["lib/l.py"] and again.tree == first.tree


def test_a_nested_repository_with_a_line_break_in_its_name_is_listed_too(tmp_path):
    folder = tmp_path / "task"
    git_init(folder / "odd\nname")  # git's message about it spans two lines
    (folder / "odd\nname" / "f.txt").write_text("f\n")
    snapshot = snapshots.take(folder)
    store = snapshots.store_path(snapshot.store)
    out = git("ls-tree", "-r", "-z", "--name-only", snapshot.tree, cwd=store,
              env={"GIT_DIR": str(store)}).stdout  # fmt: skip
    assert out == b"odd\nname/f.txt\0"


def test_what_git_cannot_add_is_left_out_not_a_failure(tmp_path, monkeypatch):
    monkeypatch.setattr("runner.git.enter_nested", lambda *args, **kwargs: None)
    folder = tmp_path / "task"
    folder.mkdir()
    (folder / "a.txt").write_text("a\n")
    git_init(folder / "newapp")  # git add fails on it (exit code 1) and adds the rest
    (folder / "newapp" / "main.rs").write_text("fn main() {}\n")
    assert listed(snapshots.take(folder)) == ["a.txt"]


def test_a_folder_that_is_gone_is_a_readable_error(tmp_path):
    folder = tmp_path / "task"
    folder.mkdir()
    snapshots.take(folder)
    folder.rmdir()  # the agent removed its own folder
    with pytest.raises(snapshots.SnapshotError, match="no longer exists"):
        snapshots.take(folder)


# --- a folder that did not change (issue 28) ----------------------------------------------------


def test_an_unchanged_folder_is_not_given_to_git_again(tmp_path, monkeypatch, git_calls):
    monkeypatch.setattr(snapshots, "now_ns", lambda: FAR_FUTURE_NS)
    repo = make_repo(tmp_path / "repo", {"app.py": "x = 1\n"})
    first = snapshots.take(repo)
    calls = len(git_calls)
    second = snapshots.take(repo)
    assert (second.tree, second.git_ran, len(git_calls)) == (first.tree, False, calls)
    assert second.branch == "main"
    git("checkout", "-q", "-b", "feature", cwd=repo)  # HEAD is read at every snapshot
    assert snapshots.take(repo).branch == "feature"


def test_an_empty_folder_needs_no_git_and_no_store(tmp_path, git_calls):
    folder = tmp_path / "task"
    folder.mkdir()
    empty = snapshots.take(folder)
    assert (empty.tree, empty.git_ran, git_calls) == (snapshots.EMPTY_TREE, False, [])
    assert not snapshots.store_path(empty.store).exists()
    assert diffs.changed_files(empty.store, empty.tree, empty.tree) == []
    (folder / "a.txt").write_text("a\n")
    full = snapshots.take(folder)
    # The store, made with one git call; the file made, hashed here (no ignore rule applies).
    assert git_calls == ["init"]
    assert changes(empty, full) == {"a.txt": "added"}


def test_a_store_made_ahead_is_the_one_the_first_change_uses(tmp_path, git_calls):
    folder = tmp_path / "task"
    folder.mkdir()
    empty = snapshots.take(folder)
    snapshots.made_ahead(cwd=folder)
    assert git_calls == ["init"] and snapshots.store_exists(empty.store)
    (folder / "a.txt").write_text("a\n")
    full = snapshots.take(folder)
    assert git_calls == ["init"] and changes(empty, full) == {"a.txt": "added"}
    snapshots.made_ahead(cwd=folder)  # there already: nothing to do
    repo = make_repo(tmp_path / "repo", {"app.py": "x = 1\n"})
    calls = len(git_calls)
    snapshots.made_ahead(cwd=repo)  # a repository's store comes with its first snapshot
    assert "init" not in git_calls[calls:]
    assert not snapshots.store_exists(snapshots.store_name(repo.resolve()))


@pytest.mark.parametrize(
    "change",
    [
        "edit",
        "same size, mtime put back",
        "new file",
        "new file in a new folder",
        "file in an empty folder",
        "delete",
        "rename",
        "chmod",
        "nested repository",
        "gitignore",
        "info/exclude",
    ],
)
def test_every_kind_of_change_is_seen(tmp_path, monkeypatch, change):
    monkeypatch.setattr(snapshots, "now_ns", lambda: FAR_FUTURE_NS)
    repo = make_repo(tmp_path / "repo", {"app.py": "x = 1\n", "lib/util.py": "u = 1\n"})
    (repo / "empty").mkdir()
    git_init(repo / "vendor", commit_files={"v.py": "v = 1\n"})
    (repo / ".git" / "info" / "exclude").write_text("*.tmp\n")
    (repo / "scratch.tmp").write_text("excluded until info/exclude changes\n")
    first = snapshots.take(repo)
    stat = (repo / "app.py").stat()
    if change == "edit":
        (repo / "app.py").write_text("x = 22\n")
    elif change == "same size, mtime put back":
        (repo / "app.py").write_text("x = 2\n")
        os.utime(repo / "app.py", ns=(stat.st_atime_ns, stat.st_mtime_ns))
    elif change == "new file":
        (repo / "new.py").write_text("n\n")
    elif change == "new file in a new folder":
        (repo / "pkg" / "deep").mkdir(parents=True)
        (repo / "pkg" / "deep" / "m.py").write_text("m\n")
    elif change == "file in an empty folder":
        (repo / "empty" / "e.py").write_text("e\n")
    elif change == "delete":
        (repo / "lib" / "util.py").unlink()
    elif change == "rename":
        (repo / "lib" / "util.py").rename(repo / "lib" / "tools.py")
    elif change == "chmod":
        (repo / "app.py").chmod(0o755)
    elif change == "nested repository":
        (repo / "vendor" / "v.py").write_text("v = 2\n")
    elif change == "gitignore":
        (repo / ".gitignore").write_text("*.log\n")
    elif change == "info/exclude":
        (repo / ".git" / "info" / "exclude").write_text("")
    second = snapshots.take(repo)
    assert second.tree != first.tree
    # Files changed in place are hashed without git (runner.gitobjects); the tree is git's.
    in_place = change in ("edit", "same size, mtime put back", "chmod", "nested repository")
    assert second.git_ran is not in_place
    snapshots._Seen.forget_all()  # forget the folder: git hashes it again
    assert snapshots.take(repo).tree == second.tree


def test_a_change_right_after_a_snapshot_is_not_lost_to_coarse_timestamps(tmp_path):
    # The real clock: a file changed in the same clock tick as a snapshot that read it can
    # keep its size and timestamps (git calls it racy); such a folder is given to git again.
    folder = tmp_path / "task"
    folder.mkdir()
    path = folder / "a.txt"
    path.write_text("one\n")
    stat = path.stat()
    first = snapshots.take(folder)
    path.write_text("two\n")
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    second = snapshots.take(folder)
    store = snapshots.store_path(second.store)
    shown = git_text("show", f"{second.tree}:a.txt", cwd=store, env={"GIT_DIR": str(store)})
    assert shown == "two" and second.tree != first.tree


def test_a_folder_with_too_many_entries_is_always_given_to_git(tmp_path, monkeypatch):
    monkeypatch.setattr(snapshots, "now_ns", lambda: FAR_FUTURE_NS)
    monkeypatch.setattr(snapshots, "FINGERPRINT_ENTRIES", 5)
    folder = tmp_path / "task"
    folder.mkdir()
    for n in range(10):
        (folder / f"f{n}.txt").write_text(f"{n}\n")
    first = snapshots.take(folder)
    second = snapshots.take(folder)
    assert second.git_ran and second.tree == first.tree
    (folder / "f3.txt").write_text("changed\n")
    assert snapshots.take(folder).tree != first.tree


def test_a_store_changed_by_someone_else_is_given_to_git_again(tmp_path, monkeypatch):
    monkeypatch.setattr(snapshots, "now_ns", lambda: FAR_FUTURE_NS)
    folder = tmp_path / "task"
    folder.mkdir()
    (folder / "a.txt").write_text("a\n")
    first = snapshots.take(folder)
    store = snapshots.store_path(first.store)
    (store / "index").unlink()  # e.g. the store was removed and made again meanwhile
    assert snapshots.take(folder).git_ran


# --- a folder's watch: no walk while the kernel saw no change (issue 28) ------------------------


@pytest.fixture
def walks(monkeypatch):
    """The folders snapshots walked (runner.snapshots.fingerprint), in order."""
    walked = []
    real = snapshots.fingerprint

    def counted(root, *args, **kwargs):
        walked.append(root.name)
        return real(root, *args, **kwargs)

    monkeypatch.setattr(snapshots, "fingerprint", counted)
    return walked


def inotify_fds() -> int:
    fds = os.listdir("/proc/self/fd")
    return sum(_link(f"/proc/self/fd/{fd}") == "anon_inode:inotify" for fd in fds)


def _link(path) -> str:
    try:
        return os.readlink(path)
    except OSError:
        return ""


def test_an_unchanged_folder_is_not_walked_again_until_something_changes(tmp_path, walks):
    repo = make_repo(tmp_path / "repo", {"app.py": "x = 1\n", "lib/util.py": "u = 1\n"})
    first = snapshots.take(repo)  # (a folder is watched from its second walk on)
    snapshots.take(repo)
    second = snapshots.take(repo)
    assert walks == ["repo", "repo"]  # the watch armed by the second walk saw nothing
    assert (second.tree, second.store, second.root, second.git_ran) == (
        first.tree,
        first.store,
        first.root,
        False,
    )
    (repo / "lib" / "util.py").write_text("u = 2\n")
    third = snapshots.take(repo)
    assert walks == ["repo"] * 3 and third.tree != first.tree
    (repo / "lib" / "util.py").read_text()  # reading is no change
    assert snapshots.take(repo).tree == third.tree and walks == ["repo"] * 3


def test_a_folder_made_after_a_snapshot_is_watched_from_the_next_one(tmp_path, walks):
    folder = tmp_path / "task"
    folder.mkdir()
    snapshots.take(folder)
    (folder / "pkg" / "deep").mkdir(parents=True)
    (folder / "pkg" / "deep" / "m.py").write_text("m\n")
    made = snapshots.take(folder)
    (folder / "pkg" / "deep" / "m.py").write_text("m = 2\n")  # (a write in the new folder)
    edited = snapshots.take(folder)
    assert edited.tree != made.tree and len(walks) == 3
    store = snapshots.store_path(edited.store)
    shown = git_text("show", f"{edited.tree}:pkg/deep/m.py", cwd=store, env={"GIT_DIR": str(store)})
    assert shown == "m = 2"


def test_a_folder_on_a_file_system_not_watched_is_walked_every_time(tmp_path, walks, monkeypatch):
    monkeypatch.setattr("runner.folderwatch.LOCAL_FILE_SYSTEMS", frozenset())  # (a network one)
    folder = tmp_path / "task"
    folder.mkdir()
    (folder / "a.txt").write_text("a\n")
    trees = {snapshots.take(folder).tree for _ in range(3)}
    assert len(trees) == 1 and walks == ["task"] * 3


def test_a_folder_on_another_device_makes_the_watch_unusable(tmp_path):
    watch = folderwatch.FolderWatch()
    generation = watch.renew()
    device = os.lstat(tmp_path).st_dev
    watch.add(str(tmp_path), device)
    assert watch.usable and not watch.changed(generation)
    (tmp_path / "sub").mkdir()
    assert watch.changed(generation)  # (one event is enough for good)
    generation = watch.renew()  # the next walk
    assert not watch.changed(generation)
    watch.add(str(tmp_path / "sub"), device + 1)  # (a folder mounted inside it)
    assert not watch.usable and watch.changed(generation)


def test_a_path_that_names_another_folder_now_is_looked_at_again(tmp_path, walks):
    one, two = tmp_path / "one", tmp_path / "two"
    for folder, text in ((one, "one\n"), (two, "two\n")):
        folder.mkdir()
        (folder / "a.txt").write_text(text)
    link = tmp_path / "work"
    link.symlink_to(one)
    first = snapshots.take(link)
    link.unlink()
    link.symlink_to(two)  # (nothing changed in the folder the watch watches)
    second = snapshots.take(link)
    assert second.root == str(two) and second.store != first.store


def test_a_repository_made_above_the_folder_is_looked_at_again(tmp_path, walks):
    folder = tmp_path / "outer" / "task"
    folder.mkdir(parents=True)
    (folder / "a.txt").write_text("a\n")
    first = snapshots.take(folder)
    git_init(tmp_path / "outer")  # (outside the folder the watch watches)
    second = snapshots.take(folder)
    assert second.root == str(tmp_path / "outer") and second.store != first.store


def test_few_watches_are_kept_and_none_is_left_open(tmp_path, monkeypatch):
    monkeypatch.setattr(snapshots, "WATCHED_FOLDERS", 3)
    snapshots._Seen.forget_all()
    before = inotify_fds()
    folders = _task_folders(tmp_path, 6)
    for folder in folders:
        (folder / "a.txt").write_text("a\n")
        snapshots.take(folder)
        snapshots.take(folder)  # (watched from its second walk on)
    stores = [snapshots.store_path(snapshots.store_name(f.resolve())) for f in folders]
    assert list(snapshots._Seen._watches) == stores[3:]  # those used last
    # The others closed by a thread of their own (closing may wait for the kernel)
    wait_until(lambda: inotify_fds() - before == 3, timeout=10, what="3 watches left")
    watch = snapshots._Seen._watches[stores[5]]
    for n in range(5):  # changes: each walk renews the folder's watch (closing one is slow)
        (folders[5] / "a.txt").write_text(f"{n}\n")
        snapshots.take(folders[5])
    assert inotify_fds() - before == 3 and snapshots._Seen._watches[stores[5]] is watch
    snapshots._Seen.forget_all()
    assert inotify_fds() == before


def test_a_watch_that_answers_is_in_use_and_let_go_last(tmp_path, monkeypatch, walks):
    monkeypatch.setattr(snapshots, "WATCHED_FOLDERS", 2)
    snapshots._Seen.forget_all()
    folders = [tmp_path / name for name in ("one", "two", "three", "four")]
    stores = [snapshots.store_path(snapshots.store_name(f)) for f in folders]

    def watched_from_now(folder):
        folder.mkdir()
        snapshots.take(folder)
        snapshots.take(folder)  # (watched from its second walk on)

    for folder in folders[:3]:
        watched_from_now(folder)
    assert list(snapshots._Seen._watches) == stores[1:3]
    snapshots.take(folders[1])  # two's watch answers (no walk): in use...
    watched_from_now(folders[3])  # ...so three's is let go, not two's
    assert walks == [name for name in ("one", "two", "three", "four") for _ in (1, 2)]
    assert list(snapshots._Seen._watches) == [stores[1], stores[3]]


def test_a_folder_too_big_to_walk_whole_is_not_watched(tmp_path, monkeypatch):
    monkeypatch.setattr(snapshots, "FINGERPRINT_ENTRIES", 5)
    monkeypatch.setattr(snapshots, "BIG_FOLDER_SECONDS", 0.0)  # (walked again at once)
    folder = tmp_path / "task"
    folder.mkdir()
    for n in range(10):
        (folder / f"f{n}.txt").write_text(f"{n}\n")
    store = snapshots.store_path(snapshots.take(folder).store)
    assert snapshots.take(folder).git_ran and snapshots.take(folder).git_ran
    assert store not in snapshots._Seen._watches


def test_folders_taking_turns_beyond_those_remembered_are_not_watched(tmp_path, monkeypatch):
    """More folders than remembered (FINGERPRINTS_KEPT), snapshotted in turn: none is
    remembered at its next walk, so none gets a watch (made and closed for nothing)."""
    monkeypatch.setattr(snapshots, "FINGERPRINTS_KEPT", 2)
    snapshots._Seen.forget_all()
    before = inotify_fds()
    folders = _task_folders(tmp_path, 4)
    for _turn in range(3):
        for folder in folders:
            snapshots.take(folder)
    assert inotify_fds() == before and not snapshots._Seen._watches


def _task_folders(tmp_path, count: int) -> list:
    """`count` new empty folders task0, task1... in `tmp_path`."""
    folders = [tmp_path / f"task{n}" for n in range(count)]
    for folder in folders:
        folder.mkdir()
    return folders


# --- files changed in place: hashed without git (issue 28) -------------------------------------


def gits_own_tree(folder) -> str:
    """The tree git writes for the folder: its memory forgotten, git adds it again, and the
    tree worked out here from git's index is the one `git write-tree` writes."""
    snapshots._Seen.forget_all()
    snapshot = snapshots.take(folder)
    assert snapshot.git_ran
    store = snapshots.store_path(snapshot.store)
    env = {"GIT_DIR": str(store), "GIT_INDEX_FILE": str(store / "index")}
    assert git_text("write-tree", cwd=store, env=env) == snapshot.tree
    return snapshot.tree


def test_files_changed_in_place_are_hashed_without_git_as_git_would(
    tmp_path, monkeypatch, git_calls
):
    monkeypatch.setattr(snapshots, "now_ns", lambda: FAR_FUTURE_NS)
    repo = make_repo(
        tmp_path / "repo",
        {
            "app.py": "x = 1\n",
            "a/b/deep.txt": "deep\n",
            "a/b-side.txt": "a name sorted between a folder and its files\n",
            "a/b.c": "c\n",
            "run.sh": "echo hi\n",
            ".gitignore": "build/\n",
        },
    )
    (repo / "build").mkdir()
    (repo / "build" / "out.o").write_bytes(b"ignored\n")
    (repo / "untracked.txt").write_text("recorded by git, not committed\n")
    first = snapshots.take(repo)
    calls = len(git_calls)
    (repo / "a" / "b" / "deep.txt").write_text("deeper\n")
    (repo / "run.sh").chmod(0o755)
    (repo / "untracked.txt").write_bytes(b"\x00binary\r\n")
    (repo / "build" / "out.o").write_bytes(b"ignored, changed\n")
    second = snapshots.take(repo)
    assert (second.git_ran, len(git_calls)) == (False, calls)
    assert changes(first, second) == {
        "a/b/deep.txt": "modified",
        "run.sh": "modified",
        "untracked.txt": "modified",
    }
    (repo / "app.py").write_text("x = 2\n")  # the next one starts from the tree written here
    third = snapshots.take(repo)
    assert not third.git_ran and changes(second, third) == {"app.py": "modified"}
    assert gits_own_tree(repo) == third.tree
    store = snapshots.store_path(third.store)
    git("fsck", "--no-dangling", "--connectivity-only", cwd=store, env={"GIT_DIR": str(store)})


def test_an_ignored_file_changed_in_place_leaves_the_tree_as_it_was(tmp_path, monkeypatch):
    monkeypatch.setattr(snapshots, "now_ns", lambda: FAR_FUTURE_NS)
    repo = make_repo(tmp_path / "repo", {"app.py": "x = 1\n", ".gitignore": "*.log\n"})
    (repo / "debug.log").write_text("one\n")
    first = snapshots.take(repo)
    (repo / "debug.log").write_text("two\n")
    second = snapshots.take(repo)
    assert (second.git_ran, second.tree) == (False, first.tree)


@pytest.mark.parametrize(
    "change", ["symbolic link retargeted", "attributes file", "user's attributes", "large file"]
)
def test_what_git_may_read_otherwise_goes_to_git(tmp_path, monkeypatch, change):
    monkeypatch.setattr(snapshots, "now_ns", lambda: FAR_FUTURE_NS)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    repo = make_repo(tmp_path / "repo", {"app.py": "x = 1\n", "big.bin": "b" * 64})
    (repo / "link").symlink_to("app.py")
    if change == "attributes file":
        commit(repo, {".gitattributes": "*.py text eol=crlf\n"})
    first = snapshots.take(repo)
    if change == "symbolic link retargeted":
        (repo / "link").unlink()
        (repo / "link").symlink_to("big.bin")
    elif change == "large file":
        monkeypatch.setattr(gitobjects, "BLOB_MAX_BYTES", 32)
        (repo / "big.bin").write_text("c" * 64)
    elif change == "user's attributes":  # git reads it whatever its configuration says
        (tmp_path / "config" / "git").mkdir(parents=True)
        (tmp_path / "config" / "git" / "attributes").write_text("*.py text eol=crlf\n")
    (repo / "app.py").write_text("x = 2\n")
    second = snapshots.take(repo)
    assert second.git_ran and second.tree != first.tree
    assert gits_own_tree(repo) == second.tree


def test_files_made_and_removed_where_nothing_is_ignored_are_written_without_git(
    tmp_path, monkeypatch, git_calls
):
    """A task's temp folder (no ignore rule anywhere): what an agent makes or removes is
    hashed here too, folders made and left empty included, as `git add -A` would record it."""
    monkeypatch.setattr(snapshots, "now_ns", lambda: FAR_FUTURE_NS)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    folder = tmp_path / "task"
    (folder / "docs").mkdir(parents=True)
    (folder / "docs" / "plan.md").write_text("plan\n")
    (folder / "notes.txt").write_text("notes\n")
    first = snapshots.take(folder)
    calls = len(git_calls)
    (folder / "docs" / "plan.md").unlink()  # docs/ is left empty: no tree for it
    (folder / "src" / "app" / "deep").mkdir(parents=True)
    (folder / "src" / "app" / "deep" / "main.py").write_text("print(1)\n")
    (folder / "src" / "app.py").write_text("a name sorted beside the folder app/\n")
    (folder / "empty").mkdir()
    (folder / "notes.txt").write_text("more notes\n")
    (folder / "run.sh").write_text("#!/bin/sh\n")
    (folder / "run.sh").chmod(0o755)
    second = snapshots.take(folder)
    assert (second.git_ran, len(git_calls)) == (False, calls)
    assert changes(first, second) == {
        "docs/plan.md": "deleted",
        "notes.txt": "modified",
        "run.sh": "added",
        "src/app.py": "added",
        "src/app/deep/main.py": "added",
    }
    (folder / "src" / "app" / "deep" / "main.py").unlink()
    third = snapshots.take(folder)
    assert not third.git_ran and changes(second, third) == {"src/app/deep/main.py": "deleted"}
    assert gits_own_tree(folder) == third.tree


@pytest.mark.parametrize(
    "change",
    [
        "an ignore file in the folder",
        "the user's ignore file",
        "a rule in the repository's exclude file",
        "a rule in the exclude file of an empty repository",
        "a repository made inside",
        "a new link",
        "a name git may refuse",
    ],
)
def test_files_made_where_git_may_ignore_or_refuse_them_go_to_git(tmp_path, monkeypatch, change):
    monkeypatch.setattr(snapshots, "now_ns", lambda: FAR_FUTURE_NS)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    if change.endswith("of an empty repository"):  # (its first snapshot needs no store)
        folder = tmp_path / "repo"
        git_init(folder)
        (folder / ".git" / "info" / "exclude").write_text("*.log\n")
    else:
        folder = make_repo(tmp_path / "repo", {"app.py": "x = 1\n"})
    if change == "an ignore file in the folder":
        (folder / "sub").mkdir()
        (folder / "sub" / ".gitignore").write_text("*.log\n")
    elif change == "the user's ignore file":
        (tmp_path / "config" / "git").mkdir(parents=True)
        (tmp_path / "config" / "git" / "ignore").write_text("*.log\n")
    elif change == "a rule in the repository's exclude file":
        (folder / ".git" / "info" / "exclude").write_text("*.log\n")
    snapshots.take(folder)
    if change == "a repository made inside":
        git_init(folder / "vendor")
        (folder / "vendor" / "v.log").write_text("v\n")
    elif change == "a new link":
        (folder / "link.log").symlink_to("app.py")
    elif change == "a name git may refuse":
        (folder / "GIT~1").write_text("x\n")
    (folder / "debug.log").write_text("log\n")
    second = snapshots.take(folder)
    assert second.git_ran
    assert gits_own_tree(folder) == second.tree


def test_a_fault_in_a_snapshot_without_git_costs_a_git_run_not_the_snapshot(tmp_path, monkeypatch):
    monkeypatch.setattr(snapshots, "now_ns", lambda: FAR_FUTURE_NS)
    repo = make_repo(tmp_path / "repo", {"app.py": "x = 1\n"})
    snapshots.take(repo)

    def broken(self, files):
        raise RuntimeError("a bug")

    monkeypatch.setattr(gitobjects.TreeModel, "updated", broken)
    (repo / "app.py").write_text("x = 2\n")
    second = snapshots.take(repo)
    assert second.git_ran and gits_own_tree(repo) == second.tree


def test_a_tree_pruned_since_it_was_remembered_is_written_again(tmp_path, monkeypatch):
    """The cleanup prunes trees no run refers to: the folder's memory goes with them."""
    monkeypatch.setattr(snapshots, "now_ns", lambda: FAR_FUTURE_NS)
    folder = tmp_path / "task"
    folder.mkdir()
    (folder / "a.txt").write_text("a\n")
    kept = snapshots.take(folder)
    (folder / "a.txt").write_text("b\n")
    last = snapshots.take(folder)  # no run refers to it
    snapshots.prune({kept.store: {kept.tree}}, expire="now")
    (folder / "gone.tmp").write_text("x")  # the folder's own timestamps move on
    (folder / "gone.tmp").unlink()
    again = snapshots.take(folder)
    assert again.tree == last.tree
    store = snapshots.store_path(again.store)
    git("cat-file", "-e", f"{again.tree}^{{tree}}", cwd=store, env={"GIT_DIR": str(store)})


@pytest.mark.parametrize("how", ["version 4", "split index", "intent to add", "cut short"])
def test_an_index_this_does_not_read_goes_to_git(tmp_path, how):
    repo = make_repo(tmp_path / "repo", {"app.py": "x = 1\n"})
    if how == "version 4":
        git("update-index", "--index-version", "4", cwd=repo)
    elif how == "split index":
        git("update-index", "--split-index", cwd=repo)
    elif how == "intent to add":
        (repo / "new.py").write_text("n\n")
        git("add", "-N", "new.py", cwd=repo)
    else:
        index = repo / ".git" / "index"
        index.write_bytes(index.read_bytes()[:40])
    with pytest.raises(gitobjects.Unsupported):
        gitobjects.read_index(repo / ".git" / "index")


def test_an_index_read_here_gives_the_tree_git_writes(tmp_path):
    files = {f"pkg{n % 3}/sub{n % 2}/m{n}.py": f"{n}\n" for n in range(20)}
    repo = make_repo(tmp_path / "repo", {**files, "pkg0.txt": "sorted after pkg0/\n"})
    (repo / "tool").write_text("#!/bin/sh\n")
    (repo / "tool").chmod(0o755)
    git("add", "-A", cwd=repo)
    index = gitobjects.read_index(repo / ".git" / "index")
    model, trees = gitobjects.TreeModel.from_files(index)
    root = git_text("write-tree", cwd=repo)
    assert model.root.hex() == root
    kinds = "--format=%(objecttype) %(objectname)"
    listing = git_text("ls-tree", "-r", "-t", kinds, root, cwd=repo)
    subtrees = {line.split()[1] for line in listing.splitlines() if line.startswith("tree ")}
    assert sorted(object_id.hex() for object_id, _data in trees) == sorted({root, *subtrees})


def test_the_index_of_a_large_folder_is_written_out_by_git(tmp_path, monkeypatch, git_calls):
    monkeypatch.setattr(snapshots, "INDEX_READ_BYTES", 100)
    repo = make_repo(tmp_path / "repo", {"app.py": "x = 1\n", "lib/util.py": "u = 1\n"})
    snapshot = snapshots.take(repo)
    assert git_calls[-1] == "write-tree"
    assert snapshot.tree == git_text("rev-parse", "HEAD^{tree}", cwd=repo)


# --- totals -------------------------------------------------------------------------------------


def test_totals_of_several_pairs_come_from_one_git_call_and_match_the_file_lists(tmp_path):
    folder = tmp_path / "task"
    folder.mkdir()
    (folder / "old name.txt").write_text("".join(f"line {n}\n" for n in range(30)))
    (folder / "edit.py").write_text("a = 1\nb = 2\n")
    (folder / "gone.txt").write_text("bye\n")
    a = snapshots.take(folder)
    (folder / "old name.txt").rename(folder / "new\nname.txt")
    (folder / "edit.py").write_text("a = 1\nb = 3\nc = 4\n")
    (folder / "gone.txt").unlink()
    (folder / "blob.bin").write_bytes(bytes(range(256)))
    b = snapshots.take(folder)
    (folder / "later.txt").write_text("x\ny\n")
    c = snapshots.take(folder)
    pairs = [(a.tree, b.tree), (b.tree, c.tree), (a.tree, c.tree), (c.tree, c.tree)]
    calls = []
    real = diffs.git
    diffs.git = lambda *args, **kwargs: calls.append(args) or real(*args, **kwargs)
    try:
        counted = diffs.totals_between(a.store, pairs)
    finally:
        diffs.git = real
    assert len(calls) == 1
    expected = [diffs.totals(diffs.changed_files(a.store, *pair)) for pair in pairs]
    assert counted == expected
    assert counted[0] == {"files_changed": 4, "lines_added": 2, "lines_removed": 2}
    assert counted[3] == {"files_changed": 0, "lines_added": 0, "lines_removed": 0}


def test_the_totals_of_a_tree_that_is_gone_are_an_error(tmp_path):
    folder = tmp_path / "task"
    folder.mkdir()
    (folder / "a.txt").write_text("a\n")
    a = snapshots.take(folder)
    with pytest.raises(diffs.GitError):
        diffs.totals_between(a.store, [(a.tree, "1" * 40)])


def test_a_snapshot_never_runs_git_in_the_users_repository(tmp_path, monkeypatch):
    repo = make_repo(tmp_path / "repo", {"app.py": "x = 1\n"})
    git_init(repo / "newapp")
    (repo / "newapp" / "main.rs").write_text("fn main() {}\n")
    states = (repository_state(repo), repository_state(repo / "newapp"))
    snapshots.take(repo)
    (repo / "app.py").write_text("x = 2\n")
    snapshots.take(repo)
    (repo / "app.py").write_text("x = 1\n")
    status = subprocess.run(
        ["git", "--no-optional-locks", "status", "--porcelain"], cwd=repo, capture_output=True
    )
    assert status.stdout.decode() == "?? newapp/\n"
    assert (repository_state(repo), repository_state(repo / "newapp")) == states


@pytest.fixture
def made(monkeypatch):
    """The files and folders made through os.open(O_CREAT) and os.mkdir while it is on."""
    made, on = [], [False]
    real_open, real_mkdir = os.open, os.mkdir

    def counted_open(path, flags, *args, **kwargs):
        if on[0] and flags & os.O_CREAT:
            made.append(str(path))
        return real_open(path, flags, *args, **kwargs)

    def counted_mkdir(path, *args, **kwargs):
        if on[0]:
            made.append(str(path))
        return real_mkdir(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", counted_open)
    monkeypatch.setattr(os, "mkdir", counted_mkdir)
    monkeypatch.setattr(gitobjects, "_spares", type(gitobjects._spares)())
    return made, on


def spare_names(snapshot) -> list[str]:
    home = snapshots.store_path(snapshot.store) / gitobjects.SPARES_FOLDER
    return sorted(os.listdir(home)) if home.is_dir() else []


def test_a_changes_objects_go_into_spares_made_while_the_agent_worked(tmp_path, made, monkeypatch):
    # A new file or folder costs up to ~0.8 ms on a busy ext4 disk, moving one ~0.02 ms: the
    # objects of a change are written into files and fan-out folders made ahead.
    made, on = made
    monkeypatch.setattr(gitobjects, "SPARE_FOLDERS", 4)  # (this change takes 4 new ones)
    folder = tmp_path / "task"
    folder.mkdir()
    (folder / "a.txt").write_text("a\n")
    first = snapshots.take(folder)
    snapshots.made_ahead(store=first.store)
    spares = spare_names(first)
    assert len(spares) == gitobjects.SPARE_FILES + gitobjects.SPARE_FOLDERS
    (folder / "deep" / "er").mkdir(parents=True)
    (folder / "deep" / "er" / "b.txt").write_text("b\n")
    on[0] = True
    second = snapshots.take(folder)
    on[0] = False
    # A blob and three trees (er, deep, the top), in fan-out folders this store did not have.
    assert made == []
    assert len(spare_names(second)) == len(spares) - 4 - 4
    assert changes(first, second) == {"deep/er/b.txt": "added"}
    store = snapshots.store_path(second.store)
    env = {"GIT_DIR": str(store)}
    assert git("fsck", "--no-dangling", cwd=store, env=env).returncode == 0
    blob = git_text("rev-parse", f"{second.tree}:deep/er/b.txt", cwd=store, env=env)
    assert oct((store / "objects" / blob[:2] / blob[2:]).stat().st_mode & 0o777) == "0o444"
    snapshots.made_ahead(store=second.store)  # made up again
    assert len(spare_names(second)) == len(spares)


def test_a_store_whose_folder_never_changed_gets_no_spares(tmp_path, made):
    # (a task whose agents change nothing: nothing to make ahead)
    folder = tmp_path / "task"
    folder.mkdir()
    empty = snapshots.take(folder)
    snapshots.made_ahead(cwd=folder, store=empty.store)
    assert snapshots.store_exists(empty.store) and spare_names(empty) == []
    (folder / "a.txt").write_text("a\n")
    snapshots.take(folder)  # its first objects: from now on it has spares
    snapshots.made_ahead(store=empty.store)
    assert len(spare_names(empty)) == gitobjects.SPARE_FILES + gitobjects.SPARE_FOLDERS


def test_without_spares_left_objects_are_made_as_before(tmp_path, made, monkeypatch):
    made, on = made
    monkeypatch.setattr(gitobjects, "SPARE_FILES", 1)
    monkeypatch.setattr(gitobjects, "SPARE_FOLDERS", 0)
    folder = tmp_path / "task"
    folder.mkdir()
    (folder / "a.txt").write_text("a\n")
    first = snapshots.take(folder)
    snapshots.made_ahead(store=first.store)
    (folder / "sub").mkdir()
    (folder / "sub" / "b.txt").write_text("b\n")
    on[0] = True
    second = snapshots.take(folder)
    on[0] = False
    assert spare_names(second) == []
    # The spare took one object (its folder made then); the other two were made as before.
    assert len({path for path in made if "tmp_obj_" in path}) == 2
    assert changes(first, second) == {"sub/b.txt": "added"}


def test_spares_a_dead_worker_left_are_removed_and_a_pruned_store_keeps_none(tmp_path, made):
    folder = tmp_path / "task"
    folder.mkdir()
    (folder / "a.txt").write_text("a\n")
    first = snapshots.take(folder)
    home = snapshots.store_path(first.store) / gitobjects.SPARES_FOLDER
    home.mkdir()
    dead = subprocess.Popen(["true"])
    dead.wait()
    (home / f"{dead.pid}-1").write_text("")
    (home / f"{dead.pid}-2").mkdir()
    (home / f"{os.getppid()}-1").write_text("")  # a live process's: kept
    snapshots.made_ahead(store=first.store)
    names = spare_names(first)
    assert f"{dead.pid}-1" not in names and f"{dead.pid}-2" not in names
    assert f"{os.getppid()}-1" in names
    snapshots.prune({first.store: {first.tree}}, expire="now")
    assert spare_names(first) == [f"{os.getppid()}-1"]


def test_spares_are_kept_for_a_few_stores_only(tmp_path, made, monkeypatch):
    monkeypatch.setattr(gitobjects, "SPARE_STORES", 2)
    taken = []
    for name in ("one", "two", "three"):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "a.txt").write_text(f"{name}\n")
        taken.append(snapshots.take(folder))
        snapshots.made_ahead(store=taken[-1].store)
    # The first store's spares were given back (removed) when the third made its own.
    spares = gitobjects.SPARE_FILES + gitobjects.SPARE_FOLDERS
    assert [len(spare_names(snapshot)) for snapshot in taken] == [0, spares, spares]


def test_a_pass_looks_for_an_empty_folders_store_until_it_is_found(monkeypatch):
    """An empty folder's "before" is the empty tree at every step: its store is looked for (to
    be made while the agent works, PassSnapshots.start_counting) until it is found, then not."""
    looked = []
    monkeypatch.setattr(snapshots, "store_exists", lambda name: looked.append(name) or name == "b")
    memory = PassSnapshots()
    missing = [memory.store_missing(name) for name in ("a", "a", "b", "b")]
    assert missing == [True, True, False, False]
    assert looked == ["a", "a", "b"]
