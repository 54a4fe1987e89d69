//! One line of RMM's CSV memory event log: [`LogEvent`], its [`LogAction`], the [`HEADER`].
//!
//! The format is what RMM's `logging_resource_adaptor` writes (spdlog pattern
//! `%t,%H:%M:%S.%f,%v` with `allocate,{},{},{}`, fmt formatting a `void*` and
//! `fmt::ptr(stream)`), and what its replay benchmark reads:
//!
//! ```text
//! Thread,Time,Action,Pointer,Size,Stream
//! 14007,13:45:07.123456,allocate,0x7f3c40000000,1024,0x0
//! 14007,13:45:07.123501,allocate failure,0x0,1125899906842624,0x0
//! 14012,13:45:07.123544,free,0x7f3c40000000,1024,0x55d1c8e0a6f0
//! ```
//!
//! - **Thread**: the operating-system id of the calling thread, in decimal.
//! - **Time**: the time of day, `HH:MM:SS.ffffff` (microseconds).
//! - **Action**: `allocate`, `allocate failure` (the pointer is then `0x0`) or `free`.
//! - **Pointer** and **Stream**: hexadecimal with `0x`, as fmt prints pointers (`0x0` for the
//!   null pointer and for the legacy default stream). Readers also accept them without `0x`,
//!   as RMM's newer printf-style logger writes them.
//! - **Size**: bytes, in decimal.

use std::fmt;

/// The log's first line, exactly as RMM writes it.
pub const HEADER: &str = "Thread,Time,Action,Pointer,Size,Stream";

/// Microseconds in a day: a log time is a time of day.
pub const MICROS_PER_DAY: u64 = 86_400_000_000;

/// What a log line records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LogAction {
    /// A successful allocation of `size` bytes at `pointer`.
    Allocate,
    /// An allocation of `size` bytes that failed; `pointer` is null.
    AllocateFailure,
    /// A free of `size` bytes at `pointer`.
    Free,
}

impl LogAction {
    /// The action as the log writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            LogAction::Allocate => "allocate",
            LogAction::AllocateFailure => "allocate failure",
            LogAction::Free => "free",
        }
    }

    /// The action written `s`, or `None`.
    pub fn parse(s: &str) -> Option<LogAction> {
        match s {
            "allocate" => Some(LogAction::Allocate),
            "allocate failure" => Some(LogAction::AllocateFailure),
            "free" => Some(LogAction::Free),
            _ => None,
        }
    }
}

impl fmt::Display for LogAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One event of the log. Its `Display` is the CSV line, without the newline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LogEvent {
    /// The operating-system id of the thread that made the call.
    pub thread: u64,
    /// When, in microseconds since midnight (below [`MICROS_PER_DAY`]).
    pub time_us: u64,
    /// What happened.
    pub action: LogAction,
    /// The device pointer allocated or freed (0 for a failed allocation).
    pub pointer: u64,
    /// Bytes requested or freed.
    pub size: u64,
    /// The stream, as the number of its handle (0: the legacy default stream).
    pub stream: u64,
}

impl fmt::Display for LogEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{},{},{},{:#x},{},{:#x}",
            self.thread,
            TimeOfDay(self.time_us),
            self.action,
            self.pointer,
            self.size,
            self.stream
        )
    }
}

/// Microseconds since midnight, displayed `HH:MM:SS.ffffff` (wrapping at a day).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimeOfDay(pub u64);

impl fmt::Display for TimeOfDay {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let us = self.0 % MICROS_PER_DAY;
        let secs = us / 1_000_000;
        write!(
            f,
            "{:02}:{:02}:{:02}.{:06}",
            secs / 3600,
            secs / 60 % 60,
            secs % 60,
            us % 1_000_000
        )
    }
}

impl TimeOfDay {
    /// Parses `HH:MM:SS.f…` (one to nine fraction digits; RMM writes six), or `None`.
    pub fn parse(s: &str) -> Option<TimeOfDay> {
        let (hms, frac) = s.split_once('.')?;
        let mut parts = hms.split(':');
        let mut field = |max: u64| -> Option<u64> {
            let p = parts.next()?;
            if p.len() != 2 {
                return None;
            }
            digits(p).filter(|&v| v < max)
        };
        let (h, m, sec) = (field(24)?, field(60)?, field(60)?);
        if parts.next().is_some() || frac.is_empty() || frac.len() > 9 {
            return None;
        }
        // Scale the fraction to nine digits (nanoseconds), then keep microseconds.
        let nanos = digits(frac)? * 10u64.pow(9 - frac.len() as u32);
        Some(TimeOfDay(
            ((h * 60 + m) * 60 + sec) * 1_000_000 + nanos / 1000,
        ))
    }
}

/// A string of ASCII digits as a number; `None` for anything else, empty or too large.
pub(crate) fn digits(s: &str) -> Option<u64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// A hexadecimal number with or without `0x`; `None` for anything else.
pub(crate) fn hex(s: &str) -> Option<u64> {
    let h = s
        .strip_prefix("0x")
        .or_else(|| s.strip_prefix("0X"))
        .unwrap_or(s);
    if h.is_empty() || !h.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u64::from_str_radix(h, 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_prints_as_rmm_writes_it() {
        let e = LogEvent {
            thread: 14007,
            time_us: ((13 * 60 + 45) * 60 + 7) * 1_000_000 + 123_456,
            action: LogAction::Allocate,
            pointer: 0x7f3c_4000_0000,
            size: 1024,
            stream: 0,
        };
        assert_eq!(
            e.to_string(),
            "14007,13:45:07.123456,allocate,0x7f3c40000000,1024,0x0"
        );
        let f = LogEvent {
            action: LogAction::AllocateFailure,
            pointer: 0,
            stream: 0x55d1_c8e0_a6f0,
            ..e
        };
        assert_eq!(
            f.to_string(),
            "14007,13:45:07.123456,allocate failure,0x0,1024,0x55d1c8e0a6f0"
        );
    }

    #[test]
    fn times_parse_and_print_back() {
        for s in ["00:00:00.000000", "23:59:59.999999", "13:45:07.123456"] {
            assert_eq!(
                TimeOfDay::parse(s).map(|t| t.to_string()).as_deref(),
                Some(s)
            );
        }
        assert_eq!(
            TimeOfDay::parse("01:02:03.5"),
            Some(TimeOfDay(3_723_500_000))
        );
        assert_eq!(
            TimeOfDay::parse("01:02:03.123456789"),
            Some(TimeOfDay(3_723_123_456))
        );
        for bad in [
            "24:00:00.0",
            "1:02:03.0",
            "01:60:00.0",
            "01:02:03",
            "01:02:03.",
            "01:02:03.1234567890",
            "01:02:03:04.0",
            "aa:bb:cc.0",
            "",
        ] {
            assert_eq!(TimeOfDay::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn numbers_parse_strictly() {
        assert_eq!(hex("0x7f"), Some(0x7f));
        assert_eq!(hex("7f"), Some(0x7f));
        assert_eq!(hex("0x"), None);
        assert_eq!(hex("0x1g"), None);
        assert_eq!(hex("-1"), None);
        assert_eq!(hex("0x10000000000000000"), None);
        assert_eq!(digits("42"), Some(42));
        assert_eq!(digits("+42"), None);
        assert_eq!(digits(" 42"), None);
        assert_eq!(digits("99999999999999999999"), None);
        for a in [
            LogAction::Allocate,
            LogAction::AllocateFailure,
            LogAction::Free,
        ] {
            assert_eq!(LogAction::parse(a.as_str()), Some(a));
        }
        assert_eq!(LogAction::parse("deallocate"), None);
    }
}
