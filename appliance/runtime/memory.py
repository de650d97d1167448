"""Handing memory the panel no longer uses back to the system.

CPython frees objects into its own arenas and glibc's heap, which keep what they can
reuse. Two moments leave a lot behind: a sign-in (scrypt takes 16 MiB) and a core config
build at 100,000 clients (some 35 MB of client entries, read a batch at a time). Large
blocks are made to come straight from mmap, so they return when freed, and after a
config build the heap's free pages are given back. Arenas that still hold a few live
objects stay resident. Other C libraries need neither call: both do nothing there.
"""

from __future__ import annotations

import ctypes
import functools

M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_BYTES = 128 * 1024


@functools.cache
def _libc():
    try:
        return ctypes.CDLL("libc.so.6")
    except OSError:
        return None


def serve_large_blocks_from_mmap() -> None:
    """Blocks over 128 KiB come from mmap and go back to the system when freed."""
    libc = _libc()
    if libc is not None:
        libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)


def return_freed_memory() -> None:
    """Give the free pages of the heap back to the system (after a large build)."""
    libc = _libc()
    if libc is not None:
        libc.malloc_trim(0)
