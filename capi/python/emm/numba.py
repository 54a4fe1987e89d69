"""emm as Numba's External Memory Management (EMM) plugin.

``NUMBA_CUDA_MEMORY_MANAGER=emm.numba`` makes every Numba context allocate device memory
through emm (``_numba_memory_manager`` below), or ``numba.cuda.set_memory_manager(
emm.numba.EMMNumbaManager)`` before the first context. Host memory (pinned, mapped) stays with
``HostOnlyCUDAMemoryManager``, Numba's own implementation, as the EMM documentation recommends.

What ``defer_cleanup`` defers: Numba's own pending host deallocations (through ``super()``) and
emm's pending deallocations of the device's manager; a pool's device memory is reused at once
either way. ``reset`` frees every allocation of the context (Numba's rule) and gives the
manager's cached memory back to the driver.

Numba's interface includes IPC (``get_ipc_handle``), which needs memory ``cuIpcGetMemHandle``
exports; emm's default manager, ``pool-vmm-tight``, maps its memory with ``cuMemMap`` and cannot
export it. So the plugin asks for ``pool`` when it initializes, unless the program
(``emm.configure``) or ``EMM_MEMORY_MANAGER`` chose a manager: a process that uses Numba then
shares ``pool`` with its other libraries.
"""

from __future__ import annotations

import contextlib
import ctypes
import inspect
import weakref
from typing import Any, Iterator

from numba import cuda
from numba.cuda import HostOnlyCUDAMemoryManager, IpcHandle, MemoryPointer
from numba.cuda.cudadrv import driver as _driver

from emm import _lib

try:  # numba-cuda's NVIDIA-binding path (the default) takes CUdeviceptr / CUipcMemHandle.
    from cuda.bindings import driver as _binding
except ImportError:  # pragma: no cover - older cuda-python
    try:
        from cuda import cuda as _binding
    except ImportError:
        _binding = None

_USE_NV_BINDING = bool(getattr(_driver, "USE_NV_BINDING", _binding is not None)) and _binding is not None
_ManagedMemory = getattr(_driver, "ManagedMemory", MemoryPointer)
_MemoryInfo = getattr(_driver, "MemoryInfo", None) or getattr(cuda, "MemoryInfo")
# Numba-cuda versions differ on whether a pointer takes its context first.
_TAKES_CONTEXT = "context" in inspect.signature(MemoryPointer.__init__).parameters
_OOM = 2  # CUDA_ERROR_OUT_OF_MEMORY


def _device_pointer(addr):
    if _USE_NV_BINDING:
        return _binding.CUdeviceptr(int(addr))
    return ctypes.c_uint64(int(addr))


def _address(memory):
    value = getattr(memory, "device_pointer_value", None)
    if value is not None:
        return int(value)
    h = memory.handle
    return int(getattr(h, "value", h) or 0)


def _ipc_handle(raw):
    if _USE_NV_BINDING:
        h = _binding.CUipcMemHandle()
        h.reserved = raw
        return h
    return (ctypes.c_byte * _lib.IPC_HANDLE_SIZE).from_buffer_copy(raw)


class _Allocation:
    """Owns one emm allocation; freeing it (dropping the last reference) returns the memory."""

    __slots__ = ("addr", "keep", "__weakref__")

    def __init__(self, addr):
        self.addr = addr
        # The pointer object an owned view refers to weakly (managed memory), kept alive here.
        self.keep = None

    def free(self):
        addr, self.addr = self.addr, 0
        if addr:
            _lib.check(_lib.lib().emm_free(addr, None))

    def __del__(self):
        try:
            self.free()
        except Exception:  # noqa: BLE001 - never raise from a finalizer (interpreter exit)
            pass


def _finalizer(addr, owner, allocations):
    # A weak reference: after a reset (which clears `allocations` and so frees the memory) the
    # address may be handed out again, and this pointer's finalizer must not free the new
    # owner's memory.
    ref = weakref.ref(owner)

    def finalize():
        # At exit, Numba may already have reset the context (clearing `allocations`) before
        # weakref finalizers run: nothing is left to free then.
        if allocations and allocations.get(addr) is ref():
            allocations.pop(addr, None)

    return finalize


def _raise(status, message):
    if status == _lib.OUT_OF_MEMORY:
        # What Numba's own manager raises, so callers that catch it keep working.
        raise _driver.CudaAPIError(_OOM, message)
    raise _lib.error_for(status, message)


class EMMNumbaManager(HostOnlyCUDAMemoryManager):
    """Numba EMM plugin over emm's process-wide manager (interface version 1)."""

    def __init__(self, *args: Any, context: Any = None, **kwargs: Any):
        super().__init__(*args, context=context, **kwargs)

    @property
    def _device(self):
        # A context Numba made holds its Device (`.id`); one attached to a primary context a
        # third party made holds the binding's CUdevice, which converts to the ordinal.
        device = self.context.device
        ident = getattr(device, "id", None)
        return int(device if ident is None else ident)

    def initialize(self) -> None:
        # Idempotent: loads the library and makes the device's manager on first call only.
        # Numba's interface exports memory to other processes (get_ipc_handle), which needs
        # cuIpcGetMemHandle's memory: `pool`, unless the program or EMM_MEMORY_MANAGER chose.
        _lib.check(_lib.lib().emm_configure_if_unset(b"pool", None))
        free, total = ctypes.c_size_t(), ctypes.c_size_t()
        status = _lib.lib().emm_memory_info(self._device, ctypes.byref(free), ctypes.byref(total))
        if status != _lib.OK:
            _raise(status, _lib.last_error()[1])

    def _pointer(self, cls, addr, size, finalizer):
        ptr = _device_pointer(addr)
        if _TAKES_CONTEXT:
            return cls(self.context, ptr, size, finalizer=finalizer)
        return cls(ptr, size, finalizer=finalizer)

    def memalloc(self, size: int) -> Any:
        size = int(size)
        if size == 0:
            return self._pointer(MemoryPointer, 0, 0, None)
        out = ctypes.c_void_p()
        # No stream: memory usable on every stream (the v1 contract).
        status = _lib.lib().emm_alloc(size, self._device, None, ctypes.byref(out))
        if status != _lib.OK:
            _raise(status, _lib.last_error()[1])
        addr = out.value
        owner = self.allocations[addr] = _Allocation(addr)
        return self._pointer(MemoryPointer, addr, size, _finalizer(addr, owner, self.allocations))

    def memallocmanaged(self, size: int, attach_global: bool) -> Any:
        size = int(size)
        out = ctypes.c_void_p()
        status = _lib.lib().emm_managed_alloc(size, self._device, 1 if attach_global else 0, ctypes.byref(out))
        if status != _lib.OK:
            _raise(status, _lib.last_error()[1])
        addr = out.value
        owner = self.allocations[addr] = _Allocation(addr)
        mem = self._pointer(_ManagedMemory, addr, size, _finalizer(addr, owner, self.allocations))
        own = getattr(mem, "own", None)
        if own is None:
            return mem
        # As Numba's own manager: an owned view, which has the buffer protocol (NumPy wraps
        # managed memory through it) and frees the memory when the last view goes.
        owner.keep = mem
        return own()

    def get_memory_info(self) -> Any:
        free, total = ctypes.c_size_t(), ctypes.c_size_t()
        status = _lib.lib().emm_memory_info(self._device, ctypes.byref(free), ctypes.byref(total))
        if status != _lib.OK:
            _raise(status, _lib.last_error()[1])
        return _MemoryInfo(free=free.value, total=total.value)

    def get_ipc_handle(self, memory: Any) -> Any:
        raw = ctypes.create_string_buffer(_lib.IPC_HANDLE_SIZE)
        offset = ctypes.c_size_t()
        status = _lib.lib().emm_ipc_get_handle(_address(memory), int(memory.size), raw, ctypes.byref(offset))
        if status != _lib.OK:
            _raise(status, _lib.last_error()[1])
        source_info = self.context.device.get_device_identity()
        return IpcHandle(memory, _ipc_handle(raw.raw), memory.size, source_info, offset=offset.value)

    def reset(self) -> None:
        super().reset()
        _lib.check(_lib.lib().emm_reset(self._device))

    @contextlib.contextmanager
    def defer_cleanup(self) -> Iterator[None]:
        with super().defer_cleanup():
            token = ctypes.c_uint64()
            _lib.check(_lib.lib().emm_defer_cleanup_begin(self._device, ctypes.byref(token)))
            try:
                yield
            finally:
                _lib.check(_lib.lib().emm_defer_cleanup_end(token.value))

    @property
    def interface_version(self) -> int:
        return 1


# NUMBA_CUDA_MEMORY_MANAGER=emm.numba
_numba_memory_manager = EMMNumbaManager
