"""Hostile files in a working directory (names that are not UTF-8 or hold newlines, quotes and
leading dashes; binary files; symlinks out of the folder; one enormous line): snapshots and the
Changes tab, file pages and API stay bounded and never answer a 500."""

import os
import tracemalloc

import pytest
from django.conf import settings
from django.test import Client
from django.utils import timezone

from runner import diffs, snapshots
from runner.models import AgentRun
from tasks.services import task_create
from tests.htmltree import parse
from workspaces.services import workspace_create

pytestmark = pytest.mark.django_db

HUGE_LINE_BYTES = 30 * 1024 * 1024
PAGE_BYTES_MAX = 3 * 1024 * 1024  # a tab or file page, whatever the working directory holds
ODD_NAMES = [
    "new\nline.txt",
    'say "hi" \\ there.txt',
    "-rf.txt",
    "--output=x.txt",
    "tab\there.txt",
]


@pytest.fixture(autouse=True)
def data_dir(monkeypatch, tmp_path):
    monkeypatch.setattr(settings, "DATA_DIR", str(tmp_path / "data"))


@pytest.fixture
def changed(tmp_path):
    """A task whose one run made every kind of hostile file."""
    root = tmp_path / "work"
    root.mkdir()
    (root / "keep.txt").write_text("same\n")
    before = snapshots.take(root)
    for name in ODD_NAMES:
        (root / name).write_text(f"{name!r}\n")
    with open(os.path.join(os.fsencode(root), b"caf\xe9-latin1.txt"), "wb") as f:
        f.write(b"not utf-8 name\n")
    (root / "blob.bin").write_bytes(bytes(range(256)) * 64)
    (root / "passwd-link").symlink_to("/etc/passwd")
    (root / "up-link").symlink_to("../../outside")
    with open(root / "one-line.min.js", "wb") as f:
        for _ in range(HUGE_LINE_BYTES // (1024 * 1024)):
            f.write(b"a" * (1024 * 1024))
    after = snapshots.take(root)
    workspace = workspace_create(title="Hostile files")
    task = task_create(workspace=workspace, summary="Make odd files")
    run = AgentRun.objects.create(
        id="r" * 21,
        workspace=workspace,
        task=task,
        agent_name="Builder",
        cli_type="claude",
        status="succeeded",
        started_at=timezone.now(),
        working_directory=str(root),
        snapshot_store=before.store,
        tree_before=before.tree,
        tree_after=after.tree,
    )
    return task, run


def paths_of(client, task) -> list[str]:
    body = client.get(f"/api/tasks/{task.id}/changes")
    assert body.status_code == 200, body.content[:500]
    return [f["path"] for f in body.json()["files"]]


def bounded(response) -> bytes:
    assert response.status_code == 200, response.content[:500]
    assert len(response.content) < PAGE_BYTES_MAX
    return response.content


@pytest.mark.pg
def test_every_hostile_file_is_listed(changed):
    task, _run = changed
    paths = paths_of(Client(), task)
    assert set(ODD_NAMES) <= set(paths)
    assert {"blob.bin", "passwd-link", "up-link", "one-line.min.js"} <= set(paths)
    assert "caf\ufffd-latin1.txt" in paths  # shown with U+FFFD, as every name is UTF-8 here


@pytest.mark.pg
def test_the_tab_and_every_file_page_answer_within_bounds(changed):
    task, run = changed
    client = Client()
    for query in ("", f"?run={run.id}"):
        bounded(client.get(f"/tasks/{task.id}/changes/{query}", HTTP_HX_REQUEST="true"))
        board = client.get(
            f"/tasks/{task.id}/changes/{query}", follow=True
        )  # the popup on the board
        bounded(board)
    for path in paths_of(client, task):
        for headers in ({}, {"HTTP_HX_REQUEST": "true"}):
            page = client.get(f"/tasks/{task.id}/changes/file/", {"path": path}, **headers)
            bounded(page)
        api = client.get(f"/api/tasks/{task.id}/changes/file", {"path": path})
        assert api.status_code == 200 and len(api.json()["diff"]) <= 1_000_000, path


def test_a_symlink_shows_its_target_never_the_file_it_points_to(changed):
    task, _run = changed
    client = Client()
    diff = client.get(f"/api/tasks/{task.id}/changes/file", {"path": "passwd-link"}).json()
    assert "+/etc/passwd" in diff["diff"] and "root:" not in diff["diff"]


def test_one_enormous_line_is_never_read_whole(changed, monkeypatch):
    task, _run = changed
    client = Client()
    requests = [
        lambda: client.get(f"/tasks/{task.id}/changes/", HTTP_HX_REQUEST="true"),
        lambda: client.get(f"/tasks/{task.id}/changes/file/", {"path": "one-line.min.js"}),
        lambda: client.get(f"/api/tasks/{task.id}/changes/file", {"path": "one-line.min.js"}),
    ]
    for request in requests:  # first use: templates compiled, modules imported
        request()
    for name in ("rendered", "file_lists"):  # read from git again, not from the caches
        cache = getattr(diffs, name)
        fresh = diffs.BoundedCache(
            max_items=cache.max_items, max_weight=cache.max_weight, weight=cache.weight
        )
        monkeypatch.setattr(diffs, name, fresh)
    peaks, answers = [], []
    tracemalloc.start()
    try:
        for request in requests:
            tracemalloc.reset_peak()
            answers.append(request())
            peaks.append(tracemalloc.get_traced_memory()[1])
    finally:
        tracemalloc.stop()
    assert max(peaks) < HUGE_LINE_BYTES // 2, [f"{peak / 2**20:.1f} MB" for peak in peaks]
    _tab, page, api = answers
    note = parse(page.content.decode()).find("change-file__note")
    assert note.text.startswith("The diff is longer than this") and len(page.content) < 100_000
    assert api.json()["truncated"] is True


def test_the_caches_hold_a_bounded_amount_however_many_files_changed(tmp_path, monkeypatch):
    """A run that makes 3,000 files (think node_modules): its file list is read, but kept in
    the process's cache only within the cache's bound (it was 64 lists of any size)."""
    monkeypatch.setattr(
        diffs, "file_lists", diffs.BoundedCache(max_items=64, max_weight=1000, weight=len)
    )
    root = tmp_path / "many"
    root.mkdir()
    before = snapshots.take(root)
    for number in range(3000):
        (root / f"f{number}.js").write_text("x\n")
    after = snapshots.take(root)
    assert len(diffs.changed_files(before.store, before.tree, after.tree)) == 3000
    assert diffs.file_lists.held == 0  # too heavy to keep
    (root / "f0.js").write_text("y\n")
    small = snapshots.take(root)
    assert len(diffs.changed_files(after.store, after.tree, small.tree)) == 1
    assert diffs.file_lists.held == 1
    cache = diffs.BoundedCache(max_items=2, max_weight=10, weight=len)
    for key, value in (("a", [1] * 6), ("b", [1] * 3), ("c", [1] * 4)):
        cache.put(key, value)
    assert list(cache.items) == ["b", "c"] and cache.held == 7
