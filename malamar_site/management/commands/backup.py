import shutil
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError
from django.db import connection

from chats.attachments import attachments_dir
from chats.models import Chat
from core.backup import BackupError, sqlite_backup

DATABASE_FILE = "malamar.db"
ATTACHMENTS_FOLDER = "attachments"


class Command(BaseCommand):
    help = (
        "Copy the database (consistent, while Malamar runs) and the chats' attachment files into "
        "DEST, a new or empty folder. Restore: stop Malamar, put DEST/malamar.db in the data "
        "directory and the folders of DEST/attachments in the temp folder."
    )
    requires_system_checks = []

    def add_arguments(self, parser):
        parser.add_argument("dest", help="a new or empty folder")

    def handle(self, *args, dest, **options):
        if connection.vendor != "sqlite":
            raise CommandError(
                "malamar backup copies the SQLite database. With PostgreSQL, back up with "
                'pg_dump (e.g. pg_dump "$DATABASE_URL" > malamar.sql) and copy the attachment '
                "files of the temp folder (malamar_chat_*_attachments)."
            )
        folder = Path(dest).expanduser().resolve()
        if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
            raise CommandError(f"{folder} is not a new or empty folder")
        folder.mkdir(parents=True, exist_ok=True)
        connection.ensure_connection()
        try:
            sqlite_backup(connection.connection, folder / DATABASE_FILE)
        except (BackupError, OSError) as exc:
            raise CommandError(f"Backup failed: {exc}") from exc
        copied = self._attachments(folder / ATTACHMENTS_FOLDER)
        self.stdout.write(
            f"Backed up the database to {folder / DATABASE_FILE}"
            f" and the attachments of {copied} chat{'s' if copied != 1 else ''}"
            f" to {folder / ATTACHMENTS_FOLDER}"
        )

    def _attachments(self, target: Path) -> int:
        target.mkdir()
        copied = 0
        for chat_id in Chat.objects.values_list("id", flat=True).iterator():
            source = attachments_dir(chat_id)
            if source.is_dir() and not source.is_symlink():
                shutil.copytree(source, target / source.name, symlinks=True)
                copied += 1
        return copied
