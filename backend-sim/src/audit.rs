//! [`Audit`]: what a test sets on the machine and reads back from it, an owned part of the
//! state: the faults injected into its calls (each with its counter), the violations its checks
//! found, and the trace of its calls. The checks themselves need the memory and the streams and
//! live with the operations; this part only keeps what they conclude.

use emm_core::CudaCode;

use crate::config::Fault;
use crate::report::Violation;
use crate::trace::{CallKind, Trace, TraceEvent};

/// The injected faults, the violations found and the call trace.
#[derive(Debug)]
pub(crate) struct Audit {
    /// Every violation seen, in order.
    pub(crate) violations: Vec<Violation>,
    /// The faults in force, each with the number of calls it has counted (`FailNth`).
    pub(crate) faults: Vec<(Fault, u64)>,
    /// The call trace and its hash.
    pub(crate) trace: Trace,
}

impl Audit {
    /// No violation yet, `faults` in force, a trace that keeps its events when `keep_trace`.
    pub(crate) fn new(faults: &[Fault], keep_trace: bool) -> Self {
        Audit {
            violations: Vec::new(),
            faults: faults.iter().cloned().map(|f| (f, 0)).collect(),
            trace: Trace::new(keep_trace),
        }
    }

    /// Records a violation.
    #[cold]
    pub(crate) fn violate(&mut self, v: Violation) {
        self.violations.push(v);
    }

    /// Appends one call to the trace.
    #[inline]
    pub(crate) fn trace(&mut self, event: TraceEvent) {
        self.trace.push(event);
    }

    /// The injected failure for this call, if any; `random` draws from the machine's random
    /// source (only `Random` faults draw, so the draws stay the same for the same calls). A
    /// fired `FailNth` is spent.
    pub(crate) fn injected_fault(
        &mut self,
        call: CallKind,
        mut random: impl FnMut() -> u64,
    ) -> Option<CudaCode> {
        if self.faults.is_empty() {
            return None;
        }
        let mut fired = None;
        let mut spent = None;
        for i in 0..self.faults.len() {
            match self.faults[i].0.clone() {
                Fault::FailNth {
                    call: which,
                    nth,
                    code,
                } => {
                    if which.is_none_or(|k| k == call) {
                        self.faults[i].1 += 1;
                        if self.faults[i].1 == nth && fired.is_none() {
                            fired = Some(code);
                            spent = Some(i);
                        }
                    }
                }
                Fault::Random {
                    calls,
                    per_million,
                    code,
                } => {
                    let applies = calls.is_empty() || calls.contains(&call);
                    if applies && random() % 1_000_000 < u64::from(per_million) && fired.is_none() {
                        fired = Some(code);
                    }
                }
                Fault::OutOfMemoryAbove { .. } => {}
            }
        }
        if let Some(i) = spent {
            self.faults.remove(i);
        }
        fired
    }

    /// The most device memory usable on a device of `total` bytes numbered `device`, under the
    /// injected out-of-memory levels.
    pub(crate) fn device_limit(&self, device: u32, total: u64) -> u64 {
        let mut limit = total;
        for (f, _) in &self.faults {
            if let Fault::OutOfMemoryAbove {
                device: which,
                bytes,
            } = f
            {
                if which.is_none_or(|d| d.0 == device) {
                    limit = limit.min(*bytes);
                }
            }
        }
        limit
    }
}
