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
/// allocate and free. Measured on an H100 host (the `host_floor` example),
/// every locked instruction costs 9–10 ns there: a std lock + unlock pair 20.5 ns, a
/// compare-and-swap lock with a plain release store to unlock 10.5. So the lock is *biased*:
/// everyone takes it with one compare-and-swap and unlocks with a release store until one
/// thread has taken it 4096 times in a row; that thread becomes its owner and locks with plain
/// stores and loads, no locked instruction at all, until another thread wants it (JVM-style
/// biased locking; the fences follow folly's asymmetric thread fence). Then that thread revokes
/// the bias: it marks the lock revoking, makes every thread of the process run a full memory
/// barrier with `membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED)` (a few microseconds), and waits
/// for the owner to leave; from then on it is the compare-and-swap again, until the owner takes
/// it 4096 times in a row, which gives it the bias back. One thread only is ever the owner: all
/// owners would announce themselves in one `busy` flag, and a former owner that read the bias
/// just before it was revoked still stores and clears that flag once; were another thread the
/// owner by then, the clear would hide it from the next revoker and two threads would hold the
/// lock at once. A pool used by one thread — the common case, and every one-thread benchmark —
/// pays a locked instruction only on its first 4096 calls; a shared one pays one barrier call
/// when its bias goes; a per-thread shard that another thread visits now and then (a steal, a
/// growth that locks every shard) is its owner's again soon after. Where `membarrier` is missing (not Linux, a kernel before
/// 4.14, a seccomp filter), locks are never biased; `EMM_LOCK_BIAS=0` in the environment turns
/// biasing off too.
///
/// A waiter spins briefly, then yields its core, then sleeps in short naps (a holder may be
/// growing the pool through the driver, which takes milliseconds); there is no poisoning
/// (nothing panics while the pool's lock is held but a heap whose links a bug broke).
#[cfg(not(loom))]
mod spin {
    use std::cell::{Cell, UnsafeCell};
    use std::ops::{Deref, DerefMut};
    use std::sync::atomic::{compiler_fence, AtomicBool, AtomicU64, Ordering};

    /// Spins this many times before yielding: a holder's critical section is well under 1 µs.
    const SPINS_BEFORE_YIELD: u32 = 100;
    /// Yields this many times before napping: past that, the holder is in a driver call.
    const YIELDS_BEFORE_NAP: u32 = 100;
    /// A waiter's nap once the holder has been slow.
    const NAP: std::time::Duration = std::time::Duration::from_micros(20);

    /// `SpinMutex::bias` before any thread took the lock.
    const UNBIASED: u64 = 0;
    /// `SpinMutex::bias` once the bias is gone: everyone takes `locked`.
    const REVOKED: u64 = 1;
    /// `SpinMutex::bias` while a thread waits for the owner to leave.
    const REVOKING: u64 = 2;
    /// Thread numbers start here, above the states.
    const FIRST_THREAD: u64 = 3;
    /// A thread taking the lock this many times in a row with no other thread in between
    /// becomes its owner, or its owner again: on the H100 host, 16 threads of the sharded pool spent
    /// 9.5 % of their time in the revoked lock's compare-and-swap path (W1, `perf`), their
    /// shards' biases taken by a steal each.
    /// A revocation costs a `membarrier` (microseconds); so many uncontended acquisitions
    /// save more.
    ///
    /// The unit tests use 64, so that owners change often while threads contend.
    const REBIAS_AFTER: u64 = if cfg!(test) { 64 } else { 4096 };

    /// The next thread's number (never reused, so a new thread cannot inherit a dead one's
    /// bias).
    static NEXT_THREAD: AtomicU64 = AtomicU64::new(FIRST_THREAD);

    std::thread_local! {
        static THREAD: Cell<u64> = const { Cell::new(0) };
    }

    /// This thread's number, ≥ [`FIRST_THREAD`].
    #[inline]
    fn thread_number() -> u64 {
        THREAD.with(|t| {
            let n = t.get();
            if n != 0 {
                return n;
            }
            let n = NEXT_THREAD.fetch_add(1, Ordering::Relaxed);
            t.set(n);
            n
        })
    }

    /// Waits a little longer each time: spin, then yield, then nap.
    fn back_off(waited: &mut u32) {
        if *waited < SPINS_BEFORE_YIELD {
            std::hint::spin_loop();
        } else if *waited < SPINS_BEFORE_YIELD + YIELDS_BEFORE_NAP {
            std::thread::yield_now();
        } else {
            std::thread::sleep(NAP);
        }
        *waited = waited.saturating_add(1);
    }

    /// A biased spin lock around `T` (see the note on `spin`).
    #[derive(Default)]
    pub(crate) struct SpinMutex<T> {
        /// [`UNBIASED`], the owner's thread number, [`REVOKING`] or [`REVOKED`]; it moves in
        /// that order, and from [`UNBIASED`] or [`REVOKED`] to the owner only by the owner
        /// holding `locked` ([`Self::settle_bias`]).
        bias: AtomicU64,
        /// Set by the owner while it holds the lock through its bias.
        busy: AtomicBool,
        /// The lock once the bias is revoked.
        locked: AtomicBool,
        /// The one thread the bias is ever given to (the first to take the lock
        /// [`REBIAS_AFTER`] times in a row), or [`UNBIASED`] before; written and read only while
        /// holding `locked`.
        owner: AtomicU64,
        /// The thread that last took `locked`, and how many times in a row (both written only
        /// while holding it).
        last: AtomicU64,
        streak: AtomicU64,
        value: UnsafeCell<T>,
    }

    // SAFETY: the lock hands `&mut T` to one thread at a time, as `std::sync::Mutex` does, so
    // sharing the lock needs only `T: Send`.
    #[allow(unsafe_code, reason = "a lock must share its value behind a flag")]
    unsafe impl<T: Send> Sync for SpinMutex<T> {}

    impl<T> SpinMutex<T> {
        /// A lock around `value`, unlocked and not yet biased.
        pub(crate) fn new(value: T) -> Self {
            SpinMutex {
                bias: AtomicU64::new(UNBIASED),
                busy: AtomicBool::new(false),
                locked: AtomicBool::new(false),
                owner: AtomicU64::new(UNBIASED),
                last: AtomicU64::new(UNBIASED),
                streak: AtomicU64::new(0),
                value: UnsafeCell::new(value),
            }
        }

        /// Takes the lock, waiting for it.
        #[inline]
        pub(crate) fn lock(&self) -> SpinGuard<'_, T> {
            let me = thread_number();
            if self.bias.load(Ordering::Relaxed) == me {
                #[cfg(test)]
                tests::between_check_and_announce();
                if self.enter_biased(me) {
                    return SpinGuard {
                        lock: self,
                        biased: true,
                    };
                }
            }
            self.lock_slow(me)
        }

        /// The owner's way in: announce, then check the bias still stands. A revoker changes
        /// the bias before its `membarrier`, and reads `busy` after it; the barrier it forces on
        /// this thread falls before the store (so the load here sees the change and backs off)
        /// or after it (so the revoker sees `busy` and waits).
        #[inline]
        fn enter_biased(&self, me: u64) -> bool {
            self.busy.store(true, Ordering::Relaxed);
            // The hardware may still let the load pass the store (the revoker's barrier
            // forbids that where it matters); the compiler must not.
            compiler_fence(Ordering::SeqCst);
            if self.bias.load(Ordering::Acquire) == me {
                return true;
            }
            self.busy.store(false, Ordering::Release);
            false
        }

        #[cold]
        #[inline(never)]
        fn lock_slow(&self, me: u64) -> SpinGuard<'_, T> {
            let mut waited = 0;
            loop {
                match self.bias.load(Ordering::Acquire) {
                    REVOKED | UNBIASED => {
                        self.lock_flag();
                        self.settle_bias(me);
                        return SpinGuard {
                            lock: self,
                            biased: false,
                        };
                    }
                    REVOKING => back_off(&mut waited),
                    owner if owner == me => {
                        if self.enter_biased(me) {
                            return SpinGuard {
                                lock: self,
                                biased: true,
                            };
                        }
                    }
                    owner => self.revoke(owner),
                }
            }
        }

        /// Takes the bias from `owner`, if it still has it: marks it revoking, fences every
        /// thread, and waits for the owner to leave its critical section.
        fn revoke(&self, owner: u64) {
            if self
                .bias
                .compare_exchange(owner, REVOKING, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                membarrier::all_threads_fence();
                let mut held = 0;
                // `Acquire` pairs with the owner's release of `busy`: its critical sections
                // happen before everything after the revocation.
                while self.busy.load(Ordering::Acquire) {
                    back_off(&mut held);
                }
                self.bias.store(REVOKED, Ordering::Release);
            }
        }

        /// With `locked` held by `me`: makes sure no owner is inside through a bias, and gives
        /// `me` the bias after [`REBIAS_AFTER`] acquisitions in a row when it is the lock's
        /// owner, or the lock has none yet (see the note on `spin` for why no other thread).
        ///
        /// An owner may have been given the bias back since `me` read [`REVOKED`]; it could
        /// be inside now, so `me` revokes it as any thread would (or waits for a revoker that
        /// is at it). No new owner appears meanwhile: only a holder of `locked` gives the
        /// bias.
        fn settle_bias(&self, me: u64) {
            let mut waited = 0;
            loop {
                match self.bias.load(Ordering::Acquire) {
                    REVOKED | UNBIASED => break,
                    REVOKING => back_off(&mut waited),
                    // Not reached: an owner comes in through its bias.
                    owner if owner == me => break,
                    owner => self.revoke(owner),
                }
            }
            let streak = if self.last.load(Ordering::Relaxed) == me {
                self.streak.load(Ordering::Relaxed) + 1
            } else {
                self.last.store(me, Ordering::Relaxed);
                1
            };
            let owner = self.owner.load(Ordering::Relaxed);
            if streak >= REBIAS_AFTER
                && (owner == me || owner == UNBIASED)
                && membarrier::available()
            {
                self.owner.store(me, Ordering::Relaxed);
                self.streak.store(0, Ordering::Relaxed);
                // Seen by `me`'s next `lock` at once; another thread revokes it as above.
                self.bias.store(me, Ordering::Release);
            } else {
                self.streak.store(streak, Ordering::Relaxed);
            }
        }

        /// Takes `locked` (the bias is revoked): one compare-and-swap when free.
        fn lock_flag(&self) {
            let mut waited = 0;
            loop {
                if self
                    .locked
                    .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
                {
                    return;
                }
                // Wait on a plain load, so waiters do not fight over the cache line.
                while self.locked.load(Ordering::Relaxed) {
                    back_off(&mut waited);
                }
            }
        }

        /// Whether a thread holds the bias (for tests).
        #[cfg(test)]
        fn is_biased(&self) -> bool {
            self.bias.load(Ordering::Relaxed) >= FIRST_THREAD
        }

        /// The value, through an exclusive borrow of the lock (no locking needed).
        pub(crate) fn get_mut(&mut self) -> &mut T {
            self.value.get_mut()
        }
    }

    impl<T> std::fmt::Debug for SpinMutex<T> {
        /// Shows whether the lock is held, not the value: reading it would need the lock.
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            let bias = match self.bias.load(Ordering::Relaxed) {
                UNBIASED => "none",
                REVOKED | REVOKING => "revoked",
                _ => "owned",
            };
            f.debug_struct("SpinMutex")
                .field("bias", &bias)
                .field(
                    "locked",
                    &(self.locked.load(Ordering::Relaxed) || self.busy.load(Ordering::Relaxed)),
                )
                .finish_non_exhaustive()
        }
    }

    /// Holds a [`SpinMutex`]; unlocks when dropped.
    pub(crate) struct SpinGuard<'a, T> {
        lock: &'a SpinMutex<T>,
        /// Taken through the bias: unlocking clears `busy`, not `locked`.
        biased: bool,
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
            if self.biased {
                self.lock.busy.store(false, Ordering::Release);
            } else {
                self.lock.locked.store(false, Ordering::Release);
            }
        }
    }

    /// The asymmetric half of the bias: a barrier run on every thread of the process.
    #[cfg(target_os = "linux")]
    mod membarrier {
        use std::sync::atomic::{AtomicU8, Ordering};

        // From `linux/membarrier.h`.
        const CMD_QUERY: libc::c_int = 0;
        const CMD_PRIVATE_EXPEDITED: libc::c_int = 1 << 3;
        const CMD_REGISTER_PRIVATE_EXPEDITED: libc::c_int = 1 << 4;

        const UNKNOWN: u8 = 0;
        const READY: u8 = 1;
        const MISSING: u8 = 2;
        static STATE: AtomicU8 = AtomicU8::new(UNKNOWN);

        fn membarrier(cmd: libc::c_int) -> libc::c_long {
            // SAFETY: `membarrier` reads no memory of ours; `flags` 0 and `cpu_id` 0 are valid
            // for every command used here.
            #[allow(unsafe_code, reason = "the membarrier system call has no std wrapper")]
            unsafe {
                libc::syscall(
                    libc::SYS_membarrier,
                    cmd,
                    0 as libc::c_uint,
                    0 as libc::c_int,
                )
            }
        }

        /// Whether [`all_threads_fence`] works here; registers the process on first use.
        pub(super) fn available() -> bool {
            match STATE.load(Ordering::Acquire) {
                READY => true,
                MISSING => false,
                _ => {
                    // `EMM_LOCK_BIAS=0` turns biasing off: to compare, or to rule it out.
                    let off = std::env::var_os("EMM_LOCK_BIAS").is_some_and(|v| v == "0");
                    let commands = if off { -1 } else { membarrier(CMD_QUERY) };
                    let ready = commands >= 0
                        && commands & libc::c_long::from(CMD_PRIVATE_EXPEDITED) != 0
                        && membarrier(CMD_REGISTER_PRIVATE_EXPEDITED) == 0;
                    STATE.store(if ready { READY } else { MISSING }, Ordering::Release);
                    ready
                }
            }
        }

        /// Every running thread of this process executes a full memory barrier before this
        /// returns (a sleeping one passes one when it is scheduled).
        pub(super) fn all_threads_fence() {
            // Only reached for a lock biased after `available()` registered the process; the
            // kernel fails this command only for an unregistered one, which a child of
            // `fork` may be: register (again) and retry once.
            let mut r = membarrier(CMD_PRIVATE_EXPEDITED);
            if r != 0 && membarrier(CMD_REGISTER_PRIVATE_EXPEDITED) == 0 {
                r = membarrier(CMD_PRIVATE_EXPEDITED);
            }
            assert!(
                r == 0,
                "membarrier(PRIVATE_EXPEDITED) failed after registration: {}",
                std::io::Error::last_os_error()
            );
        }
    }

    /// No `membarrier`: no lock is ever biased.
    #[cfg(not(target_os = "linux"))]
    mod membarrier {
        pub(super) fn available() -> bool {
            false
        }

        pub(super) fn all_threads_fence() {
            unreachable!("no lock is biased without membarrier");
        }
    }

    #[cfg(test)]
    mod tests {
        use super::SpinMutex;
        use std::cell::RefCell;
        use std::sync::atomic::{AtomicBool, Ordering};
        use std::sync::{mpsc, Arc};

        std::thread_local! {
            /// Run once by this thread's next `lock` between its look at the bias and its
            /// announcement: where a former owner can be stopped for any length of time.
            static PAUSE: RefCell<Option<Box<dyn FnOnce()>>> = const { RefCell::new(None) };
        }

        pub(super) fn between_check_and_announce() {
            if let Some(pause) = PAUSE.with(|p| p.borrow_mut().take()) {
                pause();
            }
        }

        #[test]
        fn a_former_owner_late_to_announce_never_lets_two_threads_in() {
            use super::{membarrier, REBIAS_AFTER};
            if !membarrier::available() {
                eprintln!("no membarrier here: locks are never biased, nothing to check");
                return;
            }
            // A owns the bias and stops after seeing it, before announcing itself. The main
            // thread revokes it, takes the lock REBIAS_AFTER times in a row and holds it; then
            // A goes on, finds the bias gone and must wait for the main thread.
            let m = Arc::new(SpinMutex::new(0u64));
            let inside = Arc::new(AtomicBool::new(false));
            let (paused, wait_paused) = mpsc::channel();
            let (go, wait_go) = mpsc::channel::<()>();
            let a = {
                let (m, inside) = (m.clone(), inside.clone());
                std::thread::spawn(move || {
                    for _ in 0..REBIAS_AFTER {
                        *m.lock() += 1;
                    }
                    assert!(m.is_biased(), "{REBIAS_AFTER} in a row make A the owner");
                    PAUSE.with(|p| {
                        *p.borrow_mut() = Some(Box::new(move || {
                            paused.send(()).unwrap();
                            wait_go.recv().unwrap();
                        }))
                    });
                    let mut g = m.lock();
                    assert!(
                        !inside.swap(true, Ordering::SeqCst),
                        "the former owner got in while another thread held the lock"
                    );
                    *g += 1;
                    inside.store(false, Ordering::SeqCst);
                })
            };
            wait_paused.recv().unwrap();
            for _ in 0..=REBIAS_AFTER {
                *m.lock() += 1;
            }
            let mut g = m.lock();
            assert!(!inside.swap(true, Ordering::SeqCst));
            go.send(()).unwrap();
            std::thread::sleep(std::time::Duration::from_millis(50));
            *g += 1;
            inside.store(false, Ordering::SeqCst);
            drop(g);
            a.join()
                .expect("the former owner saw the lock held by two threads");
            assert_eq!(*m.lock(), 2 * REBIAS_AFTER + 3);
        }

        #[test]
        fn excludes_other_threads() {
            let m = Arc::new(SpinMutex::new((0u64, 0u64)));
            let threads: Vec<_> = (0..4)
                .map(|_| {
                    let m = m.clone();
                    std::thread::spawn(move || bump(&m, 50_000))
                })
                .collect();
            for t in threads {
                t.join().unwrap();
            }
            assert_eq!(*m.lock(), (200_000, 200_000));
        }

        #[test]
        fn one_thread_keeps_its_bias() {
            let m = SpinMutex::new(0u64);
            for _ in 0..1000 {
                *m.lock() += 1;
            }
            assert_eq!(*m.lock(), 1000);
            assert_eq!(m.is_biased(), super::membarrier::available());
            assert!(format!("{m:?}").contains("locked: false"));
        }

        #[test]
        fn a_second_thread_revokes_the_bias_and_waits_for_the_owner() {
            use super::{membarrier, REBIAS_AFTER};
            let m = Arc::new(SpinMutex::new(0u64));
            let owner_inside = Arc::new(AtomicBool::new(false));
            for _ in 0..REBIAS_AFTER - 1 {
                *m.lock() += 1;
            }
            let g = m.lock();
            assert_eq!(m.is_biased(), membarrier::available());
            owner_inside.store(true, Ordering::Relaxed);
            let other = {
                let (m, owner_inside) = (m.clone(), owner_inside.clone());
                std::thread::spawn(move || {
                    let mut g = m.lock();
                    // The owner left before this thread got in, and its writes are seen.
                    assert!(!owner_inside.load(Ordering::Relaxed));
                    assert_eq!(*g, REBIAS_AFTER);
                    *g += 1;
                })
            };
            std::thread::sleep(std::time::Duration::from_millis(20));
            let mut g = g;
            *g += 1;
            owner_inside.store(false, Ordering::Relaxed);
            drop(g);
            other.join().unwrap();
            assert!(!m.is_biased());
            // The former owner now takes the lock as everyone does.
            *m.lock() += 1;
            assert_eq!(*m.lock(), REBIAS_AFTER + 2);
            assert!(format!("{m:?}").contains("revoked"));
        }

        #[test]
        fn the_owner_and_revokers_never_hold_it_at_once() {
            for _ in 0..20 {
                let m = Arc::new(SpinMutex::new((0u64, 0u64)));
                // This thread owns the bias while the others arrive and revoke it.
                for _ in 0..super::REBIAS_AFTER {
                    m.lock().0 += 0;
                }
                let others: Vec<_> = (0..3)
                    .map(|_| {
                        let m = m.clone();
                        std::thread::spawn(move || bump(&m, 2_000))
                    })
                    .collect();
                bump(&m, 2_000);
                for t in others {
                    t.join().unwrap();
                }
                assert_eq!(*m.lock(), (8_000, 8_000));
            }
        }

        #[test]
        fn a_thread_that_takes_a_revoked_lock_many_times_in_a_row_owns_it_again() {
            use super::{membarrier, REBIAS_AFTER};
            let m = Arc::new(SpinMutex::new(0u64));
            for _ in 0..REBIAS_AFTER {
                *m.lock() += 1;
            }
            assert_eq!(m.is_biased(), membarrier::available());
            let visit = |m: &Arc<SpinMutex<u64>>| {
                let m = m.clone();
                std::thread::spawn(move || *m.lock() += 1).join().unwrap();
            };
            visit(&m);
            assert!(!m.is_biased());
            for _ in 1..REBIAS_AFTER {
                *m.lock() += 1;
            }
            assert!(!m.is_biased(), "owner again before {REBIAS_AFTER} in a row");
            *m.lock() += 1;
            assert_eq!(m.is_biased(), membarrier::available());
            // Another thread takes it away again, after the owner's writes.
            visit(&m);
            assert!(!m.is_biased());
            assert_eq!(*m.lock(), 2 + 2 * REBIAS_AFTER);
        }

        #[test]
        fn the_owner_is_the_thread_that_uses_the_lock_not_the_first_to_touch_it() {
            use super::{membarrier, REBIAS_AFTER};
            // A constructor's thread (or a growth that locks every shard) takes it once; the
            // thread that uses it becomes its owner, and nobody else after that.
            let m = Arc::new(SpinMutex::new(0u64));
            *m.lock() += 1;
            assert!(!m.is_biased());
            let user = {
                let m = m.clone();
                std::thread::spawn(move || {
                    for _ in 0..REBIAS_AFTER {
                        *m.lock() += 1;
                    }
                    m.is_biased()
                })
            };
            assert_eq!(user.join().unwrap(), membarrier::available());
            // This thread revokes it and, however long its streak, never owns it.
            for _ in 0..3 * REBIAS_AFTER {
                *m.lock() += 1;
            }
            assert!(!m.is_biased());
            assert_eq!(*m.lock(), 1 + 4 * REBIAS_AFTER);
        }

        #[test]
        fn owners_come_and_go_and_never_share_the_lock() {
            // Bursts longer than REBIAS_AFTER with pauses between: the owner (the first thread
            // with such a burst) takes the bias back after its bursts, and the next burst of
            // another revokes it.
            let m = Arc::new(SpinMutex::new((0u64, 0u64)));
            let threads: Vec<_> = (0..4)
                .map(|_| {
                    let m = m.clone();
                    std::thread::spawn(move || {
                        for _ in 0..40 {
                            bump(&m, 5_000);
                            std::thread::sleep(std::time::Duration::from_micros(100));
                        }
                    })
                })
                .collect();
            for t in threads {
                t.join().unwrap();
            }
            assert_eq!(*m.lock(), (800_000, 800_000));
        }

        fn bump(m: &SpinMutex<(u64, u64)>, times: u64) {
            for _ in 0..times {
                let mut g = m.lock();
                // A torn update would leave the two apart.
                g.0 += 1;
                std::hint::black_box(&mut *g);
                g.1 += 1;
            }
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
