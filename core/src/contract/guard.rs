//! [`DeferCleanupGuard`]: what `defer_cleanup` returns; cleanup is deferred while it lives.

use std::fmt;

/// While alive, the manager that returned it avoids expensive cleanup (Numba's
/// `defer_cleanup()` context manager, in Rust form: the scope is the guard's lifetime).
///
/// Guards nest: cleanup resumes when the last one is dropped. An early return with `?` or a
/// panic inside the scope drops the guard, so an error inside it re-enables cleanup, as Numba's
/// `with` block does.
#[must_use = "cleanup is deferred only while the guard is alive"]
pub struct DeferCleanupGuard {
    // Run in reverse order on drop: the last hold taken is the first released.
    releases: Vec<Box<dyn FnOnce() + Send>>,
}

impl DeferCleanupGuard {
    /// A guard that calls `release` when dropped.
    pub fn new(release: impl FnOnce() + Send + 'static) -> Self {
        DeferCleanupGuard {
            releases: vec![Box::new(release)],
        }
    }

    /// A guard that defers nothing (for a manager whose frees are always cheap).
    pub fn nothing() -> Self {
        DeferCleanupGuard {
            releases: Vec::new(),
        }
    }

    /// Holds `inner` too, released before `self`'s own holds: a manager built on another
    /// (`HostOnlyManager`) takes the inner guard first, as the seed asks ("it must hold an
    /// active context manager from `super().defer_cleanup()`").
    pub fn and(mut self, mut inner: DeferCleanupGuard) -> Self {
        self.releases.append(&mut inner.releases);
        self
    }

    /// How many holds this guard releases when dropped.
    pub fn holds(&self) -> usize {
        self.releases.len()
    }
}

impl Drop for DeferCleanupGuard {
    fn drop(&mut self) {
        while let Some(release) = self.releases.pop() {
            release();
        }
    }
}

impl fmt::Debug for DeferCleanupGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DeferCleanupGuard({} holds)", self.releases.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    #[test]
    fn holds_release_last_taken_first() {
        let log = Arc::new(Mutex::new(Vec::new()));
        let (a, b) = (Arc::clone(&log), Arc::clone(&log));
        let g = DeferCleanupGuard::new(move || a.lock().unwrap().push("outer"))
            .and(DeferCleanupGuard::new(move || {
                b.lock().unwrap().push("inner")
            }))
            .and(DeferCleanupGuard::nothing());
        assert_eq!(g.holds(), 2);
        drop(g);
        assert_eq!(*log.lock().unwrap(), ["inner", "outer"]);
    }
}
