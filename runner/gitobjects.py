"""Git objects written here, without starting git (runner.snapshots): the snapshot of a small
folder where only files changed, and the trees of an index `git add` wrote. Starting `git add`
and `git write-tree` costs ~10 ms between two agents; hashing the few files that changed and
the folders above them costs a fraction of a millisecond. Anything this module does not read
exactly as git does is Unsupported, and the snapshot is git's as before.

The tree ids are git's own: a blob is `sha1("blob <size>\\0" + content)`, a tree lists its
entries sorted by name (a folder's name as if it ended in "/"), as `<octal mode> <name>\\0` and
the 20-byte id. Objects are written loose, zlib-compressed, as git writes them.
"""

import contextlib
import hashlib
import logging
import os
import stat
import struct
import threading
import zlib
from collections import OrderedDict
from pathlib import Path

import psutil

log = logging.getLogger(__name__)

MODE_FILE, MODE_EXECUTABLE, MODE_TREE = 0o100644, 0o100755, 0o040000
FILE_MODES = (MODE_FILE, MODE_EXECUTABLE)
BLOB_MAX_BYTES = 8 * 1024 * 1024  # a larger file goes to git (it streams; this reads it whole)


class Unsupported(Exception):
    """Not read here as git would read it (git does it instead)."""


def read_index(path: Path) -> dict[bytes, tuple[int, bytes]]:
    """The files of a git index (versions 2 and 3): path → (mode, 20-byte id). Unsupported: a
    split or sparse index, a conflict's stages, skip-worktree or intent-to-add entries, a
    format this does not know, a file cut short."""
    try:
        return _read_index(path.read_bytes())
    except (struct.error, ValueError) as exc:
        raise Unsupported(f"an index this cannot read: {exc}") from exc


def _read_index(data: bytes) -> dict[bytes, tuple[int, bytes]]:
    if len(data) < 32 or data[:4] != b"DIRC":
        raise Unsupported("not an index")
    version, count = struct.unpack_from(">II", data, 4)
    if version not in (2, 3):
        raise Unsupported(f"index version {version}")
    files, at = {}, 12
    for _ in range(count):
        (mode,) = struct.unpack_from(">I", data, at + 24)
        object_id = data[at + 40 : at + 60]
        (flags,) = struct.unpack_from(">H", data, at + 60)
        header = 62
        if flags & 0x4000:  # extended flags: skip-worktree, intent-to-add
            if version < 3 or struct.unpack_from(">H", data, at + 62)[0]:
                raise Unsupported("an entry with extended flags")
            header = 64
        if flags & 0x3000:
            raise Unsupported("a conflict")
        end = data.index(b"\0", at + header)
        files[data[at + header : end]] = (mode, object_id)
        at += (header + end - (at + header) + 8) & ~7  # padded with 1 to 8 NULs
    while at + 8 <= len(data) - 20:  # extensions, then the checksum
        signature = data[at : at + 4]
        if signature in (b"link", b"sdir"):  # split index, sparse index
            raise Unsupported("a split or sparse index")
        at += 8 + struct.unpack_from(">I", data, at + 4)[0]
    return files


def file_mode(st_mode: int) -> int:
    """A regular file's mode in a tree, as git records it (core.fileMode: the owner's x bit)."""
    return MODE_EXECUTABLE if st_mode & stat.S_IXUSR else MODE_FILE


def _object(kind: bytes, body: bytes) -> tuple[bytes, bytes]:
    data = b"%s %d\0" % (kind, len(body)) + body
    return hashlib.sha1(data).digest(), data


def write_object(objects: Path, data: bytes, object_id: bytes) -> None:
    """A loose object (as git writes it: never over one that exists, read-only), into a spare
    file made ahead when the store has one (`spares_made`)."""
    hex_id = object_id.hex()
    folder = os.path.join(objects, hex_id[:2])
    path = os.path.join(folder, hex_id[2:])
    if os.path.exists(path):
        return
    compressed = zlib.compress(data, 1)
    if _spares_of(objects).write(folder, path, compressed):  # (a store that writes: spares)
        return
    temporary = os.path.join(folder, f"tmp_obj_{os.getpid()}_{threading.get_ident()}")
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
    try:
        fd = os.open(temporary, flags, 0o444)
    except FileNotFoundError:  # the first object of its folder
        os.makedirs(folder, exist_ok=True)
        fd = os.open(temporary, flags, 0o444)
    with open(fd, "wb") as file:
        file.write(compressed)
    os.replace(temporary, path)


# Spares: files and folders made in a store ahead of its objects. A new file or folder (an
# inode) costs 0.03-0.8 ms on an ext4 disk, depending on the moment; moving one into place
# costs ~0.02 ms. An agent that changed a file leaves 2-4 objects (the file, the folders above
# it), each maybe in a fan-out folder not made yet, to be written between that agent and the
# next: with spares made while the agent worked (worker.snapshotting), none is made then.
SPARES_FOLDER = "malamar-spares"  # in the store, beside `objects` (git never reads it)
SPARE_FILES = 6
SPARE_FOLDERS = 3


class _Spares:
    """One store's spares: empty files (made readable and writable by this user only, and
    read-only once written) and empty folders, named by this process's pid (a dead process's
    are removed by the next one). None is held open: a worker may have many stores."""

    def __init__(self, objects: Path):
        self.objects = str(objects)
        self.home = os.path.join(objects.parent, SPARES_FOLDER)
        self.files: list[str] = []
        self.folders: list[str] = []
        self.made = 0
        self.lock = threading.Lock()

    def write(self, folder: str, path: str, compressed: bytes) -> bool:
        """`compressed` into `path` through a spare file; False: none left, or it failed
        (the caller writes the object its own way)."""
        with self.lock:
            spare = self.files.pop() if self.files else None
        if spare is None:
            return False
        spare_path, fd = spare, None
        try:
            fd = os.open(spare_path, os.O_WRONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
            view = memoryview(compressed)
            while view:
                view = view[os.write(fd, view) :]
            os.fchmod(fd, 0o444)  # (as git leaves an object)
            os.close(fd)
            fd = None
            try:
                os.rename(spare_path, path)
            except FileNotFoundError:  # the first object of its fan-out folder
                self._folder(folder)
                os.rename(spare_path, path)
        except OSError:
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(spare_path)
            return False
        return True

    def _folder(self, folder: str) -> None:
        """`folder` made: a spare folder moved there (an empty one there already may be
        replaced: the same thing), else made now."""
        with self.lock:
            spare = self.folders.pop() if self.folders else None
        if spare is not None:
            try:
                os.rename(spare, folder)
                return
            except OSError:  # there with objects in it (another writer), or the spare gone
                with contextlib.suppress(OSError):
                    os.rmdir(spare)
        os.makedirs(folder, exist_ok=True)

    def top_up(self) -> None:
        """Spares made up to SPARE_FILES and SPARE_FOLDERS (in the caller's thread)."""
        with self.lock:
            first = self.made == 0
            files, folders = SPARE_FILES - len(self.files), SPARE_FOLDERS - len(self.folders)
        if (files <= 0 and folders <= 0) or not os.path.isdir(self.objects):
            return  # (no store there: its first snapshot makes it)
        os.makedirs(self.home, exist_ok=True)
        if first:
            self._clear_dead()
        pid = os.getpid()
        for _ in range(max(files, 0)):
            path = os.path.join(self.home, f"{pid}-{self._next()}")
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600))
            with self.lock:
                self.files.append(path)
        for _ in range(max(folders, 0)):
            path = os.path.join(self.home, f"{pid}-{self._next()}")
            os.mkdir(path)
            with self.lock:
                self.folders.append(path)

    def _next(self) -> int:
        with self.lock:
            self.made += 1
            return self.made

    def _clear_dead(self) -> None:
        """What processes that are gone left here (a worker killed with its spares)."""
        for name in os.listdir(self.home):
            pid = name.split("-", 1)[0]
            if pid.isdigit() and psutil.pid_exists(int(pid)):  # (this process's too)
                continue
            path = os.path.join(self.home, name)
            with contextlib.suppress(OSError):
                if os.path.isdir(path):
                    os.rmdir(path)
                else:
                    os.unlink(path)

    def drop(self) -> None:
        """Every spare given back (its store is being pruned or removed)."""
        with self.lock:
            files, folders, self.files, self.folders = self.files, self.folders, [], []
        for path in files:
            with contextlib.suppress(OSError):
                os.unlink(path)
        for path in folders:
            with contextlib.suppress(OSError):
                os.rmdir(path)


SPARE_STORES = 32  # stores with spares at once (a task's temp folder has a store of its own)
_spares: "OrderedDict[str, _Spares]" = OrderedDict()  # by objects folder, last used last
_spares_lock = threading.Lock()


def _spares_of(objects: Path) -> _Spares:
    key = str(objects)
    with _spares_lock:
        spares = _spares.get(key)
        if spares is None:
            spares = _spares[key] = _Spares(Path(key))
        _spares.move_to_end(key)
        dropped = [_spares.popitem(last=False)[1] for _ in range(len(_spares) - SPARE_STORES)]
    for old in dropped:
        old.drop()
    return spares


def spares_short(objects: Path) -> bool:
    """Whether the store would make spares now: some were used, or none were made yet for a
    store that wrote objects (one whose agents change nothing gets none)."""
    with _spares_lock:
        spares = _spares.get(str(objects))
    if spares is None:
        return False
    with spares.lock:
        return len(spares.files) < SPARE_FILES or len(spares.folders) < SPARE_FOLDERS


def spares_made(objects: Path) -> None:
    """The spares of a store that writes objects made up while an agent works. Never raises:
    without spares, objects are written as before."""
    try:
        if spares_short(objects):
            _spares_of(objects).top_up()
    except Exception:
        log.warning("Could not make spare files for a snapshot store", exc_info=True)


def spares_dropped(objects: Path) -> None:
    with _spares_lock:
        spares = _spares.pop(str(objects), None)
    if spares is not None:
        spares.drop()


def blob_of(path: Path) -> tuple[bytes, bytes]:
    """(id, object) of a file's content. Unsupported: a file too large to read whole."""
    with open(path, "rb") as file:
        content = file.read(BLOB_MAX_BYTES + 1)
    if len(content) > BLOB_MAX_BYTES:
        raise Unsupported("a large file")
    return _object(b"blob", content)


def _tree(entries: dict[bytes, tuple[int, bytes]]) -> tuple[bytes, bytes]:
    def order(name: bytes) -> bytes:
        return name + b"/" if entries[name][0] == MODE_TREE else name

    body = b"".join(
        b"%o %s\0%s" % (entries[n][0], n, entries[n][1]) for n in sorted(entries, key=order)
    )
    return _object(b"tree", body)


class TreeModel:
    """A tree's folders and files (path → mode and id), with every folder's tree id worked
    out as git does: `updated()` gives the tree with some files changed, made or removed, and
    the tree objects that takes."""

    def __init__(self, folders: dict[bytes, dict[bytes, tuple[int, bytes]]], root: bytes):
        self.folders, self.root = folders, root

    @classmethod
    def from_files(cls, files: dict[bytes, tuple[int, bytes]]) -> tuple["TreeModel", list]:
        """The model of an index's files (read_index), and the (id, object) of its trees."""
        folders: dict[bytes, dict] = {b"": {}}
        for path, (mode, object_id) in files.items():
            folder, _, name = path.rpartition(b"/")
            entries = folders.get(folder)
            if entries is None:
                entries = _make_folders(folders, folder)
            entries[name] = (mode, object_id)
        model, trees = cls(folders, b""), []
        model.root = model._work_out(sorted(folders, key=_depth, reverse=True), trees)
        return model, trees

    def mode(self, path: bytes) -> int | None:
        folder, _, name = path.rpartition(b"/")
        entry = self.folders.get(folder, {}).get(name)
        return None if entry is None or entry[0] == MODE_TREE else entry[0]

    def updated(self, files: dict[bytes, tuple[int, bytes] | None]) -> tuple["TreeModel", list]:
        """The model with these files' (mode, id) put in (None: the file is gone; folders left
        empty go, as git records no empty tree), and the (id, object) of each tree that
        changed."""
        folders = dict(self.folders)
        copied: set[bytes] = set()

        def writable(folder: bytes) -> dict:  # (a folder of the new model: copied, or new)
            if folder not in copied:
                copied.add(folder)
                if folder in folders:
                    folders[folder] = dict(folders[folder])
                else:
                    folders[folder] = {}
                    parent, _, name = folder.rpartition(b"/")
                    writable(parent)[name] = (MODE_TREE, b"")
            return folders[folder]

        for path, entry in files.items():
            folder, _, name = path.rpartition(b"/")
            if entry is None:
                writable(folder).pop(name, None)
            else:
                writable(folder)[name] = entry
            while folder:  # the folders above it change too
                folder = folder.rpartition(b"/")[0]
                writable(folder)
        for folder in sorted(copied, key=_depth, reverse=True):
            if folder and not folders[folder]:
                del folders[folder]
                parent, _, name = folder.rpartition(b"/")
                folders[parent].pop(name, None)
        dirty = sorted((f for f in copied if f in folders), key=_depth, reverse=True)
        model, written = TreeModel(folders, b""), []
        model.root = model._work_out(dirty, written)
        return model, written

    def _work_out(self, folders: list[bytes], written: list) -> bytes:
        """The tree ids of `folders` (deepest first), each put in its parent's entries."""
        object_id = b""
        for folder in folders:
            object_id, data = _tree(self.folders[folder])
            written.append((object_id, data))
            if folder:
                parent, _, name = folder.rpartition(b"/")
                self.folders[parent][name] = (MODE_TREE, object_id)
        return object_id


def _depth(folder: bytes) -> int:
    return folder.count(b"/") + (1 if folder else 0)


def _make_folders(folders: dict, folder: bytes) -> dict:
    entries = folders[folder] = {}
    parent, _, name = folder.rpartition(b"/")
    if parent not in folders:
        _make_folders(folders, parent)
    folders[parent][name] = (MODE_TREE, b"")
    return entries
