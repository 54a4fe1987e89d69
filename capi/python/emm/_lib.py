"""ctypes bindings over emm's C ABI (``capi/include/emm.h``) and the errors they raise.

The library is found, in order: the path in ``EMM_LIBRARY``; the library inside this package
(``libemm*.so``: the installed wheel's ``libemm.cpython-*.so``, or ``libemm.so`` where the
hardware bundle puts it); the checkout's ``target/release`` then ``target/debug`` (``cargo
build -p emm-capi``).
"""

from __future__ import annotations

import ctypes
import os
import threading
from pathlib import Path
from typing import Any, List, Tuple

ABI_VERSION = 1
IPC_HANDLE_SIZE = 64

HOST_MAPPED = 1
HOST_PORTABLE = 2
HOST_WRITE_COMBINED = 4
LOCATION_HOST = -1

# EmmStatus
OK = 0
INVALID_ARGUMENT = 1
OUT_OF_MEMORY = 2
UNKNOWN_POINTER = 3
UNSUPPORTED = 4
CONFIG = 5
NO_DEVICE = 6
DRIVER = 7
PANIC = 8
IO = 9


class EmmError(RuntimeError):
    """A call into emm failed; ``status`` is the ``EMM_STATUS_*`` code."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


class OutOfMemoryError(EmmError, MemoryError):
    """emm ran out of device (or host) memory (``EMM_STATUS_OUT_OF_MEMORY``)."""


class UnsupportedError(EmmError, NotImplementedError):
    """The manager does not offer this operation (``EMM_STATUS_UNSUPPORTED``)."""


def _candidates() -> List[Path]:
    env = os.environ.get("EMM_LIBRARY")
    if env:
        return [Path(env)]
    here = Path(__file__).resolve().parent
    root = here.parent.parent.parent
    # Sorted, so the choice is the same on every run should a package hold two.
    bundled = sorted(here.glob("libemm*.so")) or [here / "libemm.so"]
    return bundled + [
        root / "target" / "release" / "libemm.so",
        root / "target" / "debug" / "libemm.so",
    ]


def library_path() -> str:
    """The path of the emm library this package loads."""
    tried = _candidates()
    for p in tried:
        if p.is_file():
            return str(p)
    raise EmmError(
        CONFIG,
        "emm: cannot find libemm.so (tried %s); build it with `cargo build --release -p "
        "emm-capi` or set EMM_LIBRARY to its path" % ", ".join(str(p) for p in tried),
    )


_c_int = ctypes.c_int
_size = ctypes.c_size_t
_vp = ctypes.c_void_p
_PROTOTYPES = {
    "emm_abi_version": (ctypes.c_uint32, []),
    "emm_configure": (_c_int, [ctypes.c_char_p]),
    "emm_configure_if_unset": (_c_int, [ctypes.c_char_p, ctypes.POINTER(_c_int)]),
    "emm_reinitialize": (_c_int, [ctypes.c_char_p]),
    "emm_device_count": (_c_int, [ctypes.POINTER(_c_int)]),
    "emm_alloc": (_c_int, [_size, _c_int, _vp, ctypes.POINTER(_vp)]),
    "emm_free": (_c_int, [_vp, _vp]),
    "emm_stream_create": (_c_int, [_c_int, ctypes.POINTER(_vp)]),
    "emm_stream_destroy": (_c_int, [_c_int, _vp]),
    "emm_stream_synchronize": (_c_int, [_c_int, _vp]),
    "emm_stream_forget": (_c_int, [_vp]),
    "emm_ipc_get_handle": (_c_int, [_vp, _size, ctypes.c_char_p, ctypes.POINTER(_size)]),
    "emm_last_error_code": (_c_int, []),
    "emm_last_error_message": (ctypes.c_char_p, []),
    "emm_clear_last_error": (None, []),
    "emm_status_name": (ctypes.c_char_p, [_c_int]),
    "emm_host_alloc": (_c_int, [_size, _c_int, ctypes.c_uint32, ctypes.POINTER(_vp), ctypes.POINTER(_vp)]),
    "emm_host_pin": (_c_int, [_vp, _size, _c_int, _c_int, ctypes.POINTER(_vp)]),
    "emm_managed_alloc": (_c_int, [_size, _c_int, _c_int, ctypes.POINTER(_vp)]),
    "emm_managed_prefetch": (_c_int, [_vp, _size, _c_int, _vp]),
    "emm_managed_advise": (_c_int, [_vp, _size, _c_int, _c_int]),
    "emm_memory_info": (_c_int, [_c_int, ctypes.POINTER(_size), ctypes.POINTER(_size)]),
    # A void pointer, not c_char_p: the string must be given back to emm_string_free.
    "emm_stats_json": (_vp, []),
    "emm_log_check": (_c_int, [_c_int]),
    "emm_reset_peak_stats": (_c_int, []),
    "emm_string_free": (None, [_vp]),
    "emm_reset": (_c_int, [_c_int]),
    "emm_defer_cleanup_begin": (_c_int, [_c_int, ctypes.POINTER(ctypes.c_uint64)]),
    "emm_defer_cleanup_end": (_c_int, [ctypes.c_uint64]),
    "emm_torch_alloc": (_vp, [ctypes.c_ssize_t, _c_int, _vp]),
    "emm_torch_free": (None, [_vp, ctypes.c_ssize_t, _c_int, _vp]),
    "emm_cupy_malloc": (_vp, [_vp, _size, _c_int]),
    "emm_cupy_free": (None, [_vp, _vp, _c_int]),
    "emm_device_buffer_new": (_c_int, [_vp, _size, _c_int, _vp, ctypes.POINTER(ctypes.c_uint64)]),
    "emm_device_buffer_info": (_c_int, [ctypes.c_uint64, ctypes.POINTER(_size), ctypes.POINTER(_vp)]),
    "emm_device_buffer_copy_to_host": (_c_int, [ctypes.c_uint64, _size, _vp, _size, _vp]),
    "emm_device_buffer_copy_from_host": (_c_int, [ctypes.c_uint64, _size, _vp, _size]),
    "emm_device_buffer_resize": (_c_int, [ctypes.c_uint64, _size, _vp]),
    "emm_device_buffer_free": (_c_int, [ctypes.c_uint64]),
}

_lock = threading.Lock()
_lib = None


def lib() -> Any:
    """The loaded library, with every prototype set (loaded once, on first use)."""
    global _lib
    if _lib is not None:
        return _lib
    with _lock:
        if _lib is None:
            handle = ctypes.CDLL(library_path())
            for name, (restype, argtypes) in _PROTOTYPES.items():
                fn = getattr(handle, name)
                fn.restype = restype
                fn.argtypes = argtypes
            found = handle.emm_abi_version()
            if found != ABI_VERSION:
                raise EmmError(
                    CONFIG,
                    "emm: %s implements C ABI version %d, this package needs %d; rebuild "
                    "the library and the package from one checkout" % (library_path(), found, ABI_VERSION),
                )
            _lib = handle
    return _lib


def last_error() -> Tuple[int, str]:
    """The calling thread's last error: ``(status, message)``."""
    l = lib()
    msg = l.emm_last_error_message() or b""
    return l.emm_last_error_code(), msg.decode("utf-8", "replace")


def error_for(status: int, message: str) -> EmmError:
    """The exception for ``status``."""
    if status == OUT_OF_MEMORY:
        return OutOfMemoryError(status, message)
    if status == UNSUPPORTED:
        return UnsupportedError(status, message)
    return EmmError(status, message)


def check(status: int) -> None:
    """Raises the thread's last error when ``status`` is not OK."""
    if status != OK:
        _, message = last_error()
        raise error_for(status, message)


def stream_ptr(stream: Any) -> int:
    """A raw stream handle (an int) from an int, None, or an object with ``.ptr`` / ``.cuda_stream``
    / ``.handle`` (CuPy, PyTorch, Numba streams)."""
    if stream is None:
        return 0
    if isinstance(stream, int):
        return stream
    for attr in ("ptr", "cuda_stream"):
        v = getattr(stream, attr, None)
        if v is not None:
            return int(v)
    h = getattr(stream, "handle", None)
    if h is not None:
        return int(getattr(h, "value", h) or 0)
    return int(stream)
