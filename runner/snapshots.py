"""Snapshots of a run's working directory as git trees (DESIGN "Git snapshots").

A snapshot records every file of the working directory (tracked and untracked, `.gitignore`
honoured, `.git` excluded) as a tree in a private object store under the data directory, one
per working directory: `<data>/snapshots/<hash of the path>/`. The user's repository is never
written: git runs with GIT_DIR pointing at the private store, whose `objects/info/alternates`
names the repository's own objects (so unchanged blobs are not copied), and with a temporary
index seeded from the previous snapshot's index, or the repository's own index the first
time, so unchanged files are not hashed again. A ref per run and side
(`refs/malamar/runs/<run id>/before|after`) keeps its trees from being pruned.
"""

import contextlib
import hashlib
import logging
import os
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings

from runner.git import GitError, GitTimeout, git, git_text

log = logging.getLogger(__name__)

REF_PREFIX = "refs/malamar/runs/"
EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbad4904"
IDLE_SECONDS = 3600  # a store unused this long, without refs, is removed
ADD_TIMEOUT_SECONDS = 60
_creating = threading.Lock()  # two first snapshots of one folder (parallel chats) at once


@dataclass(frozen=True)
class Snapshot:
    store: str  # the private store's folder name under <data>/snapshots
    tree: str
    root: str  # the folder the tree describes (a repository's top level, or the run's folder)
    branch: str  # the repository's current branch ("" when none)
    seconds: float


class SnapshotError(Exception):
    """A snapshot could not be taken; `str()` says why, in words a user can read."""


def snapshots_dir() -> Path:
    return Path(settings.DATA_DIR) / "snapshots"


def store_name(root: str | Path) -> str:
    return hashlib.sha256(str(root).encode()).hexdigest()[:24]


def store_path(name: str) -> Path:
    return snapshots_dir() / name


def _repository(cwd: Path) -> tuple[Path, Path, Path, str] | None:
    """(top level, objects dir, index, branch) of the repository `cwd` is in, or None."""
    done = git(
        "rev-parse",
        "--is-inside-work-tree",
        "--show-toplevel",
        "--git-path",
        "objects",
        "--git-path",
        "index",
        "--abbrev-ref",
        "HEAD",
        cwd=cwd,
        check=False,
    )
    lines = done.stdout.decode("utf-8", "replace").splitlines()
    if len(lines) < 4 or lines[0] != "true":
        return None  # not a repository (or a bare one, or HEAD unborn: no branch line)
    top = Path(lines[1])
    branch = lines[4] if len(lines) > 4 and lines[4] != "HEAD" else ""
    return top, (cwd / lines[2]).resolve(), (cwd / lines[3]).resolve(), branch


def _unborn_branch(cwd: Path) -> str:
    done = git("symbolic-ref", "--short", "-q", "HEAD", cwd=cwd, check=False)
    return done.stdout.decode("utf-8", "replace").strip()


def _ensure_store(path: Path, alternates: Path | None) -> None:
    with _creating:
        if not (path / "HEAD").exists():
            _create_store(path)
    info = path / "objects" / "info" / "alternates"
    wanted = f"{alternates}\n" if alternates else ""
    current = info.read_text() if info.exists() else ""
    if current != wanted:
        info.write_text(wanted)


def _create_store(path: Path) -> None:
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    git("init", "-q", "--bare", str(path), cwd=path.parent)
    env = {"GIT_DIR": str(path)}
    git("config", "gc.auto", "0", cwd=path, env=env)  # the cleanup job prunes, nothing else
    git("config", "core.bare", "false", cwd=path, env=env)  # it describes a work tree
    # Directories whose mtime did not change are not read again for untracked files.
    git("config", "core.untrackedCache", "true", cwd=path, env=env)


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


def _copy_excludes(store: Path, git_dir_objects: Path | None) -> None:
    """The repository's own `info/exclude` counts like its `.gitignore` files."""
    if git_dir_objects is None:
        return
    source = git_dir_objects.parent / "info" / "exclude"
    target = store / "info" / "exclude"
    with contextlib.suppress(OSError):
        if source.is_file() and source.read_bytes() != (
            target.read_bytes() if target.exists() else b""
        ):
            target.parent.mkdir(exist_ok=True)
            shutil.copyfile(source, target)


def take(cwd: str | Path) -> Snapshot:
    """Record `cwd` as a tree in its private store. Raises SnapshotError."""
    started = time.monotonic()
    cwd = Path(cwd).resolve()
    try:
        repo = _repository(cwd)
        if repo is None:
            root, objects, repo_index, branch = cwd, None, None, ""
        else:
            root, objects, repo_index, branch = repo
            branch = branch or _unborn_branch(cwd)
        name = store_name(root)
        store = store_path(name)
        _ensure_store(store, objects)
        _copy_excludes(store, objects)
        tree = _write_tree(store, root, repo_index)
    except GitError as exc:
        raise SnapshotError(str(exc)) from exc
    except OSError as exc:
        raise SnapshotError(f"the snapshot store could not be written: {exc}") from exc
    return Snapshot(name, tree, str(root), branch, time.monotonic() - started)


def _write_tree(store: Path, root: Path, repo_index: Path | None) -> str:
    fd, index_name = tempfile.mkstemp(prefix="index-", dir=store)
    os.close(fd)
    index = Path(index_name)
    try:
        index.unlink()  # git wants to create the index itself (an empty file is corrupt)
        seeded = _seed_index(store, repo_index, index)
        try:
            tree = _add_all(store, root, index, refresh=seeded == "repository")
        except GitError as exc:
            if not seeded or isinstance(exc, GitTimeout):
                raise
            # A seed git cannot use here (e.g. a split index, a newer format, a corrupt last
            # index): hash everything once, from an empty index.
            index.unlink(missing_ok=True)
            tree = _add_all(store, root, index, refresh=False)
        os.replace(index, store / "index")  # the next snapshot starts from here
        return tree
    finally:
        with contextlib.suppress(FileNotFoundError):
            index.unlink()


def _add_all(store: Path, root: Path, index: Path, *, refresh: bool) -> str:
    env = _store_env(store, root, index)
    if refresh:
        # Entries the repository's index left "racily clean" (changed in the second it was
        # written) would be hashed again at every snapshot: refresh them once.
        git("update-index", "-q", "--refresh", cwd=root, env=env, check=False)
    # Bounded: a huge folder that is no repository (a home directory) must not hold up the run.
    git("add", "-A", "--ignore-errors", ".", cwd=root, env=env, timeout=ADD_TIMEOUT_SECONDS)
    return git_text("write-tree", cwd=root, env=env)


def keep(snapshot: Snapshot, run_id: str, side: str) -> None:
    """A ref per run and side, so pruning the store keeps this tree."""
    store = store_path(snapshot.store)
    ref = f"{REF_PREFIX}{run_id}/{side}"
    git("update-ref", ref, snapshot.tree, cwd=store, env={"GIT_DIR": str(store)})


def forget_runs(runs: list[tuple[str, str]]) -> None:
    """Drop the refs of these (store, run id) pairs; their objects go at the next prune."""
    by_store: dict[str, list[str]] = {}
    for store, run_id in runs:
        if store:
            by_store.setdefault(store, []).append(run_id)
    for name, run_ids in by_store.items():
        store = store_path(name)
        if not store.is_dir():
            continue
        lines = "".join(
            f"delete {REF_PREFIX}{run_id}/{side}\n"
            for run_id in run_ids
            for side in ("before", "after")
        )
        try:
            git(
                "update-ref",
                "--stdin",
                cwd=store,
                env={"GIT_DIR": str(store)},
                input=lines.encode(),
            )
        except GitError:
            log.warning("Could not drop snapshot refs", extra={"store": name})


def _store_run_ids(store: Path) -> set[str]:
    refs = git_text(
        "for-each-ref", "--format=%(refname)", REF_PREFIX, cwd=store, env={"GIT_DIR": str(store)}
    )
    return {ref[len(REF_PREFIX) :].split("/")[0] for ref in refs.splitlines() if ref}


def prune(known_run_ids, *, expire: str = "1.hour.ago") -> dict:
    """Housekeeping: refs of runs that no longer exist go, unreachable objects older than
    `expire` are pruned (younger ones may belong to a snapshot being taken), and a store without
    refs that nobody used since then is removed. `known_run_ids`: the runs that still exist."""
    counts = {"stores_removed": 0, "refs_removed": 0, "stores_pruned": 0}
    root = snapshots_dir()
    if not root.is_dir():
        return counts
    for store in sorted(root.iterdir()):
        try:
            counts = _prune_store(store, known_run_ids, counts, expire)
        except GitError:
            log.warning("Could not prune a snapshot store", extra={"store": store.name})
    return counts


def _idle_since(store: Path, expire: str) -> bool:
    if expire == "now":
        return True
    index = store / "index"
    return not index.exists() or time.time() - index.stat().st_mtime > IDLE_SECONDS


def _prune_store(store: Path, known_run_ids, counts: dict, expire: str) -> dict:
    if not (store / "HEAD").exists():
        return counts
    run_ids = _store_run_ids(store)
    gone = [run_id for run_id in run_ids if run_id not in known_run_ids]
    if gone:
        forget_runs([(store.name, run_id) for run_id in gone])
        counts["refs_removed"] += len(gone)
    if len(gone) == len(run_ids) and _idle_since(store, expire):
        shutil.rmtree(store, ignore_errors=True)
        counts["stores_removed"] += 1
        return counts
    git("prune", f"--expire={expire}", cwd=store, env={"GIT_DIR": str(store)})
    counts["stores_pruned"] += 1
    return counts
