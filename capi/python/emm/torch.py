"""emm as PyTorch's CUDA allocator: ``emm.torch.use_emm()`` before the first CUDA tensor.

It loads ``emm_torch_alloc`` / ``emm_torch_free`` from ``libemm.so`` through
``torch.cuda.memory.CUDAPluggableAllocator`` and ``change_current_allocator``. PyTorch calls
them with the tensor's device and current stream; emm allocates on exactly that device and
stream.

Out of memory: PyTorch's pluggable allocator has no error path (a null pointer comes back as
a tensor; pytorch/pytorch#133280), and a C ABI cannot throw a C++ exception. So emm returns
NULL and records the error: :func:`check` (or the :func:`raise_on_oom` context manager) turns
it into ``torch.cuda.OutOfMemoryError``; :func:`empty` allocates through emm and raises at once.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

import torch

from emm import _lib

_allocator = None


class AllocatorError(RuntimeError):
    """``use_emm`` was called too late, or PyTorch refused the allocator."""


def use_emm() -> Any:
    """Makes emm PyTorch's CUDA allocator. Must come before PyTorch's own allocator serves a
    CUDA tensor; raises :class:`AllocatorError` otherwise. Calling it again is harmless."""
    global _allocator
    if _allocator is not None:
        return _allocator
    path = _lib.library_path()
    _lib.lib()  # the ABI version check, before PyTorch loads the same file
    alloc = torch.cuda.memory.CUDAPluggableAllocator(path, "emm_torch_alloc", "emm_torch_free")
    try:
        torch.cuda.memory.change_current_allocator(alloc)
    except RuntimeError as e:
        raise AllocatorError(
            "emm.torch.use_emm() came too late: PyTorch's CUDA allocator already served an "
            "allocation in this process (%s). Call it at start-up, before the first CUDA tensor "
            "(import emm.torch; emm.torch.use_emm() at the top of the program)." % e
        ) from e
    _allocator = alloc
    return alloc


def in_use() -> bool:
    """Whether :func:`use_emm` made emm PyTorch's allocator."""
    return _allocator is not None


def check() -> None:
    """Raises ``torch.cuda.OutOfMemoryError`` (or ``emm.EmmError``) if an emm allocation on
    this thread failed since the last check, and forgets the failure."""
    status, message = _lib.last_error()
    if status == _lib.OK:
        return
    _lib.lib().emm_clear_last_error()
    if status == _lib.OUT_OF_MEMORY:
        raise torch.cuda.OutOfMemoryError("emm: " + message)
    raise _lib.error_for(status, message)


@contextlib.contextmanager
def raise_on_oom() -> Iterator[None]:
    """Runs the block and then :func:`check`: an emm allocation that failed inside it raises
    ``torch.cuda.OutOfMemoryError`` on leaving."""
    _lib.lib().emm_clear_last_error()
    yield
    check()


def empty(*size: int, dtype: Any = torch.float32, device: Any = None) -> Any:
    """``torch.empty`` on CUDA that raises ``torch.cuda.OutOfMemoryError`` at once when emm
    cannot serve it (instead of handing back a tensor without memory)."""
    _lib.lib().emm_clear_last_error()
    t = torch.empty(*size, dtype=dtype, device=device or "cuda")
    if t.numel() and t.data_ptr() == 0:
        check()
    return t
