//! `HostState`: what a plugin's store holds, and the host functions a guest imports
//! (`emm::upstream_alloc`, `emm::upstream_free`, `emm::log`, `emm::stream_order`). Host
//! functions never panic: a
//! guest that breaks a rule through them gets a trap, and the rule is recorded for the
//! quarantine.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use emm_core::attribution::CallerScope;
use emm_core::mr::{DeviceMemoryResource, MrError, MIN_ALIGNMENT};
use emm_core::units::Bytes;
use emm_core::StreamId;
use wasmtime::{Caller, Extern, Linker, ResourceLimiter};

use crate::abi::{
    IMPORT_LOG, IMPORT_MODULE, IMPORT_STREAM_ORDER, IMPORT_UPSTREAM_ALLOC, IMPORT_UPSTREAM_FREE,
    MAX_CHUNK_BYTES, MAX_LOG_BYTES, STATUS_INVALID, STATUS_NOT_ORDERED, STATUS_OK,
    STATUS_OUT_OF_MEMORY, STATUS_UNSUPPORTED,
};
use crate::fault::{PluginFault, Rule};
use crate::limits::PluginLimits;
use crate::registry::Registry;
use crate::stream_order::{NotOrdered, StreamOrders};

/// The caller tag of driver calls made for a plugin's chunks.
pub const PLUGIN_CALLER: &str = "WasmPlugin";

/// How many log lines a plugin keeps (the oldest go first).
pub const LOG_LINES: usize = 64;

/// Most table elements a guest may grow its tables to.
const MAX_TABLE_ELEMENTS: usize = 100_000;

/// One line a plugin logged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogLine {
    /// The level the guest gave (0 error, 1 warn, 2 info, 3 debug).
    pub level: i32,
    /// The message (cut at 1 KiB, invalid UTF-8 replaced). Lines the host adds (a limit
    /// reached) start with `emm:`.
    pub message: String,
}

/// The level of the lines the host adds about its limits (warn).
const HOST_LINE_LEVEL: i32 = 1;

/// The data of one plugin instance's store.
pub(crate) struct HostState {
    /// Chunks and live allocations.
    pub registry: Registry,
    /// Where chunks come from.
    pub upstream: Arc<dyn DeviceMemoryResource>,
    /// The rule or limit a host function or the limiter saw broken during this call.
    pub fault: Option<PluginFault>,
    /// The cap on linear memory.
    pub memory_cap: usize,
    /// The most chunk bytes the plugin may hold, if limited.
    pub max_held_bytes: Option<u64>,
    /// The last lines logged.
    pub logs: VecDeque<LogLine>,
    /// The last upstream failure other than out of memory, for diagnosis.
    pub upstream_error: Option<MrError>,
    /// Chunk requests answered out of memory because a limit was reached, without asking
    /// the upstream (`max_held_bytes`, `max_chunks`).
    pub limit_refusals: u64,
    /// The most chunks the plugin may hold.
    max_chunks: usize,
    /// The most log lines one call keeps, and the most host time it spends on them.
    max_log_lines: u32,
    max_log_time: Duration,
    /// The most `stream_order` calls one call into the guest may make.
    max_stream_orders: u32,
    /// The events behind `stream_order`.
    orders: StreamOrders,
    /// What the current call has logged, and whether the host said it dropped lines or
    /// refused a chunk.
    call: CallLog,
}

/// What one call into the guest has cost the host in log lines.
#[derive(Debug, Default)]
struct CallLog {
    lines: u32,
    time: Duration,
    dropped_noted: bool,
    chunk_cap_noted: bool,
    held_cap_noted: bool,
    /// `stream_order` calls that reached the driver (or were refused for the limit).
    orders: u32,
    order_failure_noted: bool,
}

impl HostState {
    pub fn new(
        registry: Registry,
        upstream: Arc<dyn DeviceMemoryResource>,
        limits: &PluginLimits,
    ) -> Self {
        HostState {
            registry,
            upstream,
            fault: None,
            memory_cap: limits.get_memory_cap(),
            max_held_bytes: limits.get_max_held_bytes(),
            logs: VecDeque::new(),
            upstream_error: None,
            limit_refusals: 0,
            max_chunks: usize::try_from(limits.get_max_chunks()).unwrap_or(usize::MAX),
            max_log_lines: limits.get_max_log_lines_per_call(),
            max_log_time: limits.get_max_log_time_per_call(),
            max_stream_orders: limits.get_max_stream_orders_per_call(),
            orders: StreamOrders::default(),
            call: CallLog::default(),
        }
    }

    /// A new call into the guest begins: its log budget is whole again.
    #[inline]
    pub fn begin_call(&mut self) {
        self.call = CallLog::default();
    }

    /// Records `fault` and returns the error that traps the guest.
    fn breach(&mut self, fault: PluginFault) -> wasmtime::Error {
        let text = fault.to_string();
        self.fault.get_or_insert(fault);
        wasmtime::Error::msg(text)
    }

    /// An `upstream_alloc` one of the plugin's limits refuses: counted, and logged with `why`
    /// when it is the first refusal by that limit in this call.
    fn refuse_over_limit(&mut self, first_in_call: bool, why: impl FnOnce() -> String) -> i32 {
        self.limit_refusals = self.limit_refusals.saturating_add(1);
        if first_in_call {
            self.push_log(HOST_LINE_LEVEL, why());
        }
        STATUS_OUT_OF_MEMORY
    }

    fn upstream_alloc(&mut self, size: i64, align: i64) -> wasmtime::Result<i32> {
        let (Ok(size), Ok(align)) = (u64::try_from(size), u64::try_from(align)) else {
            return Ok(STATUS_INVALID);
        };
        if size == 0 || size > MAX_CHUNK_BYTES || !align.is_power_of_two() {
            return Ok(STATUS_INVALID);
        }
        let (Ok(bytes), Ok(align)) = (
            usize::try_from(size),
            usize::try_from(align.max(MIN_ALIGNMENT as u64)),
        ) else {
            return Ok(STATUS_INVALID);
        };
        let held_bytes = self.registry.held_bytes;
        if let Some(max) = self
            .max_held_bytes
            .filter(|&max| held_bytes.saturating_add(size) > max)
        {
            let first = !std::mem::replace(&mut self.call.held_cap_noted, true);
            return Ok(self.refuse_over_limit(first, || {
                format!(
                    "emm: upstream_alloc({size}) answered out of memory: the plugin holds \
                     {held_bytes} bytes of chunks, and {max} is the most \
                     PluginLimits::max_held_bytes allows"
                )
            }));
        }
        let held = self.registry.held_chunks();
        if held >= self.max_chunks {
            let first = !std::mem::replace(&mut self.call.chunk_cap_noted, true);
            return Ok(self.refuse_over_limit(first, || {
                format!(
                    "emm: upstream_alloc({size}) answered out of memory: the plugin holds \
                     {held} chunks, the most PluginLimits::max_chunks allows"
                )
            }));
        }
        let _scope = CallerScope::enter(PLUGIN_CALLER);
        match self
            .upstream
            .allocate_aligned(bytes, align, StreamId::DEFAULT)
        {
            Ok(ptr) => match self.registry.add_chunk(ptr, size) {
                Ok(handle) => {
                    i32::try_from(handle).map_err(|_| self.breach(crate::fault::host_bug!()))
                }
                Err(fault) => {
                    // The chunk cannot be recorded: give it back before trapping.
                    let _ = self.upstream.deallocate(ptr, bytes, StreamId::DEFAULT);
                    Err(self.breach(fault))
                }
            },
            Err(e) if e.is_out_of_memory() => Ok(STATUS_OUT_OF_MEMORY),
            Err(e @ MrError::UnsupportedAlignment { .. }) => {
                self.upstream_error = Some(e);
                Ok(STATUS_UNSUPPORTED)
            }
            Err(e) => {
                self.upstream_error = Some(e);
                Ok(STATUS_OUT_OF_MEMORY)
            }
        }
    }

    fn upstream_free(&mut self, handle: i32) -> wasmtime::Result<i32> {
        let released = u32::try_from(handle)
            .map_err(|_| {
                (
                    Rule::ForeignChunk,
                    format!("upstream_free({handle}): not a chunk handle"),
                )
            })
            .and_then(|h| self.registry.release_chunk(h));
        match released {
            Ok(chunk) => {
                let _scope = CallerScope::enter(PLUGIN_CALLER);
                let bytes = usize::try_from(chunk.size).unwrap_or(usize::MAX);
                if let Err(e) = self
                    .upstream
                    .deallocate(chunk.base, bytes, StreamId::DEFAULT)
                {
                    self.upstream_error = Some(e);
                }
                Ok(STATUS_OK)
            }
            Err((rule, detail)) => Err(self.breach(PluginFault::BadAnswer { rule, detail })),
        }
    }

    /// `stream_order(from, to)`: `to` waits for the work queued on `from` so far. Costs the
    /// host at most two driver calls (three the first time `from` is a source), and at most
    /// [`PluginLimits::max_stream_orders_per_call`] of them per call into the guest; past
    /// that it answers [`STATUS_NOT_ORDERED`] without calling the driver.
    fn stream_order(&mut self, from: i64, to: i64) -> i32 {
        let (Ok(from_id), Ok(to_id)) = (u64::try_from(from), u64::try_from(to)) else {
            return STATUS_INVALID;
        };
        if from_id == to_id {
            return STATUS_OK;
        }
        if self.call.orders >= self.max_stream_orders {
            let max = self.max_stream_orders;
            self.note_order_failure(format!(
                "emm: stream_order({from}, {to}) and later orderings of this call answered \
                 NOT_ORDERED: the call made {max}, the most \
                 PluginLimits::max_stream_orders_per_call allows"
            ));
            return STATUS_NOT_ORDERED;
        }
        self.call.orders = self.call.orders.saturating_add(1);
        let _scope = CallerScope::enter(PLUGIN_CALLER);
        let ordered = self
            .orders
            .order(self.upstream.driver(), StreamId(from_id), StreamId(to_id));
        match ordered {
            Ok(()) => STATUS_OK,
            Err(NotOrdered::UnknownStream(e)) => {
                self.note_order_failure(format!(
                    "emm: stream_order({from}, {to}) answered INVALID: a stream the driver \
                     does not know ({e})"
                ));
                STATUS_INVALID
            }
            Err(NotOrdered::Driver(e)) => {
                self.note_order_failure(format!(
                    "emm: stream_order({from}, {to}) answered NOT_ORDERED: {e}"
                ));
                STATUS_NOT_ORDERED
            }
        }
    }

    /// Logs why an ordering failed, once per call.
    fn note_order_failure(&mut self, line: String) {
        if !self.call.order_failure_noted {
            self.call.order_failure_noted = true;
            self.push_log(HOST_LINE_LEVEL, line);
        }
    }

    /// Keeps the guest's line `ptr..ptr + len` (already checked to lie in `data`) unless
    /// this call has used its log budget; cuts it at 1 KiB.
    fn guest_log(&mut self, level: i32, data: &[u8], start: usize, len: usize) {
        if self.call.lines >= self.max_log_lines || self.call.time >= self.max_log_time {
            if !self.call.dropped_noted {
                self.call.dropped_noted = true;
                let (lines, time) = (self.max_log_lines, self.max_log_time);
                self.push_log(
                    HOST_LINE_LEVEL,
                    format!(
                        "emm: later log lines of this call are dropped \
                         (PluginLimits::max_log_lines_per_call {lines}, \
                         PluginLimits::max_log_time_per_call {time:?})"
                    ),
                );
            }
            return;
        }
        let t = Instant::now();
        let end = start.saturating_add(len.min(MAX_LOG_BYTES));
        let message =
            String::from_utf8_lossy(data.get(start..end).unwrap_or_default()).into_owned();
        self.push_log(level, message);
        self.call.lines = self.call.lines.saturating_add(1);
        self.call.time = self.call.time.saturating_add(t.elapsed());
    }

    fn push_log(&mut self, level: i32, message: String) {
        if self.logs.len() == LOG_LINES {
            self.logs.pop_front();
        }
        self.logs.push_back(LogLine { level, message });
    }
}

impl Drop for HostState {
    fn drop(&mut self) {
        let _scope = CallerScope::enter(PLUGIN_CALLER);
        self.orders.destroy(self.upstream.driver());
    }
}

impl ResourceLimiter for HostState {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.memory_cap {
            let cap = self.memory_cap;
            return Err(self.breach(PluginFault::MemoryCap { desired, cap }));
        }
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= MAX_TABLE_ELEMENTS)
    }
}

/// The range `ptr..ptr + len` of the guest's memory `data`, whole: checked before a log line
/// is cut at 1 KiB, so a range that runs past the memory is a breach however long it is.
fn guest_range(data: &[u8], ptr: i32, len: i32) -> Result<(usize, usize), String> {
    let (Ok(start), Ok(len)) = (usize::try_from(ptr), usize::try_from(len)) else {
        return Err(format!("pointer {ptr} or length {len} is negative"));
    };
    let end = start.checked_add(len).ok_or("the range overflows")?;
    if end > data.len() {
        return Err(format!(
            "{start}..{end} is outside the guest's {}",
            Bytes(data.len() as u64)
        ));
    }
    Ok((start, len))
}

/// `log(level, ptr, len)`: the range checked whole, the line kept within the call's budget.
fn log(caller: &mut Caller<'_, HostState>, level: i32, ptr: i32, len: i32) -> wasmtime::Result<()> {
    let Some(Extern::Memory(memory)) = caller.get_export(crate::abi::EXPORT_MEMORY) else {
        return Err(caller.data_mut().breach(PluginFault::BadAnswer {
            rule: Rule::BadGuestPointer,
            detail: format!("log({level}, {ptr}, {len}): the plugin exports no memory"),
        }));
    };
    let (data, state) = memory.data_and_store_mut(&mut *caller);
    match guest_range(data, ptr, len) {
        Ok((start, len)) => {
            state.guest_log(level, data, start, len);
            Ok(())
        }
        Err(detail) => Err(state.breach(PluginFault::BadAnswer {
            rule: Rule::BadGuestPointer,
            detail: format!("log({level}, {ptr}, {len}): {detail}"),
        })),
    }
}

/// A linker with the host functions of ABI v1.1.
pub(crate) fn linker(engine: &wasmtime::Engine) -> wasmtime::Result<Linker<HostState>> {
    let mut linker = Linker::new(engine);
    linker.func_wrap(
        IMPORT_MODULE,
        IMPORT_UPSTREAM_ALLOC,
        |mut caller: Caller<'_, HostState>, size: i64, align: i64| {
            caller.data_mut().upstream_alloc(size, align)
        },
    )?;
    linker.func_wrap(
        IMPORT_MODULE,
        IMPORT_UPSTREAM_FREE,
        |mut caller: Caller<'_, HostState>, handle: i32| caller.data_mut().upstream_free(handle),
    )?;
    linker.func_wrap(
        IMPORT_MODULE,
        IMPORT_LOG,
        |mut caller: Caller<'_, HostState>, level: i32, ptr: i32, len: i32| {
            log(&mut caller, level, ptr, len)
        },
    )?;
    linker.func_wrap(
        IMPORT_MODULE,
        IMPORT_STREAM_ORDER,
        |mut caller: Caller<'_, HostState>, from: i64, to: i64| -> i32 {
            caller.data_mut().stream_order(from, to)
        },
    )?;
    Ok(linker)
}
