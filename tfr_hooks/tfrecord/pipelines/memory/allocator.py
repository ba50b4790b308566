"""The C allocator's free memory after the in-memory load, handed back to the system.

The held arrays are allocated once; the chunks decoded while loading pass. On Linux,
glibc's ``malloc`` serves a buffer of 128 KiB or more with its own ``mmap`` and hands it
back when freed, but after the first such ``free`` it raises that threshold to the freed
size, so the later chunks come from the allocating thread's arena. Freed there, they
stay resident, and the load decodes on several threads, each with its arena: on the
benchmark's digits the load left tens of MiB free and resident (finding 19 of
bench/results/findings.md, ``bench/rss_phases.py``).

Pinning the threshold for the whole process (``mallopt``) would keep them out, and costs
the model: every large activation would be mapped anew each step. Smaller chunks would
keep them out of the load, and cost it a third more time. So the load is left as it is,
and once it is done the free pages of every arena go back (:func:`release_free_memory`).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import sys

__all__ = ["release_free_memory"]

logger = logging.getLogger(__name__)


def release_free_memory() -> bool:
    """Hand the free pages of the C allocator's arenas back to the system (glibc only).

    Calls glibc's ``malloc_trim(0)``, which returns the free memory at the top of every
    arena and the whole free pages inside them. Elsewhere (macOS, musl) it does nothing.

    Returns:
        Whether memory was handed back.
    """
    if not sys.platform.startswith("linux"):
        return False
    name = ctypes.util.find_library("c") or "libc.so.6"
    try:
        trim = ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):  # not glibc
        return False
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    released = bool(trim(0))
    logger.debug("malloc_trim(0) after the in-memory load: %s", released)
    return released
