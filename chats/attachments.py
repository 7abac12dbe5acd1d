"""Chat attachments on disk: `{temp}/malamar_chat_{chat_id}_attachments/{name}`.

Names are reduced to a base name and files are created with mode 0600 without following
symlinks (DESIGN "Security baseline"); a name longer than a file system allows is shortened,
keeping its extension. Files are streamed to disk in chunks, so nothing here reads a whole
upload into memory (the request's size is capped by MALAMAR_MAX_UPLOAD_BYTES, core.limits).
"""

import contextlib
import logging
import os
import shutil
from collections.abc import Iterable
from pathlib import Path

from django.conf import settings
from django.db import transaction

from core.errors import ValidationFailed

log = logging.getLogger(__name__)

CHUNK_SIZE = 1024 * 1024
MAX_NAME_BYTES = 255  # the usual file-system limit for one path component
MAX_EXTENSION_CHARS = 20  # a longer "extension" is part of the name: shorten it as such


def attachments_dir(chat_id: str) -> Path:
    return Path(settings.CONFIG.temp_dir) / f"malamar_chat_{chat_id}_attachments"


def attachment_name(raw: str | None) -> str:
    """The safe base name of an uploaded file: `../../x` → `x`, `a\\b` → `b`.

    Empty names, `.` and `..` are refused rather than guessed.
    """
    name = str(raw or "").replace("\\", "/").rsplit("/", 1)[-1]
    name = "".join(ch for ch in name if ch.isprintable()).strip()
    if name in ("", ".", ".."):
        shown = f" ({raw!r})" if raw else ""
        raise ValidationFailed(
            f"An attachment needs a file name other than empty, '.' or '..'{shown}",
            field="files",
        )
    return _shortened(name)


def _utf8_len(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def _shortened(name: str) -> str:
    """`name` cut to MAX_NAME_BYTES of UTF-8, keeping its extension: "long…long.pdf"."""
    if _utf8_len(name) <= MAX_NAME_BYTES:
        return name
    stem, dot, extension = name.rpartition(".")
    if not stem or not dot or len(extension) > MAX_EXTENSION_CHARS:
        stem, extension = name, ""
    suffix = f"…{dot}{extension}" if extension else "…"
    room = MAX_NAME_BYTES - _utf8_len(suffix)
    while _utf8_len(stem) > room:  # at most a few steps: cut by bytes, then fix up by chars
        stem = stem[: max(0, len(stem) - max(1, (_utf8_len(stem) - room) // 4))]
    return stem.rstrip() + suffix


def _chunks(source) -> Iterable[bytes]:
    if hasattr(source, "chunks"):
        yield from source.chunks(CHUNK_SIZE)
        return
    while chunk := source.read(CHUNK_SIZE):
        yield chunk


def _open_folder(folder: Path) -> int:
    """Create (0700) and open the attachment folder, refusing symlinks and foreign folders."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileExistsError):
        folder.mkdir(mode=0o700)
    dir_fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    if os.fstat(dir_fd).st_uid != os.getuid():
        os.close(dir_fd)
        raise PermissionError(f"{folder} belongs to another user")
    return dir_fd


def attachment_store(chat_id: str, name: str, source) -> Path:
    """Write `source` (an UploadedFile or a binary file object) as `name`; same name overwrites.

    `name` must already be a safe base name (see `attachment_name`). Raises OSError.
    """
    folder = attachments_dir(chat_id)
    dir_fd = _open_folder(folder)
    try:
        flags = os.O_CREAT | os.O_TRUNC | os.O_WRONLY | os.O_NOFOLLOW
        fd = os.open(name, flags, 0o600, dir_fd=dir_fd)
        try:
            os.fchmod(fd, 0o600)  # an overwritten file keeps its old mode otherwise
        except OSError:
            os.close(fd)
            raise
        with os.fdopen(fd, "wb") as out:
            for chunk in _chunks(source):
                out.write(chunk)
    finally:
        os.close(dir_fd)
    return folder / name


def attachments_remove(chat_id: str) -> None:
    """Delete a chat's attachment folder (never following a symlink out of the temp dir)."""
    folder = attachments_dir(chat_id)
    try:
        if folder.is_symlink():
            folder.unlink()
        elif folder.exists():
            shutil.rmtree(folder)
    except OSError:
        log.warning("Could not delete chat attachments at %s", folder, exc_info=True)


def chat_attachment_folders_remove(*, chat_ids: list[str]) -> None:
    """After a commit that deleted chats in bulk (a workspace): remove their folders."""
    ids = list(chat_ids)

    def remove() -> None:
        for chat_id in ids:
            attachments_remove(chat_id)

    if ids:
        transaction.on_commit(remove)
