//! Memory information, statistics as JSON, reset, and deferred cleanup.

use std::ffi::{c_char, c_int, CString};

use emm_core::contract::EmmError;
use emm_core::mr::LogHealth;
use serde::Serialize;

use crate::ffi::lock;
use crate::ffi::{call, status, write_out};
use crate::live_table::Stats;
use crate::runtime::runtime;
use crate::status::{CapiError, EmmStatus};

/// Writes free and total memory of `device` to `*free` and `*total`: the manager's answer, or
/// the driver's (`cuMemGetInfo`, where memory a pool keeps counts as used) when the manager
/// cannot tell.
///
/// # Safety
///
/// 1. `free` and `total` are NULL or valid for writing one `size_t` each.
#[no_mangle]
pub unsafe extern "C" fn emm_memory_info(
    device: c_int,
    free: *mut usize,
    total: *mut usize,
) -> EmmStatus {
    const F: &str = "emm_memory_info";
    status(F, || {
        if free.is_null() || total.is_null() {
            return Err(CapiError::null(
                F,
                if free.is_null() { "free" } else { "total" },
            ));
        }
        let r = runtime()?;
        let d = r.device(device)?;
        let info = match r.context(d)?.get_memory_info() {
            Ok(i) => (i.free, i.total),
            Err(EmmError::Unsupported { .. }) => {
                let m = r.in_context(d, || Ok(r.driver().mem_get_info()?))?;
                (m.free, m.total)
            }
            Err(e) => return Err(e.into()),
        };
        let size = |v: u64| usize::try_from(v).unwrap_or(usize::MAX);
        // SAFETY: both checked non-null; writable by the caller's promise (1).
        unsafe {
            write_out(F, "free", free, size(info.0))?;
            write_out(F, "total", total, size(info.1))
        }
    })
}

#[derive(Serialize)]
struct DeviceStats {
    device: u32,
    #[serde(flatten)]
    stats: Stats,
    /// Device memory the manager holds from the driver, where it tracks it.
    held_bytes: Option<u64>,
    context: bool,
    /// The allocation log's health, when the manager logs.
    log: Option<LogStats>,
}

/// What became of an allocation log's lines.
#[derive(Serialize)]
struct LogStats {
    /// Event lines not written (the first that failed and every one after it).
    lines_dropped: u64,
    /// The first write failure; `None` while the log is whole.
    failure: Option<String>,
}

impl From<LogHealth> for LogStats {
    fn from(h: LogHealth) -> Self {
        LogStats {
            lines_dropped: h.lines_dropped(),
            failure: h.failure().map(str::to_string),
        }
    }
}

#[derive(Serialize)]
struct Report {
    abi_version: u32,
    backend: &'static str,
    manager: String,
    devices: Vec<DeviceStats>,
    host_allocations: usize,
    device_buffers: usize,
}

/// The statistics as a JSON object, owned by the caller (free it with `emm_string_free`):
/// `backend`, `manager`, and for each device the bytes and allocations live now
/// (`current_bytes`, `current_allocations`), at most at once (`peak_*`) and ever (`total_*`)
/// through this library, `held_bytes` (device memory the manager holds from the driver now,
/// handed out or kept for reuse, as PyTorch's reserved bytes; `null` where the manager does
/// not track it or the device has no context yet), and `log`: `null`, or, when the manager
/// writes an allocation log (`emm_reinitialize`'s `log_file_name`), `lines_dropped` and
/// `failure` (`null` while the log is whole); `host_allocations`, `device_buffers`. NULL on
/// failure (see `emm_last_error_message`).
#[no_mangle]
pub extern "C" fn emm_stats_json() -> *mut c_char {
    call(
        "emm_stats_json",
        |_| std::ptr::null_mut(),
        || {
            let r = runtime()?;
            let contexts = r.contexts();
            let devices = (0..r.device_count() as i32)
                .map(|i| {
                    let d = r.device(i)?;
                    let context = contexts.iter().find(|(c, _)| *c == d);
                    Ok(DeviceStats {
                        device: d.0,
                        stats: r.live(d).stats(),
                        held_bytes: context.and_then(|(_, c)| c.held_bytes()),
                        context: context.is_some(),
                        log: r.log(d).map(LogStats::from),
                    })
                })
                .collect::<Result<Vec<_>, CapiError>>()?;
            let report = Report {
                abi_version: crate::EMM_ABI_VERSION,
                backend: r.driver().backend_name(),
                manager: r.manager_name(),
                devices,
                host_allocations: lock(&r.host).len(),
                device_buffers: r.buffers.len(),
            };
            let text = serde_json::to_string(&report)
                .map_err(|e| CapiError::new(EmmStatus::Panic, format!("emm_stats_json: {e}")))?;
            // JSON text has no NUL bytes.
            Ok(CString::new(text).unwrap_or_default().into_raw())
        },
    )
}

/// Whether `device`'s allocation log (`emm_reinitialize`'s `log_file_name`) holds every event
/// so far (-1: every device's). `EMM_STATUS_OK` when it does, or when nothing is logged;
/// `EMM_STATUS_IO` when writing it failed (a full disk): allocations went on, and the message
/// says what failed and how many lines were lost.
#[no_mangle]
pub extern "C" fn emm_log_check(device: c_int) -> EmmStatus {
    status("emm_log_check", || {
        let r = runtime()?;
        let devices = if device == -1 {
            (0..r.device_count() as i32)
                .map(|i| r.device(i))
                .collect::<Result<Vec<_>, _>>()?
        } else {
            vec![r.device(device)?]
        };
        for d in devices {
            let Some(log) = r.log(d) else { continue };
            if let Some(failure) = log.failure() {
                return Err(CapiError::new(
                    EmmStatus::Io,
                    format!(
                        "emm_log_check: device {}: {failure} ({} event lines lost so far)",
                        d.0,
                        log.lines_dropped()
                    ),
                ));
            }
        }
        Ok(())
    })
}

/// Restarts the peak figures of `emm_stats_json` from what is live now (every device).
#[no_mangle]
pub extern "C" fn emm_reset_peak_stats() -> EmmStatus {
    status("emm_reset_peak_stats", || {
        let r = runtime()?;
        for i in 0..r.device_count() as i32 {
            r.live(r.device(i)?).reset_peaks();
        }
        Ok(())
    })
}

/// Frees a string emm returned (`emm_stats_json`). NULL is ignored.
///
/// # Safety
///
/// 1. `s` is NULL or a string returned by emm and not freed yet.
#[no_mangle]
pub unsafe extern "C" fn emm_string_free(s: *mut c_char) {
    if s.is_null() {
        return;
    }
    call(
        "emm_string_free",
        |_| (),
        || {
            // SAFETY: made by CString::into_raw in this library and not freed yet (1).
            drop(unsafe { CString::from_raw(s) });
            Ok(())
        },
    );
}

/// Resets the manager of `device` (-1: every device with a context): frees what it keeps
/// (pending deallocations, a pool's free memory). Live allocations stay valid.
#[no_mangle]
pub extern "C" fn emm_reset(device: c_int) -> EmmStatus {
    status("emm_reset", || {
        let r = runtime()?;
        if device == -1 {
            let mut first = Ok(());
            for (_, c) in r.contexts() {
                let res = c.reset();
                if first.is_ok() {
                    first = res;
                }
            }
            return Ok(first?);
        }
        let d = r.device(device)?;
        Ok(r.context(d)?.reset()?)
    })
}

/// Defers the cleanup of `device`'s manager (Numba's `defer_cleanup`) until
/// `emm_defer_cleanup_end(*token)`; deferrals nest.
///
/// # Safety
///
/// 1. `token` is NULL or valid for writing one `uint64_t`.
#[no_mangle]
pub unsafe extern "C" fn emm_defer_cleanup_begin(device: c_int, token: *mut u64) -> EmmStatus {
    const F: &str = "emm_defer_cleanup_begin";
    status(F, || {
        CapiError::non_null(F, "token", token)?;
        let r = runtime()?;
        let t = r.begin_deferral(r.device(device)?)?;
        // SAFETY: checked non-null; writable by the caller's promise (1).
        unsafe { write_out(F, "token", token, t) }
    })
}

/// Ends the deferral `token` from `emm_defer_cleanup_begin`.
#[no_mangle]
pub extern "C" fn emm_defer_cleanup_end(token: u64) -> EmmStatus {
    status("emm_defer_cleanup_end", || runtime()?.end_deferral(token))
}
