//! emm-core's integration tests, one module per topic, in one test binary. Tests that change
//! process-wide state (the unified-memory switch and its variable, the plugin registry, the
//! current resource, an address-space limit) are test binaries of their own beside this one;
//! the loom model checks (`loom_sharded.rs`) build only with `--cfg loom`.

mod adaptor_aligned;
mod adaptor_failure_retry;
mod adaptor_limiting;
mod adaptor_logging;
mod adaptor_prefetch;
mod adaptor_rules;
mod adaptor_statistics;
mod adaptor_suite;
mod adaptor_thread_safe;
mod adaptor_tracking;
mod common;
mod containers;
mod contract_context;
mod contract_host_only;
mod contract_ipc;
mod contract_managers;
mod contract_pointers;
mod mr_cuda;
mod mr_oom_race;
mod mr_pool;
mod mr_pool_expandable;
mod mr_pool_release;
mod mr_pool_tight;
mod mr_resources;
mod mr_sharded_pool;
mod multi_gpu;
mod reinitialize;
mod reliability;
mod resource_suite;
mod unified_buffer;
mod unified_caching;
