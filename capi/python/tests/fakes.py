"""Stand-ins for the parts of numba-cuda, CuPy and PyTorch that emm's modules touch, so that
their logic runs on the simulated GPU where those libraries are not installed. They follow the
real signatures (numba-cuda's ``MemoryPointer(context, pointer, size, owner=None,
finalizer=None)``, ``IpcHandle(base, handle, size, source_info=None, offset=0)``, CuPy's
``UnownedMemory(ptr, size, owner, device_id)``, PyTorch's ``CUDAPluggableAllocator(path,
alloc_fn_name, free_fn_name)``)."""

import collections
import contextlib
import ctypes
import sys
import types
import weakref


def install_numba():
    numba = types.ModuleType("numba")
    cuda = types.ModuleType("numba.cuda")
    cudadrv = types.ModuleType("numba.cuda.cudadrv")
    driver = types.ModuleType("numba.cuda.cudadrv.driver")

    class CudaAPIError(Exception):
        def __init__(self, code, msg):
            super().__init__(code, msg)
            self.code, self.msg = code, msg

    class MemoryPointer:
        def __init__(self, context, pointer, size, owner=None, finalizer=None):
            self.context, self.handle, self.size = context, pointer, size
            self.refct = 1
            self._finalizer = weakref.finalize(self, finalizer) if finalizer else None

        @property
        def device_pointer_value(self):
            return self.handle.value or None

        def free(self):
            if self._finalizer is not None:
                self._finalizer()

    class OwnedPointer:
        # numba-cuda's: refers to the memory weakly and frees it when the last view goes.
        def __init__(self, memptr):
            self._mem = memptr
            mem = self._mem

            def deref():
                try:
                    mem.refct -= 1
                    if mem.refct == 0:
                        mem.free()
                except ReferenceError:
                    pass

            self._mem.refct += 1
            weakref.finalize(self, deref)

        def __getattr__(self, name):
            return getattr(self._mem, name)

    class ManagedMemory(MemoryPointer):
        # An AutoFreePointer: no reference of its own, freed with its last owned view.
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.refct -= 1

        def own(self):
            return OwnedPointer(weakref.proxy(self))

    class IpcHandle:
        def __init__(self, base, handle, size, source_info=None, offset=0):
            self.base, self.handle, self.size = base, handle, size
            self.source_info, self.offset = source_info, offset

    class HostOnlyCUDAMemoryManager:
        def __init__(self, *args, **kwargs):
            if "context" not in kwargs:
                raise RuntimeError("Memory manager requires a context")
            self.context = kwargs.pop("context")
            self.allocations = {}
            self.deallocations = []
            self.deferred = 0

        def reset(self):
            self.allocations.clear()
            self.deallocations.clear()

        @contextlib.contextmanager
        def defer_cleanup(self):
            self.deferred += 1
            try:
                yield
            finally:
                self.deferred -= 1

    driver.USE_NV_BINDING = False
    driver.CudaAPIError = CudaAPIError
    driver.ManagedMemory = ManagedMemory
    driver.OwnedPointer = OwnedPointer
    driver.MemoryInfo = collections.namedtuple("MemoryInfo", "free total")
    cuda.HostOnlyCUDAMemoryManager = HostOnlyCUDAMemoryManager
    cuda.MemoryPointer = MemoryPointer
    cuda.IpcHandle = IpcHandle
    cuda.cudadrv = cudadrv
    cudadrv.driver = driver
    numba.cuda = cuda
    sys.modules.update(
        {"numba": numba, "numba.cuda": cuda, "numba.cuda.cudadrv": cudadrv, "numba.cuda.cudadrv.driver": driver}
    )
    # Keep the fake from pretending to have NVIDIA's bindings.
    sys.modules["cuda"] = None

    class Device:
        def __init__(self, id):
            self.id = id

        def get_device_identity(self):
            return {"pci_bus_id": self.id}

    class CUdevice:
        # NVIDIA's binding type: what a context attached to a third party's primary context
        # holds instead of a Device; it has no `.id` but converts to the ordinal.
        def __init__(self, ordinal):
            self._ordinal = ordinal

        def __int__(self):
            return self._ordinal

    class Context:
        def __init__(self, device, attached=False):
            self.device = CUdevice(device) if attached else Device(device)

    return Context


def _c_glue(memory, stream_ptr, glue):
    """CuPy's C-level allocator as its Cython glue calls it: ``CFunctionAllocator`` calls
    ``malloc(param, size, device)`` with the GIL held and, when ``glue`` is "propagating", lets
    an exception raised there reach the caller; a "lossy" glue returns anyway, which CPython
    turns into a SystemError. ``cupy.cuda.stream.__pyx_capi__`` exports the current stream."""
    calls = {"current_stream": 0}

    def current():
        calls["current_stream"] += 1
        return stream_ptr

    current_fn = ctypes.CFUNCTYPE(ctypes.c_ssize_t)(current)
    name = b"intptr_t (void)"
    new_capsule = ctypes.pythonapi.PyCapsule_New
    new_capsule.restype = ctypes.py_object
    new_capsule.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
    capsule = new_capsule(ctypes.cast(current_fn, ctypes.c_void_p), name, None)
    stream = types.ModuleType("cupy.cuda.stream")
    stream.__pyx_capi__ = {"get_current_stream_ptr": capsule}
    stream._keep = (current_fn, name)

    class CMemory:
        def __init__(self, ptr, size, free, param):
            self.ptr, self.size, self._free, self._param = ptr, size, free, param

        def __del__(self):
            if self.ptr:
                self._free(self._param, self.ptr, 0)

    class CFunctionAllocator:
        def __init__(self, param, malloc_func, free_func, owner):
            self._param, self._owner = param, owner
            self._malloc = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)(malloc_func)
            self._free = ctypes.PYFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int)(free_func)

        def malloc(self, size):
            try:
                ptr = self._malloc(self._param, size, 0)
            except Exception as e:
                if glue == "lossy":
                    raise SystemError("<method 'malloc'> returned a result with an exception set") from e
                raise
            return memory.MemoryPointer(CMemory(ptr or 0, size, self._free, self._param), 0)

    memory.CFunctionAllocator = CFunctionAllocator
    return stream, calls


def install_cupy(stream_ptr=0, glue=None):
    cupy = types.ModuleType("cupy")
    cuda = types.ModuleType("cupy.cuda")
    memory = types.ModuleType("cupy.cuda.memory")
    runtime = types.ModuleType("cupy.cuda.runtime")

    class OutOfMemoryError(MemoryError):
        def __init__(self, size, total, limit=0):
            super().__init__("Out of memory allocating %d bytes (allocated so far: %d bytes)" % (size, total))

    class UnownedMemory:
        def __init__(self, ptr, size, owner, device_id=-1):
            self.ptr, self.size, self._owner, self.device_id = ptr, size, owner, device_id

    class MemoryPointer:
        def __init__(self, mem, offset):
            self.mem, self.ptr = mem, mem.ptr + offset

    class Stream:
        ptr = stream_ptr

    state = {"allocator": None}
    memory.OutOfMemoryError = OutOfMemoryError
    runtime.getDevice = lambda: 0
    cuda.memory = memory
    cuda.runtime = runtime
    cuda.UnownedMemory = UnownedMemory
    cuda.MemoryPointer = MemoryPointer
    cuda.get_current_stream = lambda: Stream()
    cuda.set_allocator = lambda a: state.__setitem__("allocator", a)
    cupy.cuda = cuda
    cupy.get_default_memory_pool = lambda: types.SimpleNamespace(malloc="cupy-pool")
    memory.MemoryPointer = MemoryPointer
    sys.modules.update({"cupy": cupy, "cupy.cuda": cuda, "cupy.cuda.memory": memory, "cupy.cuda.runtime": runtime})
    sys.modules.pop("cupy.cuda.stream", None)
    if glue is not None:
        stream, calls = _c_glue(memory, stream_ptr, glue)
        cuda.stream = stream
        sys.modules["cupy.cuda.stream"] = stream
        state["calls"] = calls
    return state


def install_torch(already_initialized=False):
    torch = types.ModuleType("torch")
    cuda = types.ModuleType("torch.cuda")
    memory = types.ModuleType("torch.cuda.memory")
    state = {"changed": None, "initialized": already_initialized}

    class OutOfMemoryError(RuntimeError):
        pass

    class CUDAPluggableAllocator:
        def __init__(self, path_to_so_file, alloc_fn_name, free_fn_name):
            lib = ctypes.CDLL(path_to_so_file)
            self.alloc = getattr(lib, alloc_fn_name)
            self.free = getattr(lib, free_fn_name)

    def change_current_allocator(allocator):
        if state["initialized"]:
            raise RuntimeError("Can't swap an already initialized allocator")
        state["changed"] = allocator
        state["initialized"] = True

    def _record_memory_history(enabled="all", context="all", max_entries=None):
        state["recording"] = enabled
        if enabled:
            state["trace"] = []

    def _snapshot():
        return {"segments": [], "device_traces": [list(state.get("trace", []))]}

    memory.CUDAPluggableAllocator = CUDAPluggableAllocator
    memory.change_current_allocator = change_current_allocator
    memory._record_memory_history = _record_memory_history
    memory._snapshot = _snapshot
    cuda.memory = memory
    cuda.OutOfMemoryError = OutOfMemoryError
    torch.cuda = cuda
    torch.float32 = "float32"
    sys.modules.update({"torch": torch, "torch.cuda": cuda, "torch.cuda.memory": memory})
    return state
