"""runner/git.py: the one module that runs git."""

import pytest

from runner.git import GitError, GitTimeout, git, git_text, is_repository


def test_is_repository_tells_a_work_tree_from_a_plain_folder(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    git("init", "-q", cwd=repo)
    (repo / "sub").mkdir()
    assert is_repository(repo) and is_repository(repo / "sub")
    assert not is_repository(tmp_path)


def test_a_failing_git_command_is_a_readable_error(tmp_path):
    with pytest.raises(GitError, match="not a git repository"):
        git_text("rev-parse", "HEAD", cwd=tmp_path)


def test_the_users_global_config_does_not_reach_git(tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    (home / ".gitconfig").write_text("[alias]\n    hi = status\n[core]\n    pager = false\n")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("GIT_DIR", str(tmp_path / "elsewhere"))
    repo = tmp_path / "repo"
    repo.mkdir()
    git("init", "-q", cwd=repo)
    assert (repo / ".git").is_dir()  # GIT_DIR from our environment was not used
    assert git("hi", cwd=repo, check=False).returncode != 0  # no user aliases


def test_a_git_command_that_takes_too_long_is_a_timeout_error(tmp_path):
    with pytest.raises(GitTimeout, match="took longer than"):
        git("hash-object", "--stdin", cwd=tmp_path, input=b"x", timeout=0.000001)
