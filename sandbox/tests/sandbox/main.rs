//! emm-sandbox's integration tests, one module per topic, in one test binary. The gate's
//! environment variables are read process-wide, so their test (`gate_env.rs`) is a binary of its own.

mod abi_mirror;
mod common;
mod examples;
mod gate;
mod gate_store_safety;
mod hostile;
mod stream_order;
