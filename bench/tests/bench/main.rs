//! emm-bench's integration tests, one module per topic, in one test binary.

mod adaptor_chain;
mod adaptor_replay;
mod bench_harness;
mod pool_workloads;
mod segment_unmap;
mod sharded_pool;
