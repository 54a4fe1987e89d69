"""The package's version: the emm-capi crate's (a test in capi/tests/capi/python.rs keeps them equal)."""

__version__ = "0.1.0"
