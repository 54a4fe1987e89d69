"""emm's framework allocators under RMM's layout (``rmm.allocators.numba`` / ``.cupy`` /
``.torch``): ``emm.allocators.numba`` is :mod:`emm.numba`, ``emm.allocators.cupy`` is
:mod:`emm.cupy`, ``emm.allocators.torch`` is :mod:`emm.torch` (the same module objects, so
state such as PyTorch's installed allocator is shared). Each imports its framework on first use.
"""
