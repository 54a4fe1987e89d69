//! Caller tags: which layer of emm (a manager, a resource, a plugin) is calling the driver.
//!
//! A layer enters a [`CallerScope`] around its driver calls; a backend that logs calls (the
//! simulator does) reads [`current_caller`] to attribute each one. The tag is per thread, so
//! concurrent layers on different threads never see each other's tags. This is how a test
//! proves that, with a plugin in use, nothing but the plugin allocated device memory.

use std::cell::Cell;

/// The tag used when no scope is active.
pub const UNATTRIBUTED: &str = "user";

thread_local! {
    static CALLER: Cell<&'static str> = const { Cell::new(UNATTRIBUTED) };
}

/// The caller tag of the innermost active [`CallerScope`] on this thread.
#[inline]
pub fn current_caller() -> &'static str {
    CALLER.with(Cell::get)
}

/// While alive, driver calls made on this thread are attributed to `tag`. Scopes nest: dropping
/// one restores the tag that was active when it was entered.
#[must_use = "the tag is active only while the scope is alive"]
#[derive(Debug)]
pub struct CallerScope {
    previous: &'static str,
}

impl CallerScope {
    /// Attributes this thread's driver calls to `tag` until the scope is dropped.
    #[inline]
    pub fn enter(tag: &'static str) -> Self {
        let previous = CALLER.with(|c| c.replace(tag));
        CallerScope { previous }
    }
}

impl Drop for CallerScope {
    #[inline]
    fn drop(&mut self) {
        CALLER.with(|c| c.set(self.previous));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scopes_nest_and_restore() {
        assert_eq!(current_caller(), UNATTRIBUTED);
        {
            let _outer = CallerScope::enter("pool");
            assert_eq!(current_caller(), "pool");
            {
                let _inner = CallerScope::enter("plugin:x");
                assert_eq!(current_caller(), "plugin:x");
            }
            assert_eq!(current_caller(), "pool");
        }
        assert_eq!(current_caller(), UNATTRIBUTED);
    }

    #[test]
    fn tags_are_per_thread() {
        let _s = CallerScope::enter("main-thread");
        let other = std::thread::spawn(current_caller).join().unwrap();
        assert_eq!(other, UNATTRIBUTED);
    }
}
