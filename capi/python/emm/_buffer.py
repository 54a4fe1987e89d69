"""``emm.DeviceBuffer``: untyped device memory from emm's manager, as ``rmm.DeviceBuffer``."""

from __future__ import annotations

import ctypes
from typing import Any, Dict, Tuple

from emm._lib import check, lib, stream_ptr


class DeviceBuffer:
    """``size`` bytes of uninitialized device memory on ``device``, on ``stream`` (an int
    handle, None for the default stream, or a CuPy/PyTorch/Numba stream object). Freed when
    the object goes (or by :meth:`close`). Exposes ``__cuda_array_interface__`` (bytes, 1-D),
    so CuPy, Numba and PyTorch can view it without a copy."""

    __slots__ = ("_handle", "_device", "_stream", "__weakref__")

    def __init__(self, size: int = 0, stream: Any = None, device: int = 0, *, _data: Any = None):
        self._handle = 0
        self._device = int(device)
        self._stream = stream_ptr(stream)
        size = int(size)
        if size < 0:
            raise ValueError("size %d is negative" % size)
        data = None
        if _data is not None:
            data = bytes(_data)
        h = ctypes.c_uint64()
        check(lib().emm_device_buffer_new(data, size, self._device, self._stream, ctypes.byref(h)))
        self._handle = h.value

    @classmethod
    def to_device(cls, data: Any, stream: Any = None, device: int = 0) -> "DeviceBuffer":
        """A buffer holding a copy of ``data`` (bytes, bytearray, memoryview, a NumPy array)."""
        mv = memoryview(data).cast("B")
        raw = mv.tobytes()
        return cls(len(raw), stream=stream, device=device, _data=raw)

    def _info(self) -> Tuple[int, int]:
        size, ptr = ctypes.c_size_t(), ctypes.c_void_p()
        check(lib().emm_device_buffer_info(self._handle, ctypes.byref(size), ctypes.byref(ptr)))
        return size.value, ptr.value or 0

    @property
    def size(self) -> int:
        """Bytes in the buffer."""
        return self._info()[0]

    nbytes = size

    @property
    def ptr(self) -> int:
        """The device address (0 for an empty buffer)."""
        return self._info()[1]

    @property
    def device(self) -> int:
        """The device ordinal."""
        return self._device

    def __len__(self) -> int:
        return self.size

    def tobytes(self, stream: Any = None) -> bytes:
        """The contents as bytes (after the work on ``stream``; default: the buffer's)."""
        n = self.size
        out = ctypes.create_string_buffer(n)
        s = self._stream if stream is None else stream_ptr(stream)
        check(lib().emm_device_buffer_copy_to_host(self._handle, 0, out, n, s))
        return out.raw

    def copy_to_host(self, stream: Any = None) -> bytearray:
        """The contents as a bytearray."""
        return bytearray(self.tobytes(stream))

    def copy_from_host(self, data: Any, offset: int = 0) -> None:
        """Copies ``data`` into the buffer at ``offset``."""
        raw = memoryview(data).cast("B").tobytes()
        check(lib().emm_device_buffer_copy_from_host(self._handle, int(offset), raw, len(raw)))

    def resize(self, size: int, stream: Any = None) -> None:
        """Resizes to ``size`` bytes, keeping the contents that fit (unchanged on failure)."""
        s = self._stream if stream is None else stream_ptr(stream)
        check(lib().emm_device_buffer_resize(self._handle, int(size), s))

    @property
    def __cuda_array_interface__(self) -> Dict[str, Any]:
        size, ptr = self._info()
        return {
            "shape": (size,),
            "strides": None,
            "typestr": "|u1",
            "data": (ptr, False),
            "version": 3,
            # The buffer's stream (None: the legacy default stream, which needs no sync).
            "stream": self._stream or None,
        }

    def close(self) -> None:
        """Frees the memory now."""
        h, self._handle = self._handle, 0
        if h:
            check(lib().emm_device_buffer_free(h))

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - never raise from a finalizer (interpreter exit)
            pass

    def __repr__(self) -> str:
        return "<emm.DeviceBuffer size=%d ptr=%#x device=%d>" % (self.size, self.ptr, self._device)
