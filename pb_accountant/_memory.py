"""The C allocator's adaptive mmap threshold, raised once before the first composition
(docs/method.md §8, "Memory pages").

glibc serves a block above its mmap threshold (128 KiB at start) by mmap and gives it
back to the kernel when it is freed, so the pages of the next such block are faulted in
and zeroed again.  Freeing an mmapped block of at most 32 MiB raises the threshold to
that block's size (and the heap's trim threshold to twice it): later blocks up to that
size come from the heap, whose pages are reused.  A composition allocates and frees
arrays of megabytes (transforms and their parts), so a process's first query paid for
the low threshold until its own frees had raised it (benchmarks/bench_first_query.py:
random settings' first queries a median 1.03 and up to 1.46 times faster primed; one of
511 segments 11.1 s and 730,000 minor faults unprimed, 9.2 s and 87,000 primed).  One
untouched block just below 32 MiB, allocated and freed before the first composition,
raises the threshold as glibc's own rule would after a query freed a block that size; it
is never written, so it costs no memory, and other allocators simply ignore it.
"""
from __future__ import annotations

import threading

import numpy as np

#: the block freed to raise the threshold: below glibc's 32 MiB ceiling for its dynamic
#: threshold (DEFAULT_MMAP_THRESHOLD_MAX on 64-bit), with room for the chunk's header
#: and page rounding
PRIMING_BLOCK_BYTES = 30 * 2 ** 20

_primed = False
_lock = threading.Lock()


def _address_space_limited() -> bool:
    """Whether the process runs under a finite address-space limit (RLIMIT_AS)."""
    try:
        import resource
    except ImportError:          # (not POSIX: no such limit to respect)
        return False
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    return soft != resource.RLIM_INFINITY


def prime_allocator() -> bool:
    """Allocate and free one PRIMING_BLOCK_BYTES block, the first time only (True where
    it did).

    Not in a process with a finite address-space limit: the heap would then keep up to
    twice the block of freed memory that the limit may need elsewhere (thread stacks
    under ``ulimit -v`` were refused where the unprimed query had room)."""
    global _primed
    if _primed:
        return False
    with _lock:
        if _primed:
            return False
        _primed = True
        if _address_space_limited():
            return False
        try:
            block = np.empty(PRIMING_BLOCK_BYTES // 8)    # mapped, never touched
        except MemoryError:       # (nothing was allocated: the queries run as before)
            return False
        del block
        return True
