//! [`PluginLimits`]: what a plugin may use — fuel per call, a wall-clock deadline per call, a
//! cap on its linear memory, its wasm stack, the size of its module and what compiling it may
//! cost, the chunks it may hold, what it may log — and how many times the host starts it again
//! after a quarantine.

use std::time::Duration;

/// Fuel a call may burn by default (about one unit per wasm instruction): ample for any
/// allocation policy (a first-fit scan of 100 000 free blocks), small enough to stop a loop
/// within milliseconds.
pub const DEFAULT_FUEL_PER_CALL: u64 = 20_000_000;
/// A call's default wall-clock deadline.
pub const DEFAULT_DEADLINE: Duration = Duration::from_millis(200);
/// How often the engine's epoch advances by default: the deadline's resolution.
pub const DEFAULT_EPOCH_TICK: Duration = Duration::from_millis(5);
/// Default cap on the guest's linear memory.
pub const DEFAULT_MEMORY_CAP: usize = 64 << 20;
/// Default `max_wasm_stack`.
pub const DEFAULT_MAX_STACK: usize = 256 << 10;
/// Default largest module accepted, in bytes.
pub const DEFAULT_MAX_MODULE_BYTES: usize = 16 << 20;
/// Default number of re-instantiations after quarantines (none: a quarantined plugin stays
/// quarantined).
pub const DEFAULT_MAX_RESTARTS: u32 = 0;
/// Default number of instance slots the pooling allocator reserves per loaded module.
pub const DEFAULT_POOLED_INSTANCES: u32 = 32;
/// Default most chunks a plugin may hold at once (each costs the host a record, and a shrink
/// of a failing case replays every one of them).
pub const DEFAULT_MAX_CHUNKS: u32 = 16_384;
/// Default most functions a module may define.
pub const DEFAULT_MAX_FUNCTIONS: u32 = 10_000;
/// Default most bytes of code of one function body. Compile time grows with the square of a
/// body's blocks (a 128 KiB body of loops took 40 s in a debug build); the example plugins'
/// largest body is 5.5 KiB.
pub const DEFAULT_MAX_FUNCTION_BYTES: usize = 64 << 10;
/// Default most bytes of code of all function bodies together (the examples have 22–47 KiB).
pub const DEFAULT_MAX_CODE_BYTES: usize = 1 << 20;
/// Default most locals one function may declare, parameters not counted (the examples' most
/// is 23; compile time grows with locals times blocks).
pub const DEFAULT_MAX_LOCALS: u32 = 1_000;
/// Default wall-clock time compiling a module may take.
pub const DEFAULT_COMPILE_DEADLINE: Duration = Duration::from_secs(30);
/// Default most log lines one call keeps (later ones in the same call are dropped).
pub const DEFAULT_MAX_LOG_LINES_PER_CALL: u32 = 16;
/// Default most host time one call may spend keeping log lines.
pub const DEFAULT_MAX_LOG_TIME_PER_CALL: Duration = Duration::from_millis(1);

/// Default most `stream_order` calls one call into the plugin may make (later ones answer
/// `NOT_ORDERED` without reaching the driver). A policy orders at most once per block it takes
/// from another stream.
pub const DEFAULT_MAX_STREAM_ORDERS_PER_CALL: u32 = 64;

/// Limits a plugin runs under. Build with [`PluginLimits::default`] and the setters.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use emm_sandbox::PluginLimits;
///
/// // Deterministic limits for a test: fuel only, no wall clock.
/// let limits = PluginLimits::default().deadline(None).fuel_per_call(Some(1_000_000));
/// assert_eq!(limits.get_deadline(), None);
/// assert_eq!(limits.get_fuel_per_call(), Some(1_000_000));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginLimits {
    fuel_per_call: Option<u64>,
    deadline: Option<Duration>,
    epoch_tick: Duration,
    memory_cap: usize,
    max_stack: usize,
    max_module_bytes: usize,
    max_restarts: u32,
    pooled_instances: u32,
    max_held_bytes: Option<u64>,
    max_chunks: u32,
    max_functions: u32,
    max_function_bytes: usize,
    max_code_bytes: usize,
    max_locals: u32,
    compile_deadline: Option<Duration>,
    max_log_lines_per_call: u32,
    max_log_time_per_call: Duration,
    max_stream_orders_per_call: u32,
}

impl Default for PluginLimits {
    fn default() -> Self {
        PluginLimits {
            fuel_per_call: Some(DEFAULT_FUEL_PER_CALL),
            deadline: Some(DEFAULT_DEADLINE),
            epoch_tick: DEFAULT_EPOCH_TICK,
            memory_cap: DEFAULT_MEMORY_CAP,
            max_stack: DEFAULT_MAX_STACK,
            max_module_bytes: DEFAULT_MAX_MODULE_BYTES,
            max_restarts: DEFAULT_MAX_RESTARTS,
            pooled_instances: DEFAULT_POOLED_INSTANCES,
            max_held_bytes: None,
            max_chunks: DEFAULT_MAX_CHUNKS,
            max_functions: DEFAULT_MAX_FUNCTIONS,
            max_function_bytes: DEFAULT_MAX_FUNCTION_BYTES,
            max_code_bytes: DEFAULT_MAX_CODE_BYTES,
            max_locals: DEFAULT_MAX_LOCALS,
            compile_deadline: Some(DEFAULT_COMPILE_DEADLINE),
            max_log_lines_per_call: DEFAULT_MAX_LOG_LINES_PER_CALL,
            max_log_time_per_call: DEFAULT_MAX_LOG_TIME_PER_CALL,
            max_stream_orders_per_call: DEFAULT_MAX_STREAM_ORDERS_PER_CALL,
        }
    }
}

impl PluginLimits {
    /// Fuel each call into the guest gets (`None`: no fuel metering). Deterministic: the same
    /// calls run out at the same instruction, which is what a conformance run wants.
    ///
    /// Default: `Some(DEFAULT_FUEL_PER_CALL)` (20 000 000).
    pub fn fuel_per_call(mut self, fuel: Option<u64>) -> Self {
        self.fuel_per_call = fuel;
        self
    }

    /// Wall-clock time each call into the guest may take (`None`: no deadline), counted in
    /// epoch ticks, so it is honoured to within one [`PluginLimits::epoch_tick`]. For
    /// production, where a stuck plugin must not stall allocation.
    ///
    /// Default: `Some(DEFAULT_DEADLINE)` (200 ms).
    pub fn deadline(mut self, deadline: Option<Duration>) -> Self {
        self.deadline = deadline;
        self
    }

    /// How often the engine's epoch advances: the resolution of the deadline. A background
    /// thread ticks while a plugin with a deadline is loaded.
    ///
    /// Default: `DEFAULT_EPOCH_TICK` (5 ms).
    pub fn epoch_tick(mut self, tick: Duration) -> Self {
        self.epoch_tick = tick;
        self
    }

    /// The most linear memory the guest may grow to, in bytes; growing beyond it quarantines
    /// the plugin.
    ///
    /// Default: `DEFAULT_MEMORY_CAP` (64 MiB).
    pub fn memory_cap(mut self, bytes: usize) -> Self {
        self.memory_cap = bytes;
        self
    }

    /// The most native stack wasm code may use (`max_wasm_stack`); deeper recursion traps.
    ///
    /// Default: `DEFAULT_MAX_STACK` (256 KiB).
    pub fn max_stack(mut self, bytes: usize) -> Self {
        self.max_stack = bytes;
        self
    }

    /// The largest module file accepted, checked before anything is compiled.
    ///
    /// Default: `DEFAULT_MAX_MODULE_BYTES` (16 MiB).
    pub fn max_module_bytes(mut self, bytes: usize) -> Self {
        self.max_module_bytes = bytes;
        self
    }

    /// How many times a quarantined plugin is started again (a fresh instance with no chunks;
    /// the old instance's allocations stay valid). After the last, requests fail or go to the
    /// fallback resource.
    ///
    /// Default: `DEFAULT_MAX_RESTARTS` (0).
    pub fn max_restarts(mut self, restarts: u32) -> Self {
        self.max_restarts = restarts;
        self
    }

    /// Instance slots the pooling allocator reserves for this module: one per context (and
    /// per restart) alive at once. Each reserves address space, not memory.
    ///
    /// Default: `DEFAULT_POOLED_INSTANCES` (32).
    pub fn pooled_instances(mut self, slots: u32) -> Self {
        self.pooled_instances = slots;
        self
    }

    /// The most device memory the plugin may hold in chunks; `upstream_alloc` beyond it
    /// answers out of memory (the guest sees an ordinary failure, not a breach).
    ///
    /// Default: `None` (as much as the upstream resource gives).
    pub fn max_held_bytes(mut self, bytes: Option<u64>) -> Self {
        self.max_held_bytes = bytes;
        self
    }

    /// The most chunks the plugin may hold at once (orphans of a quarantine included);
    /// `upstream_alloc` beyond it answers out of memory, and the host logs why.
    ///
    /// Default: `DEFAULT_MAX_CHUNKS` (16 384).
    pub fn max_chunks(mut self, chunks: u32) -> Self {
        self.max_chunks = chunks;
        self
    }

    /// The most functions a module may define; a module with more is refused before it is
    /// compiled.
    ///
    /// Default: `DEFAULT_MAX_FUNCTIONS` (10 000).
    pub fn max_functions(mut self, functions: u32) -> Self {
        self.max_functions = functions;
        self
    }

    /// The most bytes of code one function body may have; checked before compiling.
    ///
    /// Default: `DEFAULT_MAX_FUNCTION_BYTES` (64 KiB).
    pub fn max_function_bytes(mut self, bytes: usize) -> Self {
        self.max_function_bytes = bytes;
        self
    }

    /// The most bytes of code all function bodies together may have; checked before
    /// compiling. With the other budgets it bounds how long compiling takes.
    ///
    /// Default: `DEFAULT_MAX_CODE_BYTES` (1 MiB).
    pub fn max_code_bytes(mut self, bytes: usize) -> Self {
        self.max_code_bytes = bytes;
        self
    }

    /// The most locals one function may declare (its parameters not counted); checked
    /// before compiling.
    ///
    /// Default: `DEFAULT_MAX_LOCALS` (1 000).
    pub fn max_locals(mut self, locals: u32) -> Self {
        self.max_locals = locals;
        self
    }

    /// The wall-clock time compiling may take (`None`: no limit); past it the module is
    /// refused (the compiling thread is left to finish on its own, bounded by the budgets
    /// above).
    ///
    /// Default: `Some(DEFAULT_COMPILE_DEADLINE)` (30 s).
    pub fn compile_deadline(mut self, deadline: Option<Duration>) -> Self {
        self.compile_deadline = deadline;
        self
    }

    /// The most log lines one call into the plugin keeps; later ones in the same call are
    /// dropped (one line says so).
    ///
    /// Default: `DEFAULT_MAX_LOG_LINES_PER_CALL` (16).
    pub fn max_log_lines_per_call(mut self, lines: u32) -> Self {
        self.max_log_lines_per_call = lines;
        self
    }

    /// The most host time one call may spend keeping log lines; later ones in the same call
    /// are dropped.
    ///
    /// Default: `DEFAULT_MAX_LOG_TIME_PER_CALL` (1 ms).
    pub fn max_log_time_per_call(mut self, time: Duration) -> Self {
        self.max_log_time_per_call = time;
        self
    }

    /// The most `stream_order` calls one call into the plugin may make; later ones answer
    /// `NOT_ORDERED` without calling the driver (one log line says so). Each ordering costs the
    /// host two driver calls, so this bounds the host time a plugin can spend there.
    ///
    /// Default: `DEFAULT_MAX_STREAM_ORDERS_PER_CALL` (64).
    pub fn max_stream_orders_per_call(mut self, orders: u32) -> Self {
        self.max_stream_orders_per_call = orders;
        self
    }

    /// The most chunks held at once.
    pub fn get_max_chunks(&self) -> u32 {
        self.max_chunks
    }
    /// The most functions a module may define.
    pub fn get_max_functions(&self) -> u32 {
        self.max_functions
    }
    /// The most bytes of one function body.
    pub fn get_max_function_bytes(&self) -> usize {
        self.max_function_bytes
    }
    /// The most bytes of all function bodies.
    pub fn get_max_code_bytes(&self) -> usize {
        self.max_code_bytes
    }
    /// The most locals of one function.
    pub fn get_max_locals(&self) -> u32 {
        self.max_locals
    }
    /// The compile deadline, if any.
    pub fn get_compile_deadline(&self) -> Option<Duration> {
        self.compile_deadline
    }
    /// The most log lines kept per call.
    pub fn get_max_log_lines_per_call(&self) -> u32 {
        self.max_log_lines_per_call
    }
    /// The most host time spent on log lines per call.
    pub fn get_max_log_time_per_call(&self) -> Duration {
        self.max_log_time_per_call
    }
    /// The most `stream_order` calls per call.
    pub fn get_max_stream_orders_per_call(&self) -> u32 {
        self.max_stream_orders_per_call
    }

    /// Every limit as one line of text, the same for the same limits: what a verdict
    /// records, so that it vouches for a plugin only under the limits it was checked with.
    pub fn fingerprint(&self) -> String {
        let opt = |v: Option<u64>| v.map_or_else(|| "none".to_string(), |v| v.to_string());
        let ns =
            |d: Option<Duration>| opt(d.map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)));
        format!(
            "fuel_per_call={} deadline_ns={} epoch_tick_ns={} memory_cap={} max_stack={} \
             max_module_bytes={} max_restarts={} pooled_instances={} max_held_bytes={} \
             max_chunks={} max_functions={} max_function_bytes={} max_code_bytes={} \
             max_locals={} compile_deadline_ns={} max_log_lines_per_call={} \
             max_log_time_per_call_ns={} max_stream_orders_per_call={}",
            opt(self.fuel_per_call),
            ns(self.deadline),
            ns(Some(self.epoch_tick)),
            self.memory_cap,
            self.max_stack,
            self.max_module_bytes,
            self.max_restarts,
            self.pooled_instances,
            opt(self.max_held_bytes),
            self.max_chunks,
            self.max_functions,
            self.max_function_bytes,
            self.max_code_bytes,
            self.max_locals,
            ns(self.compile_deadline),
            self.max_log_lines_per_call,
            ns(Some(self.max_log_time_per_call)),
            self.max_stream_orders_per_call,
        )
    }

    /// Fuel per call, if metered.
    pub fn get_fuel_per_call(&self) -> Option<u64> {
        self.fuel_per_call
    }
    /// The per-call deadline, if any.
    pub fn get_deadline(&self) -> Option<Duration> {
        self.deadline
    }
    /// The epoch tick.
    pub fn get_epoch_tick(&self) -> Duration {
        self.epoch_tick
    }
    /// The cap on linear memory in bytes.
    pub fn get_memory_cap(&self) -> usize {
        self.memory_cap
    }
    /// `max_wasm_stack` in bytes.
    pub fn get_max_stack(&self) -> usize {
        self.max_stack
    }
    /// The largest module accepted, in bytes.
    pub fn get_max_module_bytes(&self) -> usize {
        self.max_module_bytes
    }
    /// Re-instantiations allowed after quarantines.
    pub fn get_max_restarts(&self) -> u32 {
        self.max_restarts
    }
    /// The most chunk bytes the plugin may hold, if limited.
    pub fn get_max_held_bytes(&self) -> Option<u64> {
        self.max_held_bytes
    }
    /// Pooled instance slots.
    pub fn get_pooled_instances(&self) -> u32 {
        self.pooled_instances
    }

    /// The deadline in epoch ticks (at least one, rounded up), when there is a deadline.
    pub(crate) fn deadline_ticks(&self) -> Option<u64> {
        let deadline = self.deadline?;
        let tick = self.epoch_tick.as_nanos().max(1);
        let ticks = deadline.as_nanos().div_ceil(tick).max(1);
        // One more tick: the epoch may advance just after the deadline is set.
        Some(u64::try_from(ticks).unwrap_or(u64::MAX).saturating_add(1))
    }

    /// Checks the limits make sense, saying which one does not.
    pub(crate) fn validate(&self) -> Result<(), String> {
        if self.memory_cap < 64 * 1024 {
            return Err(format!(
                "memory_cap is {} bytes; a wasm memory needs at least one 64 KiB page",
                self.memory_cap
            ));
        }
        if self.max_stack < 16 * 1024 {
            return Err(format!(
                "max_stack is {} bytes; give at least 16 KiB",
                self.max_stack
            ));
        }
        if self.deadline.is_some() && self.epoch_tick.is_zero() {
            return Err("epoch_tick is 0; give a tick of at least 1 µs".to_string());
        }
        if self.pooled_instances == 0 {
            return Err("pooled_instances is 0; give at least 1".to_string());
        }
        if self.max_chunks == 0 {
            return Err("max_chunks is 0; give at least 1".to_string());
        }
        if self.compile_deadline.is_some_and(|d| d.is_zero()) {
            return Err(
                "compile_deadline is 0; give None for no deadline, or some time".to_string(),
            );
        }
        if self.fuel_per_call == Some(0) {
            return Err("fuel_per_call is 0; give None for no metering, or some fuel".to_string());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deadlines_round_up_to_whole_ticks_plus_one() {
        let l = PluginLimits::default()
            .deadline(Some(Duration::from_millis(11)))
            .epoch_tick(Duration::from_millis(5));
        assert_eq!(l.deadline_ticks(), Some(4));
        assert_eq!(
            PluginLimits::default().deadline(None).deadline_ticks(),
            None
        );
        assert!(PluginLimits::default().validate().is_ok());
        let bad = PluginLimits::default()
            .memory_cap(10)
            .validate()
            .unwrap_err();
        assert!(bad.contains("memory_cap"), "{bad}");
    }

    #[test]
    fn the_fingerprint_names_every_limit_and_changes_with_each() {
        let d = PluginLimits::default();
        assert!(d
            .fingerprint()
            .starts_with("fuel_per_call=20000000 deadline_ns=200000000 "));
        assert_eq!(d.fingerprint(), PluginLimits::default().fingerprint());
        for other in [
            d.clone().max_chunks(7),
            d.clone().memory_cap(1 << 20),
            d.clone().max_held_bytes(Some(1)),
            d.clone().deadline(None),
            d.clone().max_log_lines_per_call(1),
            d.clone().max_stream_orders_per_call(1),
        ] {
            assert_ne!(other.fingerprint(), d.fingerprint());
        }
    }
}
