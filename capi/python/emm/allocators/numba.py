"""emm as Numba's EMM plugin (``NUMBA_CUDA_MEMORY_MANAGER=emm.allocators.numba``): the module
:mod:`emm.numba` itself, under RMM's name."""

import sys

from emm import numba as _module

# The import system hands back what sys.modules holds once the module has run, so importing
# this name yields emm.numba itself rather than a copy of its names.
sys.modules[__name__] = _module
