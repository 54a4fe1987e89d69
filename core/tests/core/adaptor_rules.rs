//! Every adaptor over `CudaResource` keeps the rules of `core/src/mr/mod.rs`: the generic suite
//! of `adaptor_suite` (RMM's resource tests) against each one, and against a deep chain.

use crate::adaptor_suite;

use std::sync::Arc;

use adaptor_suite::{assert_released, check_all, gpu, Alignment};
use emm_core::mr::{
    AlignedAdaptor, CudaResource, FailureRetryAdaptor, LimitingAdaptor, LoggingAdaptor,
    StatisticsAdaptor, TrackingAdaptor,
};
use emm_sim::{SimDriver, GIB};

fn cuda(g: &SimDriver) -> CudaResource<SimDriver> {
    CudaResource::new(g.clone())
}

#[test]
fn cuda_resource_itself() {
    let g = gpu();
    check_all(Arc::new(cuda(&g)), &g, Alignment::UpTo256);
    assert_released(&g);
}

#[test]
fn statistics_adaptor() {
    let g = gpu();
    let r = Arc::new(StatisticsAdaptor::new(cuda(&g)));
    check_all(Arc::clone(&r), &g, Alignment::UpTo256);
    let bytes = r.bytes_counter();
    assert_eq!(bytes.value, 0, "everything was freed");
    assert!(
        bytes.peak >= GIB as i64,
        "the 1 GiB block counted: {bytes:?}"
    );
    assert_released(&g);
}

#[test]
fn logging_adaptor() {
    let g = gpu();
    let r = Arc::new(LoggingAdaptor::new(cuda(&g), std::io::sink()));
    check_all(Arc::clone(&r), &g, Alignment::UpTo256);
    r.check().unwrap();
    assert_released(&g);
}

#[test]
fn limiting_adaptor() {
    let g = gpu();
    let r = Arc::new(LimitingAdaptor::new(cuda(&g), 4 * GIB));
    check_all(Arc::clone(&r), &g, Alignment::UpTo256);
    assert_eq!(r.allocated_bytes(), 0);
    assert_released(&g);
}

#[test]
fn tracking_adaptor() {
    let g = gpu();
    let r = Arc::new(TrackingAdaptor::new(cuda(&g), false));
    check_all(Arc::clone(&r), &g, Alignment::UpTo256);
    assert!(r.leak_report().is_empty(), "{}", r.leak_report());
    assert_released(&g);
}

#[test]
fn failure_retry_adaptor() {
    let g = gpu();
    let r = Arc::new(FailureRetryAdaptor::new(cuda(&g), |_: &_| false));
    check_all(r, &g, Alignment::UpTo256);
    assert_released(&g);
}

#[test]
fn aligned_adaptor() {
    let g = gpu();
    let r = Arc::new(AlignedAdaptor::new(cuda(&g)));
    check_all(Arc::clone(&r), &g, Alignment::Any);
    assert_eq!(r.shifted_count(), 0, "every shifted pointer was freed");
    assert_released(&g);
}

#[test]
fn a_chain_of_every_adaptor() {
    let g = gpu();
    let chain = StatisticsAdaptor::new(LoggingAdaptor::new(
        TrackingAdaptor::new(
            FailureRetryAdaptor::new(
                LimitingAdaptor::new(AlignedAdaptor::new(cuda(&g)), 4 * GIB),
                |_: &_| false,
            ),
            false,
        ),
        std::io::sink(),
    ));
    let r = Arc::new(chain);
    check_all(Arc::clone(&r), &g, Alignment::Any);
    assert_eq!(r.bytes_counter().value, 0);
    assert!(r.upstream().upstream().leak_report().is_empty());
    assert_released(&g);
}
