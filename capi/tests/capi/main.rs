//! emm-capi's integration tests (the C ABI, the header, the Python package), one module per
//! topic, in one test binary.

mod c_abi;
mod header;
mod python;
