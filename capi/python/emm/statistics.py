"""Allocation statistics over a block of code, as ``rmm.statistics``.

``with emm.statistics.statistics() as s: ...`` counts what the block allocated through emm
(every device, or one with ``device=``): ``s`` holds the figures when the block ends, and
:func:`get_statistics` gives them while it runs. Blocks nest; each counts from its own start.
:func:`profiler` records such figures per function or named block in :data:`default_profiler_records`.

The figures come from emm's process-wide statistics (:func:`emm.stats`): ``total_*`` counts
allocations made, ``current_*`` what the block left live (negative when it freed more than it
allocated), ``peak_*`` the most live at once above the block's start. A block's peak restarts
emm's peak figures (:func:`emm.reset_peak_stats`) when it starts; enclosing blocks keep theirs.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import threading
from typing import Any, Callable, Dict, Iterator, List, Optional, TypeVar

import emm

__all__ = [
    "ProfilerRecords",
    "Statistics",
    "default_profiler_records",
    "get_statistics",
    "pop_statistics",
    "profiler",
    "push_statistics",
    "statistics",
]

F = TypeVar("F", bound=Callable[..., Any])


@dataclasses.dataclass
class Statistics:
    """Bytes and allocations counted over a block (``rmm.statistics.Statistics``'s fields)."""

    current_bytes: int = 0
    current_count: int = 0
    peak_bytes: int = 0
    peak_count: int = 0
    total_bytes: int = 0
    total_count: int = 0


class _Frame:
    """One open block: emm's figures at its start and the highest peaks seen since."""

    def __init__(self, devices: List[Dict[str, int]], device: Optional[int]):
        self.device = device
        self.start = devices
        # Peaks are measured from the start's live figures (reset_peak_stats restarts them there).
        self.peak_bytes = [d["current_bytes"] for d in devices]
        self.peak_count = [d["current_allocations"] for d in devices]

    def observe(self, devices: List[Dict[str, int]]) -> None:
        for i, d in enumerate(devices[: len(self.start)]):
            self.peak_bytes[i] = max(self.peak_bytes[i], d["peak_bytes"])
            self.peak_count[i] = max(self.peak_count[i], d["peak_allocations"])

    def figures(self, devices: List[Dict[str, int]]) -> Statistics:
        s = Statistics()
        for i, (now, start) in enumerate(zip(devices, self.start)):
            if self.device is not None and now["device"] != self.device:
                continue
            s.current_bytes += now["current_bytes"] - start["current_bytes"]
            s.current_count += now["current_allocations"] - start["current_allocations"]
            s.total_bytes += now["total_bytes"] - start["total_bytes"]
            s.total_count += now["total_allocations"] - start["total_allocations"]
            s.peak_bytes += self.peak_bytes[i] - start["current_bytes"]
            s.peak_count += self.peak_count[i] - start["current_allocations"]
        return s


_lock = threading.Lock()
_frames: List[_Frame] = []


def _devices() -> List[Dict[str, int]]:
    return emm.stats()["devices"]


def push_statistics(device: Optional[int] = None) -> None:
    """Starts counting (on ``device``, or every device when None) until :func:`pop_statistics`."""
    with _lock:
        now = _devices()
        for f in _frames:
            f.observe(now)
        emm.reset_peak_stats()
        _frames.append(_Frame(now, device))


def pop_statistics() -> Statistics:
    """Stops the innermost count and returns its figures; raises ``RuntimeError`` when none is open."""
    with _lock:
        if not _frames:
            raise RuntimeError("emm.statistics.pop_statistics: no statistics were pushed")
        now = _devices()
        for f in _frames:
            f.observe(now)
        return _frames.pop().figures(now)


def get_statistics() -> Optional[Statistics]:
    """The innermost open count's figures so far, or None when no count is open."""
    with _lock:
        if not _frames:
            return None
        now = _devices()
        for f in _frames:
            f.observe(now)
        return _frames[-1].figures(now)


@contextlib.contextmanager
def statistics(device: Optional[int] = None) -> Iterator[Statistics]:
    """Counts what the block allocates; the yielded :class:`Statistics` is filled when it ends."""
    result = Statistics()
    push_statistics(device)
    try:
        yield result
    finally:
        final = pop_statistics()
        for field in dataclasses.fields(Statistics):
            setattr(result, field.name, getattr(final, field.name))


class ProfilerRecords:
    """Figures per profiled name: calls, and the sums and maxima of what each call counted."""

    @dataclasses.dataclass
    class Record:
        """What the calls under one name counted."""

        num_calls: int = 0
        total_bytes: int = 0
        total_count: int = 0
        peak_bytes: int = 0

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.records: Dict[str, ProfilerRecords.Record] = {}

    def add(self, name: str, stats: Statistics) -> None:
        """Adds one call's figures under ``name``."""
        with self._lock:
            r = self.records.setdefault(name, ProfilerRecords.Record())
            r.num_calls += 1
            r.total_bytes += stats.total_bytes
            r.total_count += stats.total_count
            r.peak_bytes = max(r.peak_bytes, stats.peak_bytes)

    def report(self) -> str:
        """A table of the records, largest total first."""
        with self._lock:
            rows = sorted(self.records.items(), key=lambda kv: -kv[1].total_bytes)
            lines = ["%-40s %8s %14s %10s %14s" % ("name", "calls", "total bytes", "allocs", "peak bytes")]
            for name, r in rows:
                lines.append(
                    "%-40s %8d %14d %10d %14d" % (name, r.num_calls, r.total_bytes, r.total_count, r.peak_bytes)
                )
            return "\n".join(lines)


default_profiler_records = ProfilerRecords()


class profiler(contextlib.ContextDecorator):  # noqa: N801 - named as rmm.statistics.profiler
    """Records the statistics of a function (as a decorator; the name defaults to its
    qualified name) or of a ``with`` block (``name`` required) into ``records``."""

    def __init__(self, name: Optional[str] = None, records: Optional[ProfilerRecords] = None):
        self.name = name
        self.records = default_profiler_records if records is None else records

    def __call__(self, func: F) -> F:  # type: ignore[override]
        name = self.name or "%s.%s" % (func.__module__, func.__qualname__)
        records = self.records

        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with statistics() as s:
                result = func(*args, **kwargs)
            records.add(name, s)
            return result

        return wrapper  # type: ignore[return-value]

    def __enter__(self) -> "profiler":
        if self.name is None:
            raise ValueError("emm.statistics.profiler as a with block needs a name")
        push_statistics()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.records.add(self.name or "", pop_statistics())
