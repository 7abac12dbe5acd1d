"""Whether anything in a folder changed since a moment, as the kernel tells it (inotify).

A snapshot of a folder that did not change since its last one is that one's tree
(runner.snapshots): the stat data of every entry proves it, at the cost of a walk of the folder
(1.3 ms for a repository of 100 files, between two agents). A watch armed as that walk lists
the folder (each subfolder watched before it is listed, so nothing listed can change unseen)
proves it the next time in one read(): no event since, nothing changed since the walk.

Any event (an entry written, made, removed, moved, its mode or times changed, the kernel's
queue overflowing, a watched folder gone) makes the watch `changed` for good, and the next
snapshot walks again, renewing the watch (the same inotify instance: a new generation, with
the folders that walk lists). Reading files makes no event. Watched only where the
kernel sees every change: a local file system (`LOCAL_FILE_SYSTEMS`; a network one changes
under other machines' hands) and one device for the whole folder (a folder mounted inside it
is walked as before). Not seen by inotify: a file changed through a shared memory map or
through a hard link from outside the folder; its stat data shows it at the folder's next
snapshot with a walk (after any other change there).

One inotify instance per folder watched (Linux allows 128 per user by default, shared with
every other program: runner.snapshots keeps at most WATCHED_FOLDERS). A folder moved out of
the watched one stays watched until removed: its changes only cost a walk."""

import contextlib
import ctypes
import os
import select
import threading

IN_MODIFY = 0x00000002
IN_ATTRIB = 0x00000004
IN_MOVED_FROM = 0x00000040
IN_MOVED_TO = 0x00000080
IN_CREATE = 0x00000100
IN_DELETE = 0x00000200
IN_DELETE_SELF = 0x00000400
IN_MOVE_SELF = 0x00000800
IN_ONLYDIR = 0x01000000
IN_DONT_FOLLOW = 0x02000000
IN_EXCL_UNLINK = 0x04000000
# What changes a snapshot: never reads (IN_ACCESS, IN_OPEN, IN_CLOSE_NOWRITE).
MASK = (
    IN_MODIFY
    | IN_ATTRIB
    | IN_MOVED_FROM
    | IN_MOVED_TO
    | IN_CREATE
    | IN_DELETE
    | IN_DELETE_SELF
    | IN_MOVE_SELF
    | IN_ONLYDIR
    | IN_DONT_FOLLOW
    | IN_EXCL_UNLINK
)
EVENTS_READ = 4096  # bytes per read() while draining (any event is enough to know)

# statfs f_type of file systems whose every change goes through this kernel (linux/magic.h)
LOCAL_FILE_SYSTEMS = frozenset(
    {
        0xEF53,  # ext2, ext3, ext4
        0x58465342,  # xfs
        0x9123683E,  # btrfs
        0x01021994,  # tmpfs
        0x858458F6,  # ramfs
        0x794C7630,  # overlayfs (containers)
        0xF2F52010,  # f2fs
        0x2FC12FC1,  # zfs
        0xCA451A4E,  # bcachefs
        0x52654973,  # reiserfs
        0x3153464A,  # jfs
    }
)


def _libc():
    """libc's inotify and statfs, or None where there are none (not Linux)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        functions = (libc.inotify_init1, libc.inotify_add_watch, libc.statfs)
    except (OSError, AttributeError):
        return None
    init, add_watch, statfs = functions
    init.argtypes, init.restype = [ctypes.c_int], ctypes.c_int
    add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
    add_watch.restype = ctypes.c_int
    statfs.argtypes, statfs.restype = [ctypes.c_char_p, ctypes.c_void_p], ctypes.c_int
    return libc


_LIBC = _libc()
_STATFS_SIZE = 256  # struct statfs is 120 bytes on 64-bit Linux; f_type (a long) comes first


def file_system_type(path: str) -> int | None:
    """The statfs f_type of the file system `path` is on (None: not known)."""
    if _LIBC is None:
        return None
    buffer = ctypes.create_string_buffer(_STATFS_SIZE)
    if _LIBC.statfs(os.fsencode(path), buffer) != 0:
        return None
    return ctypes.c_long.from_buffer(buffer).value & 0xFFFFFFFF


class FolderWatch:
    """A folder's inotify instance, kept from one walk of the folder to the next (closing one
    costs ~0.2 ms, up to 20 ms when the kernel waits for its readers to finish: never between
    two agents). Each walk `renew`s it: a new generation, whose folders `add` arms as the walk
    lists them; `changed(generation)` says whether anything changed since that generation's
    walk (any event since, or a later walk: its own generation is gone). `usable`: every folder
    added so far was watched."""

    def __init__(self):
        self.usable = _LIBC is not None
        self.device = -1  # the root's st_dev: a folder on another is not watched
        self.fd = -1
        self.generation = 0
        self._changed_in = -1  # the generation in which an event was read
        self._waiting = select.poll()  # (whether events wait, without an exception if none)
        self._lock = threading.Lock()

    def renew(self) -> int:
        """A walk begins: the events so far read (they tell the walk before), and the new
        generation returned."""
        with self._lock:
            self._events()
            self.generation += 1
            return self.generation

    def add(self, folder: str, device: int) -> None:
        """Watch `folder` (before it is listed; the root first, whose file system decides).
        A folder on another device, or one the kernel will not watch (the user's instances or
        watches all taken), makes the watch unusable."""
        if not self.usable:
            return
        if self.fd < 0:
            if file_system_type(folder) not in LOCAL_FILE_SYSTEMS:
                self.give_up()
                return
            self.device = device
            self.fd = _LIBC.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
            if self.fd < 0:
                self.give_up()
                return
            self._waiting.register(self.fd, select.POLLIN)
        if device != self.device or _LIBC.inotify_add_watch(self.fd, os.fsencode(folder), MASK) < 0:
            self.give_up()

    def give_up(self) -> None:
        self.usable = False
        self.close()

    def changed(self, generation: int) -> bool:
        """Whether anything may have changed since the walk of `generation`: the events
        waiting are read, and one is enough for good."""
        with self._lock:
            if not self.usable or self.fd < 0 or generation != self.generation:
                return True
            if self._changed_in != generation and self._waiting.poll(0):
                self._events()
            return self._changed_in == generation

    def _events(self) -> None:
        """Read what waits; any event marks the current generation changed."""
        try:
            while os.read(self.fd, EVENTS_READ):
                self._changed_in = self.generation
        except BlockingIOError:
            return
        except OSError:  # (closed)
            self._changed_in = self.generation

    def __del__(self):
        self.close()

    def close(self) -> None:
        with self._lock:
            self.usable = False
            fd, self.fd = self.fd, -1
        if fd >= 0:
            with contextlib.suppress(OSError):
                os.close(fd)
