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


def memory_stats(device: int = 0) -> dict:
    """What emm knows of ``device``'s memory, under the names ``torch.cuda.memory_stats``
    uses (which raises for a pluggable allocator: "CUDAPluggableAllocator does not yet support
    getDeviceStats"): ``allocated_bytes.all.current`` / ``.peak`` / ``.allocated`` and
    ``allocation.all.current`` / ``.peak`` / ``.allocated`` through emm, and
    ``reserved_bytes.all.current``, the device memory the manager holds (only where the manager
    tracks it; emm's default does)."""
    import emm

    d = next(x for x in emm.stats()["devices"] if x["device"] == device)
    out = {
        "allocated_bytes.all.current": d["current_bytes"],
        "allocated_bytes.all.peak": d["peak_bytes"],
        "allocated_bytes.all.allocated": d["total_bytes"],
        "allocation.all.current": d["current_allocations"],
        "allocation.all.peak": d["peak_allocations"],
        "allocation.all.allocated": d["total_allocations"],
    }
    if d.get("held_bytes") is not None:
        out["reserved_bytes.all.current"] = d["held_bytes"]
    return out


@contextlib.contextmanager
def record_snapshot(path: str, max_entries: int = 10_000_000) -> Iterator[None]:
    """Records every CUDA allocation and free of the block with PyTorch's memory history and
    writes the snapshot to ``path`` on leaving (gzip-compressed when it ends in ``.gz``), for
    ``emm replay`` to replay against any of emm's resources::

        with emm.torch.record_snapshot("train.pickle.gz"):
            train(model, steps=20)

    It works under PyTorch's own allocators (emm need not be in use): the snapshot records what
    the program asked for, which is what a replay serves again. Stack traces are not kept
    (``context=None``), so the file stays small. Recording that was on before is turned off on
    leaving."""
    import gzip
    import pickle

    memory = torch.cuda.memory
    memory._record_memory_history(enabled="all", context=None, max_entries=max_entries)
    try:
        yield
    finally:
        snapshot = memory._snapshot()
        memory._record_memory_history(enabled=None)
        opener = gzip.open if str(path).endswith(".gz") else open
        with opener(path, "wb") as f:
            pickle.dump(snapshot, f)
