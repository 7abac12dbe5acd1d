"""Files the runner writes for agents: private (0600), in the configured temp dir."""

import contextlib
import os
from pathlib import Path

from django.conf import settings

from core.ids import new_id

OUTPUT_READ_CAP = 16 * 1024 * 1024
READ_CHUNK = 64 * 1024


_made: set[Path] = set()  # temp dirs this process created (or found) already


def temp_dir() -> Path:
    """The configured temp dir, created on first use. Not re-created on every call: a mkdir
    locks its parent, and a step asks for this path five times (write_private re-creates it
    if it was removed since)."""
    path = Path(settings.CONFIG.temp_dir)
    if path not in _made:
        path.mkdir(parents=True, exist_ok=True)
        _made.add(path)
    return path


def data_subdir(name: str) -> Path:
    """A private (0700) folder of the data directory, made on first use (mode fixed if it was
    made otherwise): the CLIs' temp folder ("tmp") and their runs' configuration files
    ("run-config"). Gemini refuses a configuration file whose folder others may write (the
    system temp folder's 1777 is refused), so run configuration never lives in the temp dir."""
    path = Path(settings.DATA_DIR) / name
    if path not in _made:
        private_dir(path).chmod(0o700)
        _made.add(path)
    return path


def write_private(path: Path, text: str) -> Path:
    """Write `text` to `path` readable by this user only (never through a symlink). Written
    over the old content and then cut to length, not opened with O_TRUNC: on ext4 a file
    truncated to zero and rewritten is flushed to disk at close (auto_da_alloc), which cost
    each agent step 1.5-4 ms (p95 16-30 ms) on a busy machine; this costs ~0.01 ms."""
    data = text.encode("utf-8")
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW
    try:
        fd = os.open(path, flags, 0o600)
    except FileNotFoundError:  # its folder was removed (e.g. a temp cleaner): make it again
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, flags, 0o600)
    try:
        os.fchmod(fd, 0o600)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.ftruncate(fd, len(data))
    finally:
        os.close(fd)
    return path


def private_dir(path: Path) -> Path:
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    return path


def task_input_path(task_id: str) -> Path:
    return temp_dir() / f"malamar_task_{task_id}.md"


def fresh_output_path(prefix: str = "malamar_output") -> Path:
    """A new name each run, so a failed run can never leave a stale answer behind."""
    return temp_dir() / f"{prefix}_{new_id()}.json"


def schema_path(kind: str, schema_text: str) -> Path:
    """Codex reads the schema from a file; one per kind, rewritten when it changes."""
    path = temp_dir() / f"malamar_schema_{kind}_{os.getuid()}.json"
    with contextlib.suppress(OSError):
        if path.read_text(encoding="utf-8") == schema_text:
            return path
    return write_private(path, schema_text)


def read_output(path: Path) -> str | None:
    """The output file's text (None if missing); capped so a runaway agent can't exhaust memory.
    Read in reads sized by the file (a read sized by the cap allocates the cap: ~0.1 ms)."""
    try:
        with open(path, "rb", buffering=0) as f:
            chunks, total = [], 0
            wanted = min(os.fstat(f.fileno()).st_size, OUTPUT_READ_CAP) + 1  # (+1: the end)
            while chunk := f.read(wanted):
                chunks.append(chunk)
                total += len(chunk)
                if total > OUTPUT_READ_CAP:
                    raise ValueError(
                        f"output file is larger than {OUTPUT_READ_CAP // (1024 * 1024)} MB"
                    )
                wanted = READ_CHUNK  # (it grew since: the rest)
    except FileNotFoundError:
        return None
    except IsADirectoryError:
        return None
    return b"".join(chunks).decode("utf-8", errors="replace")


def remove_quietly(path: Path) -> None:
    with contextlib.suppress(OSError):
        path.unlink()


def working_directory(workspace, temp_folder: str) -> tuple[Path | None, str]:
    """(path, problem): the workspace's static directory (which must exist), or in temp mode
    `{temp}/{temp_folder}` (created on first use, then reused)."""
    if workspace.working_directory_mode == "static":
        path = Path(workspace.working_directory_path or "").expanduser()
        if not workspace.working_directory_path or not path.is_dir():
            return None, (
                f"Working directory {workspace.working_directory_path or '(not set)'} does not "
                "exist. Create it or change the workspace settings."
            )
        return path, ""
    return private_dir(temp_dir() / temp_folder), ""
