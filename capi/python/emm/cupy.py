"""emm as CuPy's allocator: ``emm.cupy.use_emm()`` (or
``cupy.cuda.set_allocator(emm.cupy.allocator)``).

Each allocation is ordered on CuPy's current stream (usable at once there, elsewhere after an
ordering with it, as CuPy's own pool) and freed on the same stream when CuPy drops it. Size 0
needs no memory and gets none.

``use_emm()`` installs the C-level allocator when this CuPy can take it (``c_allocator()``):
CuPy's ``CFunctionAllocator`` calls ``emm_cupy_malloc`` / ``emm_cupy_free`` in libemm directly,
which read the current stream through CuPy's own C function and raise emm's errors in the
caller, so an allocation runs no Python of emm's. Otherwise (or with ``c_level=False``) it
installs ``allocator``, the same in Python.
"""

from __future__ import annotations

import ctypes
from typing import Any, Optional

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


class OutOfMemoryError(cupy.cuda.memory.OutOfMemoryError):
    """emm ran out of device memory for a CuPy allocation (raised by the C-level allocator;
    a ``cupy.cuda.memory.OutOfMemoryError`` with emm's message)."""

    def __init__(self, message: str):
        MemoryError.__init__(self, message)
        self.status = _lib.OUT_OF_MEMORY


class Error(_lib.EmmError):
    """Any other failure of the C-level allocator, with emm's status and message."""

    def __init__(self, message: str):
        super().__init__(_lib.last_error()[0], message)


class _Hooks(ctypes.Structure):
    """``EmmCupyHooks`` of ``emm.h``: the ``param`` of the C-level allocator."""

    _fields_ = [
        ("current_stream", ctypes.c_void_p),
        ("raise_", ctypes.c_void_p),
        ("out_of_memory", ctypes.c_void_p),
        ("error", ctypes.c_void_p),
    ]


_capsule_name = ctypes.PYFUNCTYPE(ctypes.c_char_p, ctypes.py_object)(("PyCapsule_GetName", ctypes.pythonapi))
_capsule_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi)
)

# More than any device has, and still a Py_ssize_t (CuPy's glue takes one).
_IMPOSSIBLE = 1 << 62


def _current_stream_function() -> Optional[int]:
    """The address of CuPy's ``intptr_t get_current_stream_ptr(void)`` (exported by
    ``cupy.cuda.stream`` for other Cython modules), or None when this CuPy has none."""
    try:
        from cupy.cuda import stream as cupy_stream

        capsule = cupy_stream.__pyx_capi__["get_current_stream_ptr"]
        name = _capsule_name(capsule)
    except (ImportError, AttributeError, KeyError, TypeError, ValueError):
        return None
    # Cython names the capsule by the function's C signature.
    if not name or b"intptr_t" not in name or not name.replace(b" ", b"").endswith(b"(void)"):
        return None
    return _capsule_pointer(capsule, name) or None


def c_allocator() -> Optional[Any]:
    """CuPy's ``CFunctionAllocator`` over libemm's ``emm_cupy_malloc`` / ``emm_cupy_free``
    (its ``malloc``, for ``cupy.cuda.set_allocator``), or None when this CuPy cannot take it
    safely: no C function for the current stream, no ``CFunctionAllocator``, or a glue that does
    not pass an exception raised in ``malloc`` on to the caller (checked by asking for more
    memory than exists)."""
    make = getattr(cupy.cuda.memory, "CFunctionAllocator", None)
    stream = _current_stream_function()
    if make is None or stream is None:
        return None
    lib = _lib.lib()
    address = lambda f: ctypes.cast(f, ctypes.c_void_p).value  # noqa: E731
    hooks = _Hooks(stream, address(ctypes.pythonapi.PyErr_SetString), id(OutOfMemoryError), id(Error))
    # The owner keeps the hooks and what they point to alive as long as CuPy holds the allocator.
    owner = (hooks, lib, OutOfMemoryError, Error)
    alloc = make(ctypes.addressof(hooks), address(lib.emm_cupy_malloc), address(lib.emm_cupy_free), owner)
    try:
        alloc.malloc(_IMPOSSIBLE)
    except (OutOfMemoryError, Error):
        return alloc.malloc
    except Exception:  # noqa: BLE001 - a glue that loses the exception fails here in its own way
        return None
    return None


def use_emm(c_level: bool = True) -> None:
    """Makes emm CuPy's device allocator (``cupy.cuda.set_allocator``), process-wide: the
    C-level allocator when ``c_level`` and this CuPy can take it, else ``allocator``."""
    fast = c_allocator() if c_level else None
    cupy.cuda.set_allocator(fast or allocator)


def use_cupy_pool() -> None:
    """Gives CuPy back its own memory pool."""
    cupy.cuda.set_allocator(cupy.get_default_memory_pool().malloc)
