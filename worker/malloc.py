"""Keep the worker's C heap from growing with its thread count and its runs.

glibc gives every thread that allocates while the others hold theirs an arena of its own, up to
8 per CPU, and a freed arena keeps its pages. The worker starts threads all the time (one per
busy workspace, one per chat reply, three or four per CLI run to read its pipes), and SQLite
and Python's larger objects allocate through malloc in each of them: after 10,000 steps over 10
workspaces the worker had grown by ~20 MB of fragmented arenas. Two arenas are plenty for a
process whose Python code runs one thread at a time (the GIL). And when a run thread ends, the
memory it freed (its SQLite connection's page cache, up to 2 MB) goes back to the system instead
of staying in the arena as fragments.
"""

import ctypes

M_ARENA_MAX = -8  # glibc's mallopt parameter number (malloc.h)
WORKER_ARENAS = 2


LIBC = ctypes.CDLL(None)  # the symbols the process has loaded: the C library's among them


def limit_malloc_arenas(arenas: int = WORKER_ARENAS) -> bool:
    """Cap glibc's malloc arenas for this process (arenas created before stay). Returns False
    where there is no glibc mallopt (macOS, musl): nothing to do there."""
    mallopt = getattr(LIBC, "mallopt", None)
    if mallopt is None:
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    return mallopt(M_ARENA_MAX, arenas) == 1  # musl's mallopt is a stub that returns 0


def release_free_memory() -> None:
    """Give the pages malloc holds free back to the system (glibc; a no-op elsewhere). A few
    milliseconds at most: called when a run thread ends, not per step."""
    trim = getattr(LIBC, "malloc_trim", None)
    if trim is not None:
        trim.argtypes = (ctypes.c_size_t,)
        trim(0)
