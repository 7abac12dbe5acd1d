import subprocess
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

try:
    VERSION = version("malamar")
except PackageNotFoundError:  # running from a checkout that was never installed
    VERSION = "0.0.0+unknown"


def git_revision() -> str | None:
    """The checkout's commit, when running from a git clone (not from an installed wheel)."""
    root = Path(__file__).resolve().parent.parent
    if not (root / ".git").exists():
        return None
    try:
        result = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return result.stdout.strip() or None


def version_text() -> str:
    revision = git_revision()
    return f"malamar {VERSION}" + (f" (git {revision})" if revision else "")
