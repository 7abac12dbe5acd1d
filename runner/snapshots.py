"""Snapshots of a run's working directory as git trees (DESIGN "Git snapshots").

A snapshot records every file of the working directory (tracked and untracked, `.gitignore`
honoured, `.git` excluded; a repository nested in it is recorded as its files) as a tree in a
private object store under the data directory, one per working directory:
`<data>/snapshots/<hash of the path>/`. The user's repository is never written: git runs with
GIT_DIR pointing at the private store, whose `objects/info/alternates` names the repository's
own objects (so unchanged blobs are not copied), and with a temporary index seeded from the
previous snapshot's index, or the repository's own index the first time, so unchanged files are
not hashed again.

A folder of a few files that did not change since its last snapshot is not given to git at all:
the stat data of its entries (taken before git read them, like git's own index) says so, and
the last tree is the answer; while the folder's inotify watch, armed as that walk listed it,
saw no change since, it is not even walked (runner.folderwatch). When what changed is files
only (files the last tree records, changed in place; or, where no ignore rule applies, files
made or removed), their contents are hashed here and the trees above them written without git
(runner.gitobjects); when git does add a folder, the trees of its index are written here too,
not by `git write-tree`. The trees a run refers to are kept by the daily cleanup (`prune`),
from the runs in the database: a snapshot writes no ref. The files and fan-out folders those
objects go into are made while the agent works (`made_ahead`, runner.gitobjects's spares):
making a file costs up to ~0.8 ms on a busy disk, moving one into place ~0.02 ms.
"""

import contextlib
import functools
import hashlib
import logging
import os
import re
import shutil
import stat
import tempfile
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings

from runner import folderwatch, gitobjects
from runner.git import GitError, GitTimeout, add_all, enter_nested, git, git_text, gitlinks

log = logging.getLogger(__name__)

KEEP_REF = "refs/malamar/keep"  # a tree of every tree the runs in the database refer to
OLD_REF_PREFIX = "refs/malamar/runs/"  # a ref per run and side, as snapshots were kept before
IDLE_SECONDS = 3600  # a store unused this long, without runs, is removed
ADD_TIMEOUT_SECONDS = 60
NESTED_CHECKED = "malamar-nested-files"  # the store's index has no gitlink left to enter
FINGERPRINT_ENTRIES = 1000  # a folder with more entries is always given to git
BIG_FOLDER_SECONDS = 300  # ...and not walked again for this long
FINGERPRINTS_KEPT = 32  # folders whose last fingerprint is remembered (per process)
# ...of which this many keep a watch (runner.folderwatch), those used last: Linux allows a user
# 128 inotify instances by default, shared with every other program (and each worker).
WATCHED_FOLDERS = 16
_creating = threading.Lock()  # two first snapshots of one folder (parallel chats) at once


@dataclass(frozen=True)
class Snapshot:
    store: str  # the private store's folder name under <data>/snapshots
    tree: str
    root: str  # the folder the tree describes (a repository's top level, or the run's folder)
    branch: str  # the repository's current branch ("" when none)
    seconds: float
    git_ran: bool = True  # False: an empty folder, or one unchanged since its last snapshot


class SnapshotError(Exception):
    """A snapshot could not be taken; `str()` says why, in words a user can read."""


def snapshots_dir() -> Path:
    return Path(settings.DATA_DIR) / "snapshots"


def store_name(root: str | Path) -> str:
    return hashlib.sha256(str(root).encode()).hexdigest()[:24]


def store_path(name: str) -> Path:
    return snapshots_dir() / name


# where the folder is: a repository or not ----------------------------------------------------
@dataclass(frozen=True)
class _Repository:
    top: Path
    objects: Path
    index: Path
    head: Path  # the HEAD file: the branch is read from it at every snapshot


_repositories: dict[tuple, _Repository | None] = {}  # by (cwd, the .git found above it)


def _dot_git_above(cwd: str | Path) -> tuple:
    """The nearest `.git` at or above `cwd`, as a key that changes when git's answer may: its
    path, inode and type, and a `.git` file's content (it names the repository)."""
    folder = str(cwd)
    while True:  # (strings, not paths: a temp folder's walk goes up to / at every snapshot)
        dot_git = os.path.join(folder, ".git")
        try:  # (no exception for each folder without one: as git, a dangling link is none)
            stat = os.lstat(dot_git) if os.access(dot_git, os.F_OK) else None
        except OSError:
            stat = None
        if stat is None:
            parent = os.path.dirname(folder)
            if parent == folder:
                return ()
            folder = parent
            continue
        content = b""
        if not os.path.isdir(dot_git):
            with contextlib.suppress(OSError), open(dot_git, "rb") as file:
                content = file.read(4096)
        return (dot_git, stat.st_ino, stat.st_mode, content)


def _repository(cwd: Path, dot_git: tuple | None = None) -> _Repository | None:
    """The repository `cwd` is in (None: none), asked of git when the `.git` above changed
    (`dot_git`: _dot_git_above(cwd), when read already)."""
    key = (str(cwd), _dot_git_above(cwd) if dot_git is None else dot_git)
    if key in _repositories:
        return _repositories[key]
    repository = _ask_git(cwd) if key[1] else None
    if len(_repositories) > 256:
        _repositories.clear()
    _repositories[key] = repository
    return repository


def _ask_git(cwd: Path) -> _Repository | None:
    done = git(
        "rev-parse", "--is-inside-work-tree", "--show-toplevel", "--git-path", "objects",
        "--git-path", "index", "--git-path", "HEAD",
        cwd=cwd, check=False,
    )  # fmt: skip
    lines = done.stdout.decode("utf-8", "replace").splitlines()
    if len(lines) < 5 or lines[0] != "true":
        return None  # not a work tree (a bare repository, a .git git does not accept)
    top, objects, index, head = lines[1:5]
    return _Repository(Path(top), *((cwd / path).resolve() for path in (objects, index, head)))


def _branch(repository: _Repository) -> str:
    """The branch HEAD names ("" when detached), read from HEAD as git writes it."""
    try:
        head = repository.head.read_text("utf-8", "replace").strip()
    except OSError:
        head = ""
    branch = head.removeprefix("ref: refs/heads/") if head.startswith("ref: ") else ""
    if branch != ".invalid":
        return branch
    # A reftable repository's HEAD file is a stub: ask git.
    done = git("symbolic-ref", "--short", "-q", "HEAD", cwd=repository.top, check=False)
    return done.stdout.decode("utf-8", "replace").strip()


# the private store ---------------------------------------------------------------------------
def _ensure_store(path: Path, alternates: Path | None) -> None:
    _store_made(path)
    info = path / "objects" / "info" / "alternates"
    wanted = f"{alternates}\n" if alternates else ""
    current = info.read_text() if info.exists() else ""
    if current != wanted:
        info.write_text(wanted)


def made_ahead(*, cwd: str | Path | None = None, store: str | None = None) -> None:
    """While an agent works (worker.snapshotting): the store of `cwd`, a folder that is no
    repository, made if it has none yet (its first snapshot with a change would make it, a
    `git init` of ~3 ms, between two agents); then the spare files and folders of `store`
    (runner.gitobjects: its next objects are moved into place, not made, between two agents).
    Never raises: `take` makes the store and its objects itself when this could not."""
    try:
        root = Path(cwd).resolve() if cwd is not None else None
        if root is not None and _repository(root) is None:  # (a repository's store: made)
            _store_made(store_path(store_name(root)))
    except Exception:
        log.warning("Could not make a snapshot store ahead", exc_info=True)
    if store is not None:
        gitobjects.spares_made(store_path(store) / "objects")


def spares_wanted(store: str) -> bool:
    """Whether `made_ahead` has spares to make for `store`."""
    return gitobjects.spares_short(store_path(store) / "objects")


def _store_made(path: Path) -> None:
    """The store at `path`, made once (two threads may ask: the second finds it made)."""
    with _creating:
        if not (path / "HEAD").exists():
            _create_store(path)


def store_exists(name: str) -> bool:
    return (store_path(name) / "HEAD").exists()


STORE_CONFIG = {
    "gc.auto": "0",  # the cleanup job prunes, nothing else
    "core.bare": "false",  # it describes a work tree
    # Directories whose mtime did not change are not read again for untracked files.
    "core.untrackedCache": "true",
}


def _create_store(path: Path) -> None:
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    git("init", "-q", "--bare", str(path), cwd=path.parent)
    config = path / "config"
    text = config.read_text()
    if "\tbare = true\n" in text:  # as git init writes it: one edit, not a git call per key
        text = text.replace("\tbare = true\n", "\tbare = false\n\tuntrackedCache = true\n")
        config.write_text(f"{text}[gc]\n\tauto = 0\n")
    else:
        for key, value in STORE_CONFIG.items():
            git("config", key, value, cwd=path, env={"GIT_DIR": str(path)})
    (path / NESTED_CHECKED).touch()  # an index made here never had a gitlink


def _store_env(store: Path, root: Path, index: Path) -> dict[str, str]:
    return {
        "GIT_DIR": str(store),
        "GIT_WORK_TREE": str(root),
        "GIT_INDEX_FILE": str(index),
        "GIT_OBJECT_DIRECTORY": str(store / "objects"),
        # Objects of the user's repository are read through the store's alternates file.
        "GIT_OPTIONAL_LOCKS": "0",
    }


def _seed_index(store: Path, repo_index: Path | None, target: Path) -> str:
    """The last snapshot's index, else the repository's: unchanged files keep their stat data
    and are not hashed again. copy2 keeps the mtime that git's racy-clean check relies on.
    Returns where the seed came from: "store", "repository" or "" (none)."""
    for name, source in (("store", store / "index"), ("repository", repo_index)):
        if source is not None and source.is_file():
            shutil.copy2(source, target)
            return name
    return ""


def _excludes(repository: _Repository | None) -> Path | None:
    return repository.objects.parent / "info" / "exclude" if repository else None


def _copy_excludes(store: Path, source: Path | None) -> None:
    """The repository's own `info/exclude` counts like its `.gitignore` files."""
    if source is None:
        return
    target = store / "info" / "exclude"
    with contextlib.suppress(OSError):
        if source.is_file() and source.read_bytes() != (
            target.read_bytes() if target.exists() else b""
        ):
            target.parent.mkdir(exist_ok=True)
            shutil.copyfile(source, target)


# taking a snapshot -----------------------------------------------------------------------------
def take(cwd: str | Path) -> Snapshot:
    """Record `cwd` as a tree in its private store. Raises SnapshotError."""
    started = time.monotonic()
    given = os.fspath(cwd)
    unchanged = _Seen.unchanged_since_watched(given)
    if unchanged is not None:
        name, tree, root, branch = unchanged
        return Snapshot(name, tree, root, branch, time.monotonic() - started, git_ran=False)
    try:
        identity = _identity(given)
        cwd = Path(cwd).resolve()
        dot_git = _dot_git_above(cwd)
        repository = _repository(cwd, dot_git)
        root = repository.top if repository else cwd
        branch = _branch(repository) if repository else ""
        if not root.is_dir():  # an agent may remove its own folder
            raise SnapshotError(f"the working directory {root} no longer exists")
        name = store_name(root)
        store = store_path(name)
        excludes = _excludes(repository)
        where = _Where(given, identity, str(cwd), dot_git, repository, name, excludes)
        seen = _Seen(store, root, excludes, where)
        alternates = repository.objects if repository else None
        ensure = functools.partial(_ensure_store, store, alternates)
        tree = seen.unchanged_tree() or seen.changed_in_place(ensure)
        if tree is None:
            _ensure_store(store, alternates)
            _copy_excludes(store, excludes)
            tree, model = _write_tree(store, root, repository.index if repository else None)
            seen.remember(tree, model=model)
    except GitError as exc:
        raise SnapshotError(str(exc)) from exc
    except OSError as exc:
        raise SnapshotError(f"the snapshot store could not be written: {exc}") from exc
    return Snapshot(name, tree, str(root), branch, time.monotonic() - started, seen.git_ran)


def _identity(path: str) -> tuple:
    """The folder `path` names now (symbolic links followed): its device and inode."""
    try:
        stat = os.stat(path)
    except OSError:
        return ()
    return (stat.st_dev, stat.st_ino)


def _write_tree(store: Path, root: Path, repo_index: Path | None) -> tuple[str, object]:
    """The tree of `root`, and its model (_Last.model)."""
    fd, index_name = tempfile.mkstemp(prefix="index-", dir=store)
    os.close(fd)
    index = Path(index_name)
    try:
        index.unlink()  # git wants to create the index itself (an empty file is corrupt)
        seeded = _seed_index(store, repo_index, index)
        try:
            tree, model = _add_all(store, root, index, seeded=seeded)
        except GitError as exc:
            if not seeded or isinstance(exc, GitTimeout):
                raise
            # A seed git cannot use here (e.g. a split index, a newer format, a corrupt last
            # index): hash everything once, from an empty index.
            index.unlink(missing_ok=True)
            tree, model = _add_all(store, root, index, seeded="")
        os.replace(index, store / "index")  # the next snapshot starts from here
        return tree, model
    finally:
        with contextlib.suppress(FileNotFoundError):
            index.unlink()


def _add_all(store: Path, root: Path, index: Path, *, seeded: str) -> tuple[str, object]:
    env = _store_env(store, root, index)
    if seeded == "repository":
        # Entries the repository's index left "racily clean" (changed in the second it was
        # written) would be hashed again at every snapshot: refresh them once.
        git("update-index", "-q", "--refresh", cwd=root, env=env, check=False)
    if seeded == "repository" or (seeded == "store" and not (store / NESTED_CHECKED).exists()):
        _enter_gitlinks(root, env)  # submodules; nested repositories an older Malamar recorded
    # Bounded: a huge folder that is no repository (a home directory) must not hold up the run.
    left_out = add_all(root, env=env, timeout=ADD_TIMEOUT_SECONDS)
    if left_out:  # a file git could not read: the snapshot goes on without it
        log.warning("A snapshot left files out: %s", left_out, extra={"root": str(root)})
    model = _trees_of_index(store, index)
    tree = model.root.hex() if model else git_text("write-tree", cwd=root, env=env)
    if seeded == "store" and not (store / NESTED_CHECKED).exists():
        (store / NESTED_CHECKED).touch()
    if left_out or (model and _has_attributes(model)):
        return tree, NO_MODEL  # the next changes go to git
    return tree, model


def _has_attributes(model: "gitobjects.TreeModel") -> bool:
    """An attributes file in the tree: git may filter what it hashes (end of lines, LFS)."""
    return any(b".gitattributes" in entries for entries in model.folders.values())


INDEX_READ_BYTES = 256 * 1024  # a larger index (thousands of files) is git's to write out


def _trees_of_index(store: Path, index: Path) -> "gitobjects.TreeModel | None":
    """What `git write-tree` does, without starting it: the index's trees worked out and
    written here (runner.gitobjects), for the index of a small folder read exactly; None: git's
    turn."""
    try:
        if index.stat().st_size > INDEX_READ_BYTES:
            return None
        model, trees = gitobjects.TreeModel.from_files(gitobjects.read_index(index))
        objects = store / "objects"
        for object_id, data in trees:
            gitobjects.write_object(objects, data, object_id)
    except (OSError, ValueError, gitobjects.Unsupported):
        return None
    return model


def _enter_gitlinks(root: Path, env: dict[str, str]) -> None:
    """Gitlinks of a seed index (the repository's submodules; an older snapshot's nested
    repositories) are recorded as their files from now on."""
    nested = [path for path in gitlinks(root, env=env) if (root / path / ".git").exists()]
    if nested:
        enter_nested(root, nested, env=env)


# "nothing changed": the stat data of a small folder -------------------------------------------
def _timestamp_margin_ns() -> int:
    """How far a file's timestamp may lag the clock: two ticks of the coarse clock the kernel
    stamps files with (CLOCK_REALTIME_COARSE is 5 on Linux); 20 ms when unknown."""
    try:
        return max(int(time.clock_getres(5) * 2e9), 1_000_000)
    except (OSError, AttributeError):
        return 20_000_000


TIMESTAMP_MARGIN_NS = _timestamp_margin_ns()
COARSE_MARGIN_NS = 2_500_000_000  # a file system that keeps whole seconds (FAT: two)
now_ns = time.time_ns  # the clock file timestamps are compared with (tests move it on)


TOO_BIG = "too big"
EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"  # git knows it without storing it


@dataclass(frozen=True)
class Fingerprint:
    """The stat data of a folder and of every entry under it (`.git` left out, ignored files
    included), walked without following links; or TOO_BIG past FINGERPRINT_ENTRIES entries.
    `trusted`: it can prove "unchanged" next time. Not when an entry changed so recently that
    a change after this walk could leave its timestamps as they are (git calls those entries
    racy: `racy` lists them, and a next snapshot reads them again), nor when a folder could not
    be read (`complete`: the walk saw every entry), nor on a file system that keeps whole
    seconds (`whole_seconds`) for an entry changed in the last seconds."""

    entries: list | str
    trusted: bool
    complete: bool = True
    racy: frozenset = frozenset()
    whole_seconds: bool = False
    nested_git: bool = False  # a `.git` below the top: a repository nested in the folder

    @property
    def empty(self) -> bool:
        return self.complete and isinstance(self.entries, list) and len(self.entries) == 1


def fingerprint(
    root: Path, started_ns: int, watch: folderwatch.FolderWatch | None = None
) -> Fingerprint:
    """`watch`: armed as the walk goes, each folder before it is listed."""
    fresh = started_ns - TIMESTAMP_MARGIN_NS  # a timestamp from here on is racy
    stat = os.lstat(root)
    entries: list = [("", stat.st_mode, stat.st_ino, stat.st_mtime_ns, stat.st_ctime_ns)]
    newest = max(stat.st_mtime_ns, stat.st_ctime_ns)
    racy = {""} if newest >= fresh else set()
    # Change times nobody can set: all in whole seconds is a file system that keeps no more.
    whole_seconds = stat.st_ctime_ns % 1_000_000_000 == 0
    folders, nested_git = [("", stat.st_dev)], False
    while folders:
        folder, device = folders.pop()
        if watch is not None:
            watch.add(os.path.join(root, folder), device)
        try:
            with os.scandir(os.path.join(root, folder)) as listing:
                found = sorted(listing, key=lambda entry: entry.name)
        except OSError:
            return Fingerprint(entries, trusted=False, complete=False)
        for entry in found:
            if entry.name == ".git":
                nested_git = nested_git or folder != ""
                continue
            if len(entries) >= FINGERPRINT_ENTRIES:
                return Fingerprint(TOO_BIG, trusted=False, complete=False)
            try:
                stat = entry.stat(follow_symlinks=False)
            except OSError:
                return Fingerprint(entries, trusted=False, complete=False)
            path = f"{folder}/{entry.name}" if folder else entry.name
            mtime, ctime = stat.st_mtime_ns, stat.st_ctime_ns
            entries.append((path, stat.st_mode, stat.st_ino, stat.st_size, mtime, ctime))
            if mtime >= fresh or ctime >= fresh:
                racy.add(path)
            newest = max(newest, mtime, ctime)
            whole_seconds = whole_seconds and ctime % 1_000_000_000 == 0
            if entry.is_dir(follow_symlinks=False):
                folders.append((path, stat.st_dev))
    coarse = whole_seconds and newest >= started_ns - COARSE_MARGIN_NS
    return Fingerprint(
        entries,
        trusted=not (racy or coarse),
        racy=frozenset(racy),
        whole_seconds=whole_seconds,
        nested_git=nested_git,
    )


NO_MODEL = "no model"  # the last tree is not known file by file: changes go to git
EMPTY_MODEL = gitobjects.TreeModel({b"": {}}, bytes.fromhex(EMPTY_TREE))


@dataclass
class _Last:
    root: Path
    seen: Fingerprint
    tree: str
    store_index: tuple  # the store index's stat data after that snapshot
    excludes: tuple
    at: float
    # The tree file by file (runner.gitobjects.TreeModel), from the index of the snapshot
    # before or from the changes written here; NO_MODEL or None: the next changes go to git
    # (git left a file out, the tree has attributes, the index is not read here).
    model: object = None
    # The folder's watch, armed as `seen` was walked (its `generation`): while it saw no change
    # since, the folder is as `tree` says (`_Seen.unchanged_since_watched`, with `where`).
    watch: folderwatch.FolderWatch | None = None
    generation: int = 0
    where: "_Where | None" = None


@dataclass(frozen=True)
class _Where:
    """How a snapshot found its folder: the path it was given, the folder that path named
    (_identity), resolved, the `.git` above it (_dot_git_above), its repository, its store."""

    given: str
    identity: tuple
    resolved: str
    dot_git: tuple
    repository: _Repository | None
    name: str
    excludes: Path | None  # (_excludes)


def _stat_key(path: str | Path | None) -> tuple:
    if path is None:
        return ()
    if not os.access(path, os.F_OK):  # (most often: no exception made)
        return ("missing",)
    try:
        stat = os.stat(path)
    except OSError:
        return ("missing",)
    return (stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns)


def _xdg_git_file(name: str) -> str:
    """A file git reads whatever its config says (core.excludesFile, core.attributesFile)."""
    home = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return os.path.join(home, "git", name)


def _user_ignore() -> tuple:
    return _stat_key(_xdg_git_file("ignore"))


SYSTEM_ATTRIBUTES = Path("/etc/gitattributes")
UNREAD_HERE = (".gitignore", ".gitattributes")  # a change to one goes to git


def _attributes_apply(store: Path) -> bool:
    """Whether git may filter what it hashes (attributes files: end of lines, LFS...)."""
    files = (_xdg_git_file("attributes"), SYSTEM_ATTRIBUTES, store / "info" / "attributes")
    return any(os.path.lexists(path) for path in files)


class _Seen:
    """One snapshot's look at its folder: the fingerprint taken before git reads the folder,
    compared with the one remembered from the folder's last snapshot in this process."""

    _last: "OrderedDict[Path, _Last]" = OrderedDict()
    _watches: "OrderedDict[Path, folderwatch.FolderWatch]" = OrderedDict()  # by store
    _watched: dict[str, Path] = {}  # the store of each path given with a watch (`where`)
    _lock = threading.Lock()

    def __init__(self, store: Path, root: Path, excludes: Path | None, where: _Where | None = None):
        self.store, self.root, self.excludes_path, self.where = store, root, excludes, where
        self.user_ignore = _user_ignore()  # ("missing",): none
        self.excludes = (_stat_key(excludes), self.user_ignore)
        self.git_ran = True
        with self._lock:
            self.last = self._last.get(store)
        last = self.last
        recently_big = last and last.seen.entries == TOO_BIG
        self.walked = not (recently_big and time.monotonic() - last.at < BIG_FOLDER_SECONDS)
        # A folder found too big not long ago is not worth walking again so soon.
        skipped = Fingerprint(TOO_BIG, trusted=False, complete=False)
        # A folder is watched from its second walk on (while it is remembered: not when more
        # folders than that take turns, each watch then made and closed for nothing), unless
        # it was too big to walk whole.
        watched = self.walked and where is not None and last is not None and not recently_big
        self.watch = self._watch_of(store) if watched else None
        self.generation = self.watch.renew() if self.watch is not None else 0
        self.seen = fingerprint(root, now_ns(), self.watch) if self.walked else skipped
        if self.watch is not None and not self.seen.complete:
            self.watch.give_up()  # (too big, or a folder it could not read)

    @classmethod
    def unchanged_since_watched(cls, given: str) -> tuple | None:
        """(store name, tree, root, branch) of the last snapshot of the folder `given` names,
        when its watch saw no change since and the rest of what a snapshot depends on is as
        then: the same folder, the same `.git` above it, ignore rules and store index. None:
        a snapshot must look."""
        with cls._lock:
            store = cls._watched.get(given)
            last = cls._last.get(store) if store is not None else None
        if last is None or last.watch is None or last.where.given != given:
            return None
        where = last.where
        if (
            last.watch.changed(last.generation)
            or _identity(given) != where.identity
            or _dot_git_above(where.resolved) != where.dot_git
            or last.excludes != (_stat_key(where.excludes), _user_ignore())
            or last.store_index != _stat_key(os.path.join(store, "index"))
        ):
            return None
        branch = _branch(where.repository) if where.repository else ""
        with cls._lock:  # (a watch that answers is in use: the last to be let go)
            if store in cls._watches:
                cls._watches.move_to_end(store)
        return where.name, last.tree, str(last.root), branch

    def _same_folder(self) -> bool:
        """The last snapshot is of this folder, with these ignore rules, and the store's index
        is still the one it left (nobody else wrote a snapshot of it since)."""
        last = self.last
        return (
            last is not None
            and last.root == self.root
            and last.excludes == self.excludes
            and last.store_index == _stat_key(self.store / "index")
        )

    def unchanged_tree(self) -> str | None:
        """The tree without asking git: the empty tree of an empty folder, or the last
        snapshot's tree when nothing in the folder changed since (the store's index is still
        the one that snapshot left, so its tree is still there)."""
        if self.seen.empty:  # (remembered: what comes in it next may need no git)
            self.git_ran = False
            self.remember(EMPTY_TREE, model=EMPTY_MODEL)
            return EMPTY_TREE
        if not (self.seen.trusted and self._same_folder() and self.last.seen == self.seen):
            return None
        self.git_ran = False
        if self.watch is not None:  # (the watch armed by this walk vouches for it from now on)
            self.remember(self.last.tree, model=self.last.model)
        return self.last.tree

    def changed_in_place(self, ensure_store: Callable[[], None]) -> str | None:
        """The tree without starting git when what changed is files only, none that git reads
        as rules (ignore, attributes): files the last tree records changed in place (stat data
        that differs, or racy last time); and, where no ignore rule applies at all (a task's
        temp folder), files made or removed. Their contents are hashed here and the trees
        above them worked out (runner.gitobjects); None: git's turn."""
        last, seen = self.last, self.seen
        if not (self._same_folder() and _comparable(last.seen) and _comparable(seen)):
            return None
        changes = _changes(last.seen, seen)
        if changes is None or _attributes_apply(self.store):
            return None
        changed, added, removed = changes
        if (added or removed) and not self._nothing_ignored():
            return None
        model = last.model  # (None, NO_MODEL: not known file by file)
        if not isinstance(model, gitobjects.TreeModel):
            return None
        try:
            tree = self._write_changes(model, changed, added, removed, ensure_store)
        except (OSError, gitobjects.Unsupported):
            return None
        except Exception:  # a fault here must cost a git run, not the snapshot
            log.exception(
                "A snapshot without git failed; git takes it", extra={"root": str(self.root)}
            )
            return None
        self.git_ran = False
        return tree

    def _nothing_ignored(self) -> bool:
        """`git add -A` would add every file made here: no ignore file in the folder, none of
        the user's, no rule in the store's own exclude file, no nested repository."""
        if self.seen.nested_git or self.user_ignore != ("missing",):
            return False
        if any(os.path.basename(entry[0]) == ".gitignore" for entry in self.seen.entries):
            return False
        return _no_rules(self.store / "info" / "exclude") and _no_rules(self.excludes_path)

    def _write_changes(
        self,
        model: "gitobjects.TreeModel",
        changed: list,
        added: list,
        gone: list,
        ensure_store: Callable[[], None],
    ) -> str:
        files, blobs = {}, []

        def hashed(path: str, st_mode: int) -> None:
            object_id, data = gitobjects.blob_of(self.root / path)
            files[os.fsencode(path)] = (gitobjects.file_mode(st_mode), object_id)
            blobs.append((object_id, data))

        for path, st_mode in changed:
            mode = model.mode(os.fsencode(path))
            if mode is None or stat.S_ISDIR(st_mode):
                continue  # a folder (its entries say what changed), or ignored
            if mode not in gitobjects.FILE_MODES or not stat.S_ISREG(st_mode):
                raise gitobjects.Unsupported("a link or a nested repository")
            hashed(path, st_mode)
        for path, st_mode in added:
            if stat.S_ISDIR(st_mode):
                continue  # (git records no empty folder)
            if not (stat.S_ISREG(st_mode) and _plain_path(path)):
                raise gitobjects.Unsupported("a new link, or a name git may refuse")
            hashed(path, st_mode)
        for path in gone:
            if model.mode(os.fsencode(path)) is not None:
                files[os.fsencode(path)] = None
        if not files:
            self.remember(self.last.tree, model=model)
            return self.last.tree
        updated, trees = model.updated(files)
        objects = self.store / "objects"
        if not objects.is_dir():
            ensure_store()  # (the first files of a folder: its store is made now)
        for object_id, data in (*blobs, *trees):
            gitobjects.write_object(objects, data, object_id)
        tree = updated.root.hex()
        self.remember(tree, model=updated)
        return tree

    @classmethod
    def forget(cls, store: Path) -> None:
        with cls._lock:
            cls._last.pop(store, None)
            watch = cls._watches.pop(store, None)
        if watch is not None:
            watch.close()

    @classmethod
    def forget_all(cls) -> None:
        with cls._lock:
            watches = list(cls._watches.values())
            cls._last.clear()
            cls._watches.clear()
            cls._watched.clear()
        for watch in watches:
            watch.close()

    @classmethod
    def _watch_of(cls, store: Path) -> folderwatch.FolderWatch:
        """The folder's watch, kept from its last walk if it is still usable, else a new one;
        the watches of all but the WATCHED_FOLDERS folders used last let go."""
        with cls._lock:
            watch = cls._watches.get(store)
            if watch is None or not watch.usable:
                watch = cls._watches[store] = folderwatch.FolderWatch()
            cls._watches.move_to_end(store)
            gone = []
            while len(cls._watches) > WATCHED_FOLDERS:
                gone.append(cls._watches.popitem(last=False)[1])
        if gone:  # (closing may wait for the kernel: not on the snapshot's way)
            threading.Thread(target=_close_all, args=(gone,), daemon=True).start()
        return watch

    def remember(self, tree: str, *, model=None) -> None:
        watch = self.watch if self.watch is not None and self.watch.usable else None
        with self._lock:
            if not (self.seen.trusted or self.seen.entries == TOO_BIG or _comparable(self.seen)):
                self._last.pop(self.store, None)  # nothing this snapshot can vouch for
                return
            at = time.monotonic() if self.walked else self.last.at
            self._last[self.store] = _Last(
                self.root,
                self.seen,
                tree,
                _stat_key(self.store / "index"),
                self.excludes,
                at,
                model,
                watch,
                self.generation,
                self.where if watch is not None else None,
            )
            self._last.move_to_end(self.store)
            while len(self._last) > FINGERPRINTS_KEPT:
                self._last.popitem(last=False)
            if watch is not None:
                if len(self._watched) > 4 * FINGERPRINTS_KEPT:
                    self._watched.clear()
                self._watched[self.where.given] = self.store


def _close_all(watches: list) -> None:
    for watch in watches:
        watch.close()


def _comparable(seen: Fingerprint) -> bool:
    """A walk another can be compared with entry by entry."""
    return seen.complete and isinstance(seen.entries, list) and not seen.whole_seconds


def _no_rules(exclude_file: Path | None) -> bool:
    """An exclude file that is missing, or holds comments only (as `git init` writes it)."""
    try:
        lines = exclude_file.read_bytes().splitlines() if exclude_file else []
    except FileNotFoundError:
        lines = []
    return all(not line.strip() or line.startswith(b"#") for line in lines)


def _changes(last: Fingerprint, now: Fingerprint) -> tuple[list, list, list] | None:
    """What changed since `last`: (path, mode) of the entries whose stat data changed (or were
    racy then), of the entries made, and the paths gone; None when a path changed kind, or an
    ignore or attributes file is among them."""
    before = {entry[0]: entry for entry in last.entries}
    changed, added = [], []
    for entry in now.entries:
        path, mode = entry[0], entry[1]
        old = before.pop(path, None)
        if old is None:
            added.append((path, mode))
        elif stat.S_IFMT(old[1]) != stat.S_IFMT(mode):
            return None
        elif old != entry or path in last.racy:
            changed.append((path, mode))
    gone = list(before)
    touched = (*(p for p, _m in changed), *(p for p, _m in added), *gone)
    if any(os.path.basename(path) in UNREAD_HERE for path in touched):
        return None
    return changed, added, gone


# A name git adds as it is, on any system: no `.git` look-alike (git refuses those whatever
# their case, and NTFS's short names), no backslash, no trailing dot or space.
_PLAIN_NAME = re.compile(r"(?!\.?git(~|$))[\w.+@=,-][\w .+@=,-]*(?<![. ])", re.IGNORECASE)


def _plain_path(path: str) -> bool:
    return all(_PLAIN_NAME.fullmatch(part) for part in path.split("/"))


# keeping and pruning ---------------------------------------------------------------------------
def prune(kept_trees: dict[str, set[str]], *, expire: str = "1.hour.ago") -> dict:
    """Housekeeping: each store keeps the trees the runs in the database refer to
    (`kept_trees`: store name → trees) under one ref, unreachable objects older than `expire`
    are pruned (younger ones may belong to a snapshot being taken), and a store no run refers
    to that nobody used since then is removed."""
    counts = {"stores_removed": 0, "stores_pruned": 0, "trees_kept": 0}
    root = snapshots_dir()
    if not root.is_dir():
        return counts
    for store in sorted(root.iterdir()):
        _Seen.forget(store)  # a tree remembered may be pruned: git writes it again if needed
        gitobjects.spares_dropped(store / "objects")  # (its own files: a store may be removed)
        try:
            _prune_store(store, kept_trees.get(store.name, set()), counts, expire)
        except GitError:
            log.warning("Could not prune a snapshot store", extra={"store": store.name})
    return counts


def _idle_since(store: Path, expire: str) -> bool:
    if expire == "now":
        return True
    index = store / "index"
    return not index.exists() or time.time() - index.stat().st_mtime > IDLE_SECONDS


def _prune_store(store: Path, trees: set[str], counts: dict, expire: str) -> None:
    if not (store / "HEAD").exists():
        return
    if not trees and _idle_since(store, expire):
        shutil.rmtree(store, ignore_errors=True)
        counts["stores_removed"] += 1
        return
    env = {"GIT_DIR": str(store)}
    kept = _existing(store, trees)
    lines = "".join(f"040000 tree {tree}\t{tree}\n" for tree in sorted(kept))
    keep = ""
    if kept:
        keep = git("mktree", cwd=store, env=env, input=lines.encode()).stdout.decode().strip()
    old = git_text("for-each-ref", "--format=%(refname)", OLD_REF_PREFIX, cwd=store, env=env)
    updates = [f"update {KEEP_REF} {keep}" if keep else f"delete {KEEP_REF}"]
    updates += [f"delete {ref}" for ref in old.splitlines() if ref]
    git("update-ref", "--stdin", cwd=store, env=env, input=("\n".join(updates) + "\n").encode())
    git("prune", f"--expire={expire}", cwd=store, env=env)
    counts["stores_pruned"] += 1
    counts["trees_kept"] += len(kept)


def _existing(store: Path, trees: set[str]) -> set[str]:
    """The trees still in the store (one lost with a store that was removed is skipped)."""
    if not trees:
        return set()
    listing = "".join(f"{tree}\n" for tree in trees).encode()
    out = git(
        "cat-file", "--batch-check=%(objectname) %(objecttype)", cwd=store,
        env={"GIT_DIR": str(store)}, input=listing,
    ).stdout.decode()  # fmt: skip
    return {line.split()[0] for line in out.splitlines() if line.endswith(" tree")}
