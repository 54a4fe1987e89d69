"""emm as CuPy's allocator: the module :mod:`emm.cupy` itself, under RMM's name."""

import sys

from emm import cupy as _module

# The import system hands back what sys.modules holds once the module has run, so importing
# this name yields emm.cupy itself rather than a copy of its names.
sys.modules[__name__] = _module
