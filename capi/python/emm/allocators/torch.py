"""emm as PyTorch's CUDA allocator: the module :mod:`emm.torch` itself, under RMM's name."""

import sys

from emm import torch as _module

# The import system hands back what sys.modules holds once the module has run, so importing
# this name yields emm.torch itself rather than a copy of its names.
sys.modules[__name__] = _module
