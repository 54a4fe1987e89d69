"""emm as CuPy's allocator: ``emm.cupy.use_emm()`` (or
``cupy.cuda.set_allocator(emm.cupy.allocator)``).

Each allocation is ordered on CuPy's current stream (usable at once there, elsewhere after an
ordering with it, as CuPy's own pool) and wrapped in ``cupy.cuda.UnownedMemory`` whose owner
frees it, on the same stream, when CuPy drops it. Size 0 needs no memory and gets none.
"""

from __future__ import annotations

import ctypes
from typing import Any

import cupy

from emm import _lib


class _Allocation:
    """Owns one emm allocation; CuPy keeps it alive as the ``UnownedMemory``'s owner."""

    __slots__ = ("addr", "stream")

    def __init__(self, addr, stream):
        self.addr = addr
        self.stream = stream

    def __del__(self):
        addr, self.addr = self.addr, 0
        if addr:
            try:
                _lib.lib().emm_free(addr, self.stream)
            except Exception:  # noqa: BLE001 - never raise from a finalizer
                pass


def allocator(nbytes: int) -> Any:
    """A ``cupy.cuda.MemoryPointer`` to ``nbytes`` bytes from emm on the current device and
    stream; raises ``cupy.cuda.memory.OutOfMemoryError`` when memory runs out."""
    device = cupy.cuda.runtime.getDevice()
    nbytes = int(nbytes)
    if nbytes == 0:
        mem = cupy.cuda.UnownedMemory(0, 0, None, device)
        return cupy.cuda.MemoryPointer(mem, 0)
    stream = cupy.cuda.get_current_stream().ptr
    out = ctypes.c_void_p()
    status = _lib.lib().emm_alloc(nbytes, device, stream, ctypes.byref(out))
    if status != _lib.OK:
        _, message = _lib.last_error()
        if status == _lib.OUT_OF_MEMORY:
            # CuPy's OutOfMemoryError(size, total): total is what is allocated so far.
            import emm

            live = emm.stats()["devices"][device]["current_bytes"]
            raise cupy.cuda.memory.OutOfMemoryError(nbytes, live)
        raise _lib.error_for(status, message)
    owner = _Allocation(out.value, stream)
    mem = cupy.cuda.UnownedMemory(out.value, nbytes, owner, device)
    return cupy.cuda.MemoryPointer(mem, 0)


def use_emm() -> None:
    """Makes emm CuPy's device allocator (``cupy.cuda.set_allocator``), process-wide."""
    cupy.cuda.set_allocator(allocator)


def use_cupy_pool() -> None:
    """Gives CuPy back its own memory pool."""
    cupy.cuda.set_allocator(cupy.get_default_memory_pool().malloc)
