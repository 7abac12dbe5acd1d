"""Keep the worker's C heap from growing with its thread count.

glibc gives every thread that allocates while the others hold theirs an arena of its own, up to
8 per CPU, and a freed arena keeps its pages. The worker starts threads all the time (one per
busy workspace, one per chat reply, three or four per CLI run to read its pipes), and SQLite
and Python's larger objects allocate through malloc in each of them: after 10,000 steps over 10
workspaces the worker had grown by ~20 MB of fragmented arenas. Two arenas are plenty for a
process whose Python code runs one thread at a time (the GIL).
"""

import ctypes
import ctypes.util

M_ARENA_MAX = -8  # glibc's mallopt parameter number (malloc.h)
WORKER_ARENAS = 2


def limit_malloc_arenas(arenas: int = WORKER_ARENAS) -> bool:
    """Cap glibc's malloc arenas for this process (arenas created before stay). Returns False
    where there is no glibc mallopt (macOS, musl): nothing to do there."""
    try:
        mallopt = ctypes.CDLL(ctypes.util.find_library("c") or None).mallopt
    except (AttributeError, OSError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    return mallopt(M_ARENA_MAX, arenas) == 1  # musl's mallopt is a stub that returns 0
