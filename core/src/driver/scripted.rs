//! [`ScriptedDriver`]: a [`Driver`] for unit tests where the exact order and number of driver
//! calls is the rule. It answers a script of expected calls, one after the other, and notes
//! every call the script did not expect; [`ScriptedDriver::assert_done`] fails the test on any
//! such call and on any expected call not made.
//!
//! A call is written as its method name and its arguments' `Debug` forms,
//! `mem_alloc(1024)`; calls answered [`ScriptedDriver::always`] (the current context, the
//! device's free memory) may come at any time and are not part of the script.

use std::any::Any;
use std::collections::VecDeque;
use std::sync::{Mutex, MutexGuard};

use super::*;
use crate::error::{CudaCode, DriverError};

type Answer = Box<dyn Any + Send>;
/// Makes the answer of a method answered whenever called.
type Always = Box<dyn Fn() -> Answer + Send>;

/// A test driver that answers a script of expected calls in order.
#[derive(Default)]
pub(crate) struct ScriptedDriver {
    script: Mutex<Script>,
}

#[derive(Default)]
struct Script {
    /// Expected calls not yet made, each with its answer.
    steps: VecDeque<(String, Answer)>,
    /// Methods answered whenever called, outside the script.
    always: Vec<(&'static str, Always)>,
    /// The expected calls made, in order.
    made: Vec<String>,
    /// Calls the script did not expect, each with what it expected instead.
    unexpected: Vec<String>,
}

/// What a method answers a call the script did not expect.
trait Unexpected {
    fn unexpected(call: &'static str) -> Self;
}

impl<T> Unexpected for DriverResult<T> {
    fn unexpected(call: &'static str) -> Self {
        Err(DriverError::new(
            call,
            CudaCode::NOT_SUPPORTED,
            "scripted driver: a call the script did not expect",
        ))
    }
}

impl Unexpected for &'static str {
    fn unexpected(_: &'static str) -> Self {
        "scripted"
    }
}

impl Unexpected for u64 {
    fn unexpected(_: &'static str) -> Self {
        0
    }
}

impl Unexpected for () {
    fn unexpected(_: &'static str) -> Self {}
}

impl Unexpected for bool {
    fn unexpected(_: &'static str) -> Self {
        false
    }
}

impl ScriptedDriver {
    fn lock(&self) -> MutexGuard<'_, Script> {
        self.script.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Answers every call of the method `name` with `answer()`, at any time.
    pub(crate) fn always<R: Any + Send>(
        self,
        name: &'static str,
        answer: impl Fn() -> R + Send + 'static,
    ) -> Self {
        self.lock()
            .always
            .push((name, Box::new(move || Box::new(answer()))));
        self
    }

    /// Expects `call` (`name(args)`, the arguments in their `Debug` form) after the calls
    /// already expected, and answers it with `answer`.
    pub(crate) fn expect<R: Any + Send>(&self, call: impl Into<String>, answer: R) {
        self.lock().steps.push_back((call.into(), Box::new(answer)));
    }

    /// How many expected calls of the method `name` were made.
    pub(crate) fn made(&self, name: &str) -> usize {
        self.lock()
            .made
            .iter()
            .filter(|c| c.split('(').next() == Some(name))
            .count()
    }

    /// Fails unless every expected call was made, in order, and no other.
    pub(crate) fn assert_done(&self) {
        let s = self.lock();
        assert!(
            s.unexpected.is_empty(),
            "calls the script did not expect: {:#?}",
            s.unexpected
        );
        let left: Vec<_> = s.steps.iter().map(|(c, _)| c).collect();
        assert!(left.is_empty(), "expected calls not made: {left:#?}");
    }

    fn answer<R: Any + Unexpected>(&self, name: &'static str, call: String) -> R {
        let mut s = self.lock();
        let answer = if s.steps.front().is_some_and(|(next, _)| *next == call) {
            let (call, answer) = s.steps.pop_front().expect("a step was just seen");
            s.made.push(call);
            answer
        } else if let Some((_, f)) = s.always.iter().find(|(n, _)| *n == name) {
            f()
        } else {
            let expected = s
                .steps
                .front()
                .map_or_else(|| "nothing".to_owned(), |(c, _)| c.clone());
            s.unexpected.push(format!("{call} (expected {expected})"));
            return R::unexpected(name);
        };
        match answer.downcast::<R>() {
            Ok(r) => *r,
            Err(_) => panic!("the script answers {name} with a value of another type"),
        }
    }
}

/// Every method answers from the script.
macro_rules! scripted_calls {
    ($($class:ident $name:ident($($arg:ident: $ty:ty),*) -> $ret:ty;)*) => {
        impl Driver for ScriptedDriver {
            $(
                fn $name(&self, $($arg: $ty),*) -> $ret {
                    let args: Vec<String> = vec![$(format!("{:?}", $arg)),*];
                    self.answer(stringify!($name), format!("{}({})", stringify!($name), args.join(", ")))
                }
            )*
        }
    };
}

with_driver_methods!(scripted_calls);

#[test]
fn calls_in_order_pass_and_any_other_call_fails_the_script() {
    let d = ScriptedDriver::default().always("current_context", || DriverResult::Ok(ContextId(1)));
    d.expect("mem_alloc(64)", DriverResult::Ok(DevicePtr(0x1000)));
    d.expect(
        format!("mem_free({:?})", DevicePtr(0x1000)),
        DriverResult::Ok(()),
    );
    assert_eq!(d.current_context(), Ok(ContextId(1)));
    assert_eq!(d.mem_alloc(64), Ok(DevicePtr(0x1000)));
    assert_eq!(d.mem_free(DevicePtr(0x1000)), DriverResult::Ok(()));
    assert_eq!(d.made("mem_alloc"), 1);
    d.assert_done();
    // Out of order, and a call never expected: each refused and noted.
    d.expect(
        format!("mem_free({:?})", DevicePtr(0x2000)),
        DriverResult::Ok(()),
    );
    assert!(d.mem_alloc(64).is_err());
    let caught = std::panic::catch_unwind(|| d.assert_done());
    assert!(caught.is_err(), "an unexpected call fails the script");
    // An expected call never made fails it too.
    let d = ScriptedDriver::default();
    d.expect("mem_alloc(64)", DriverResult::Ok(DevicePtr(0x1000)));
    let caught = std::panic::catch_unwind(|| d.assert_done());
    assert!(caught.is_err(), "a call not made fails the script");
}
