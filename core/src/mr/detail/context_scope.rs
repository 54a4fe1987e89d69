//! [`ContextScope`]: makes a resource's own context current for the driver calls of one slow
//! path, and restores the caller's context after.
//!
//! `cuMemAlloc`, `cuMemCreate`, events and `cuCtxSynchronize` act on the calling thread's
//! current context. A resource built for device N and then used from a thread whose current
//! context is device 0's would otherwise grow on device 0 and record events in the wrong
//! context (rmm#1405). Resources capture the context current when they are built and enter a
//! scope around every path that calls the driver; the fast paths call none and pay nothing.

use crate::driver::{ContextId, Driver};

/// While alive, the resource's context is current; dropping it restores the caller's.
pub(crate) struct ContextScope<'a> {
    driver: &'a dyn Driver,
    restore: Option<ContextId>,
}

impl<'a> ContextScope<'a> {
    /// Makes `ctx` current on this thread if another context is (one `cuCtxGetCurrent`, plus
    /// two `cuCtxSetCurrent` when it switches). `None`, or a failed switch, changes nothing.
    pub(crate) fn enter(driver: &'a dyn Driver, ctx: Option<ContextId>) -> Self {
        let mut restore = None;
        if let Some(ctx) = ctx {
            match driver.current_context() {
                Ok(cur) if cur == ctx => {}
                cur => {
                    if driver.set_current_context(ctx).is_ok() {
                        // With no context current before, leave this one current.
                        restore = cur.ok();
                    }
                }
            }
        }
        ContextScope { driver, restore }
    }
}

impl Drop for ContextScope<'_> {
    fn drop(&mut self) {
        if let Some(c) = self.restore.take() {
            // A failure leaves the resource's context current: nothing to report to here.
            let _ = self.driver.set_current_context(c);
        }
    }
}
