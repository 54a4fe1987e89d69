"""emm: one GPU memory manager shared by Numba, CuPy and PyTorch in one process.

A thin ctypes package over emm's C ABI (``libemm.so``: inside the installed package, ``pip
install ./capi``; or ``cargo build --release -p emm-capi`` and ``EMM_LIBRARY``). Modules:

- ``emm.numba``: the EMM plugin (``NUMBA_CUDA_MEMORY_MANAGER=emm.numba``).
- ``emm.cupy``: ``emm.cupy.use_emm()`` sets CuPy's allocator.
- ``emm.torch``: ``emm.torch.use_emm()`` sets PyTorch's ``CUDAPluggableAllocator``.
- ``emm.allocators.numba`` / ``.cupy`` / ``.torch``: the same three modules under RMM's layout.
- ``emm.statistics``: statistics over a block of code and a profiler (as ``rmm.statistics``).
- here: ``configure``, ``reinitialize``, ``stats``, ``memory_info``, ``reset``,
  ``DeviceBuffer`` (as RMM's ``rmm.DeviceBuffer`` / ``rmm.reinitialize``).

Environment: ``EMM_BACKEND`` (``cuda``, default, or ``sim`` for the simulated GPU),
``EMM_MEMORY_MANAGER`` (a built-in manager name or a ``.wasm`` plugin; default ``pool-vmm-tight``),
``EMM_MOVE_SHARE`` (the percent of the host's time ``pool-vmm-tight`` may spend moving memory;
default 5), ``EMM_LIBRARY`` (the library's path).
"""

from __future__ import annotations

import ctypes
import json
from os import PathLike
from typing import Any, Dict, Iterable, Optional, Tuple, Union

from emm._lib import (
    EmmError,
    OutOfMemoryError,
    UnsupportedError,
    check as _check,
    lib as _load,
    library_path,
    stream_ptr as _stream_ptr,
)
from emm._buffer import DeviceBuffer
from emm._version import __version__

__all__ = [
    "DeviceBuffer",
    "EmmError",
    "OutOfMemoryError",
    "UnsupportedError",
    "__version__",
    "alloc",
    "configure",
    "device_count",
    "free",
    "library_path",
    "memory_info",
    "reinitialize",
    "reset",
    "reset_peak_stats",
    "stats",
]


def configure(manager: Union[str, "PathLike[str]", None] = None) -> None:
    """Sets the process-wide manager: a built-in name (``"pool"``, ``"arena"``, ``"binning"``,
    ``"async"``, ``"managed"``, ``"default"``, ...), the path of a ``.wasm`` plugin, or None for
    ``EMM_MEMORY_MANAGER`` / ``pool-vmm-tight``. Live memory stays valid."""
    arg = None if manager is None else str(manager).encode()
    _check(_load().emm_configure(arg))


def reinitialize(
    pool_allocator: bool = False,
    managed_memory: bool = False,
    initial_pool_size: Optional[int] = None,
    maximum_pool_size: Optional[int] = None,
    devices: Union[int, Iterable[int], None] = None,
    logging: bool = False,
    log_file_name: Union[str, "PathLike[str]", None] = None,
    statistics: bool = False,
) -> None:
    """Rebuilds every device's manager over a fresh resource chain, as ``rmm.reinitialize``:
    driver (or managed) memory, an optional pool of ``initial_pool_size`` up to
    ``maximum_pool_size`` bytes, an optional CSV log, optional statistics. ``devices`` is an
    int or a list of ordinals (default: all)."""
    if logging and not log_file_name:
        raise ValueError("logging=True needs log_file_name (emm logs to a file)")
    options: Dict[str, Any] = {
        "pool_allocator": bool(pool_allocator),
        "managed_memory": bool(managed_memory),
        "statistics": bool(statistics),
    }
    if initial_pool_size is not None:
        options["initial_pool_size"] = int(initial_pool_size)
    if maximum_pool_size is not None:
        options["maximum_pool_size"] = int(maximum_pool_size)
    if devices is not None:
        options["devices"] = [int(devices)] if isinstance(devices, int) else [int(d) for d in devices]
    if logging:
        options["log_file_name"] = str(log_file_name)
    _check(_load().emm_reinitialize(json.dumps(options).encode()))


def stats() -> Dict[str, Any]:
    """emm's statistics as a dict: ``backend``, ``manager``, and per device the bytes and
    allocations live now, at most at once (``peak_*``) and ever (``total_*``), and
    ``held_bytes``: device memory the manager holds from the driver (as PyTorch's reserved
    bytes; ``None`` where the manager does not track it)."""
    l = _load()
    p = l.emm_stats_json()
    if not p:
        _check(l.emm_last_error_code() or 1)
    try:
        return json.loads(ctypes.string_at(p).decode())
    finally:
        l.emm_string_free(p)


def reset_peak_stats() -> None:
    """Restarts the ``peak_*`` figures from what is live now."""
    _check(_load().emm_reset_peak_stats())


def device_count() -> int:
    """The number of devices emm's backend sees."""
    n = ctypes.c_int()
    _check(_load().emm_device_count(ctypes.byref(n)))
    return n.value


def memory_info(device: int = 0) -> Tuple[int, int]:
    """``(free, total)`` bytes of ``device``, as the manager (or the driver) tells it."""
    free, total = ctypes.c_size_t(), ctypes.c_size_t()
    _check(_load().emm_memory_info(int(device), ctypes.byref(free), ctypes.byref(total)))
    return free.value, total.value


def reset(device: int = -1) -> None:
    """Gives back what the manager keeps (a pool's free memory) on ``device`` (-1: all)."""
    _check(_load().emm_reset(int(device)))


def alloc(size: int, device: int = 0, stream: Any = None) -> int:
    """``size`` bytes of device memory (an int address); free with :func:`free`."""
    out = ctypes.c_void_p()
    _check(_load().emm_alloc(int(size), int(device), _stream_ptr(stream), ctypes.byref(out)))
    return out.value or 0


def free(ptr: int, stream: Any = None) -> None:
    """Frees what :func:`alloc` (or ``emm_*_alloc``) gave."""
    _check(_load().emm_free(ptr, _stream_ptr(stream)))
