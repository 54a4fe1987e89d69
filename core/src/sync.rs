//! The synchronization primitives of the suballocating resources ([`PoolResource`],
//! [`ShardedPoolResource`], [`ArenaResource`], `FixedSizeResource`): a spin lock of emm's own
//! (`SpinMutex`, below) with std's atomics and thread-locals — or, when built with
//! `RUSTFLAGS="--cfg loom"`, loom's mutex behind the same API and loom's atomics, so that
//! `tests/loom_sharded.rs` can model-check their locking (`cargo xtask loom`). The same names
//! either way: the resources import them from here.
//!
//! [`ShardedPoolResource`]: crate::mr::ShardedPoolResource
//! [`ArenaResource`]: crate::mr::ArenaResource
//! [`PoolResource`]: crate::mr::PoolResource

#[cfg(not(loom))]
pub(crate) use spin::{SpinGuard, SpinMutex};
#[cfg(not(loom))]
pub(crate) use std::{
    sync::atomic::{AtomicU64, AtomicUsize, Ordering},
    thread_local,
};

// loom's `thread_local!` gives each loom thread its own value (loom runs every modelled thread
// on one OS thread, so std's would be shared), and its `Mutex` is a point where loom switches
// threads.
#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// loom's `thread_local!`, which takes no `const { … }` initializer: the same key, built
/// from the value.
#[cfg(loom)]
macro_rules! loom_thread_local {
    ($(#[$attr:meta])* $vis:vis static $name:ident: $t:ty = const { $init:expr };) => {
        loom::thread_local! { $(#[$attr])* $vis static $name: $t = $init; }
    };
    ($(#[$attr:meta])* $vis:vis static $name:ident: $t:ty = $init:expr;) => {
        loom::thread_local! { $(#[$attr])* $vis static $name: $t = $init; }
    };
}
#[cfg(loom)]
pub(crate) use loom_spin::{SpinGuard, SpinMutex};
#[cfg(loom)]
pub(crate) use loom_thread_local as thread_local;

/// A lock for critical sections of a few dozen instructions that never block: the pool's
/// allocate and free. Locking is one compare-and-swap; unlocking is a plain release store, where
/// `std::sync::Mutex` must swap to learn whether a thread sleeps on it. Measured on the H100's
/// host (`docs/results/2026-11-22-h100-s3/host-floor.txt`), every locked instruction costs
/// 9–10 ns there: a std lock + unlock pair 20.5 ns, this one 10.5. A waiter spins briefly, then
/// yields its core, then sleeps in short naps (a holder may be growing the pool through the
/// driver, which takes milliseconds); there is no poisoning (nothing panics while the pool's
/// lock is held).
#[cfg(not(loom))]
mod spin {
    use std::cell::UnsafeCell;
    use std::ops::{Deref, DerefMut};
    use std::sync::atomic::{AtomicBool, Ordering};

    /// Spins this many times before yielding: a holder's critical section is well under 1 µs.
    const SPINS_BEFORE_YIELD: u32 = 100;
    /// Yields this many times before napping: past that, the holder is in a driver call.
    const YIELDS_BEFORE_NAP: u32 = 100;
    /// A waiter's nap once the holder has been slow.
    const NAP: std::time::Duration = std::time::Duration::from_micros(20);

    /// A spin lock around `T` (see the note on `spin`).
    #[derive(Default)]
    pub(crate) struct SpinMutex<T> {
        locked: AtomicBool,
        value: UnsafeCell<T>,
    }

    // SAFETY: the lock hands `&mut T` to one thread at a time, as `std::sync::Mutex` does, so
    // sharing the lock needs only `T: Send`.
    #[allow(unsafe_code, reason = "a lock must share its value behind a flag")]
    unsafe impl<T: Send> Sync for SpinMutex<T> {}

    impl<T> SpinMutex<T> {
        /// A lock around `value`, unlocked.
        pub(crate) fn new(value: T) -> Self {
            SpinMutex {
                locked: AtomicBool::new(false),
                value: UnsafeCell::new(value),
            }
        }

        /// Takes the lock, waiting for it.
        #[inline]
        pub(crate) fn lock(&self) -> SpinGuard<'_, T> {
            if self
                .locked
                .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_err()
            {
                self.lock_contended();
            }
            SpinGuard { lock: self }
        }

        #[cold]
        #[inline(never)]
        fn lock_contended(&self) {
            let mut waited = 0;
            loop {
                // Wait on a plain load, so waiters do not fight over the cache line.
                while self.locked.load(Ordering::Relaxed) {
                    if waited < SPINS_BEFORE_YIELD {
                        std::hint::spin_loop();
                    } else if waited < SPINS_BEFORE_YIELD + YIELDS_BEFORE_NAP {
                        std::thread::yield_now();
                    } else {
                        std::thread::sleep(NAP);
                    }
                    waited = waited.saturating_add(1);
                }
                if self
                    .locked
                    .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
                {
                    return;
                }
            }
        }

        /// The value, through an exclusive borrow of the lock (no locking needed).
        pub(crate) fn get_mut(&mut self) -> &mut T {
            self.value.get_mut()
        }
    }

    impl<T> std::fmt::Debug for SpinMutex<T> {
        /// Shows whether the lock is held, not the value: reading it would need the lock.
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.debug_struct("SpinMutex")
                .field("locked", &self.locked.load(Ordering::Relaxed))
                .finish_non_exhaustive()
        }
    }

    /// Holds a [`SpinMutex`]; unlocks when dropped.
    pub(crate) struct SpinGuard<'a, T> {
        lock: &'a SpinMutex<T>,
    }

    impl<T> Deref for SpinGuard<'_, T> {
        type Target = T;
        #[inline]
        fn deref(&self) -> &T {
            // SAFETY: the guard holds the lock, so no other reference to the value exists.
            #[allow(unsafe_code, reason = "the lock's one access to its value")]
            unsafe {
                &*self.lock.value.get()
            }
        }
    }

    impl<T> DerefMut for SpinGuard<'_, T> {
        #[inline]
        fn deref_mut(&mut self) -> &mut T {
            // SAFETY: as in `deref`; the guard is borrowed mutably, so this borrow is unique.
            #[allow(unsafe_code, reason = "the lock's one access to its value")]
            unsafe {
                &mut *self.lock.value.get()
            }
        }
    }

    impl<T> Drop for SpinGuard<'_, T> {
        #[inline]
        fn drop(&mut self) {
            self.lock.locked.store(false, Ordering::Release);
        }
    }

    #[cfg(test)]
    mod tests {
        use super::SpinMutex;
        use std::sync::Arc;

        #[test]
        fn excludes_other_threads() {
            let m = Arc::new(SpinMutex::new((0u64, 0u64)));
            let threads: Vec<_> = (0..4)
                .map(|_| {
                    let m = m.clone();
                    std::thread::spawn(move || {
                        for _ in 0..50_000 {
                            let mut g = m.lock();
                            // A torn update would leave the two apart.
                            g.0 += 1;
                            std::hint::black_box(&mut *g);
                            g.1 += 1;
                        }
                    })
                })
                .collect();
            for t in threads {
                t.join().unwrap();
            }
            assert_eq!(*m.lock(), (200_000, 200_000));
        }

        #[test]
        fn a_waiter_gets_the_lock_after_a_long_hold() {
            let m = Arc::new(SpinMutex::new(0u32));
            let g = m.lock();
            let waiter = {
                let m = m.clone();
                std::thread::spawn(move || *m.lock() += 1)
            };
            // Long enough for the waiter to spin, yield and nap.
            std::thread::sleep(std::time::Duration::from_millis(20));
            drop(g);
            waiter.join().unwrap();
            assert_eq!(*m.lock(), 1);
        }
    }
}

/// Under loom, the spin lock is loom's `Mutex` with the same surface, so the model checker
/// sees every acquisition.
#[cfg(loom)]
mod loom_spin {
    pub(crate) use loom::sync::MutexGuard as SpinGuard;

    /// loom's `Mutex` behind [`super::spin`]'s API.
    #[derive(Debug, Default)]
    pub(crate) struct SpinMutex<T>(loom::sync::Mutex<T>);

    impl<T> SpinMutex<T> {
        pub(crate) fn new(value: T) -> Self {
            SpinMutex(loom::sync::Mutex::new(value))
        }

        pub(crate) fn lock(&self) -> SpinGuard<'_, T> {
            self.0.lock().unwrap_or_else(|e| e.into_inner())
        }

        pub(crate) fn get_mut(&mut self) -> &mut T {
            self.0.get_mut().unwrap_or_else(|e| e.into_inner())
        }
    }
}
