//! [`EventLog`]: a parsed memory event log, and [`LogSummary`], what the log alone says.
//!
//! Parsing is strict: the first line must be RMM's header exactly, every other line must have
//! the six fields in RMM's formats (see [`crate::mr::event_log::event`]), and the first line that
//! does not gives a [`ReplayError`] with its number, what was expected and what was found; a
//! last line cut short says that the log was truncated. Only blank lines at the very end are
//! ignored, so event `i` is always on line `i + 2`.

use std::collections::{BTreeSet, HashMap};
use std::fmt;
use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;

use crate::mr::event_log::event::{digits, hex};
use crate::mr::event_log::torch_snapshot;
use crate::mr::event_log::{LogAction, LogEvent, ReplayError, TimeOfDay, HEADER};
use crate::units::Bytes;

/// The longest line a log may have, its newline aside: an event's six fields take at most
/// about 120 bytes (RMM's), so this leaves room for any writer's spacing.
pub const MAX_LINE_BYTES: usize = 4096;

/// A parsed memory event log: its events in log order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EventLog {
    events: Vec<LogEvent>,
}

impl EventLog {
    /// A log of these events (for building one in code).
    pub fn from_events(events: Vec<LogEvent>) -> Self {
        EventLog { events }
    }

    /// Parses a log from `reader`.
    ///
    /// # Errors
    ///
    /// [`ReplayError::Empty`], [`ReplayError::Header`], [`ReplayError::Fields`],
    /// [`ReplayError::Field`] or [`ReplayError::Inconsistent`] for the first bad line;
    /// [`ReplayError::Io`] when reading fails.
    ///
    /// # Time complexity
    ///
    /// O(bytes), one buffer reused for every line.
    pub fn parse(mut reader: impl BufRead) -> Result<Self, ReplayError> {
        let mut buf = Vec::new();
        let mut line_no = 0usize;
        let mut read = |buf: &mut Vec<u8>, line_no: &mut usize| -> Result<bool, ReplayError> {
            buf.clear();
            *line_no += 1;
            // Reads no more than a line may hold (and its newline), so that a file with no
            // newline (`/dev/zero`) is refused at once rather than read into memory whole.
            let n = (&mut reader)
                .take(MAX_LINE_BYTES as u64 + 1)
                .read_until(b'\n', buf)
                .map_err(|source| ReplayError::Io {
                    line: *line_no,
                    source,
                })?;
            if n > MAX_LINE_BYTES && buf.last() != Some(&b'\n') {
                return Err(ReplayError::LineTooLong {
                    line: *line_no,
                    limit: MAX_LINE_BYTES,
                });
            }
            Ok(n > 0)
        };
        if !read(&mut buf, &mut line_no)? {
            return Err(ReplayError::Empty);
        }
        let (header, _) = text(&buf, 1)?;
        if header.trim_start_matches('\u{feff}') != HEADER {
            return Err(ReplayError::Header {
                found: shorten(header),
            });
        }
        let mut events = Vec::new();
        let mut blank_at = None;
        while read(&mut buf, &mut line_no)? {
            let (line, truncated) = text(&buf, line_no)?;
            if line.is_empty() {
                blank_at.get_or_insert(line_no);
                continue;
            }
            if let Some(blank) = blank_at {
                return Err(ReplayError::Inconsistent {
                    line: blank,
                    reason: "empty line in the middle of the log; every line after the header \
                             must be an event"
                        .to_string(),
                });
            }
            events.push(parse_line(line, line_no, truncated)?);
        }
        Ok(EventLog { events })
    }

    /// Parses a log held in a string.
    ///
    /// # Errors
    ///
    /// As [`EventLog::parse`].
    pub fn parse_str(log: &str) -> Result<Self, ReplayError> {
        EventLog::parse(log.as_bytes())
    }

    /// Reads and parses the log file at `path`: an RMM-format CSV log, or a PyTorch memory
    /// snapshot (a pickle, plain or gzip-compressed, as `torch.cuda.memory._dump_snapshot`
    /// writes it; its first device with a trace), told apart by their first bytes.
    ///
    /// # Errors
    ///
    /// As [`EventLog::parse`] or [`torch_snapshot::read_snapshot`]; [`ReplayError::Io`] at
    /// line 0 when the file cannot be opened.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self, ReplayError> {
        let path = path.as_ref();
        let file = File::open(path).map_err(|e| ReplayError::Io {
            line: 0,
            source: std::io::Error::new(
                e.kind(),
                format!("cannot open the memory event log {}: {e}", path.display()),
            ),
        })?;
        let mut reader = BufReader::new(file);
        let head = reader
            .fill_buf()
            .map_err(|source| ReplayError::Io { line: 0, source })?;
        if torch_snapshot::looks_like_snapshot(head) {
            torch_snapshot::read_snapshot(reader, None)
        } else {
            EventLog::parse(reader)
        }
    }

    /// The events, in log order.
    pub fn events(&self) -> &[LogEvent] {
        &self.events
    }

    /// The line of the log that event `index` was read from.
    pub fn line_of(index: usize) -> usize {
        index + 2
    }

    /// What the log says on its own: counts, threads, streams, peaks of live memory, and
    /// allocations it never frees.
    ///
    /// # Time complexity
    ///
    /// O(events) expected.
    pub fn summary(&self) -> LogSummary {
        let mut s = LogSummary {
            events: self.events.len(),
            ..LogSummary::default()
        };
        let mut threads = BTreeSet::new();
        let mut streams = BTreeSet::new();
        let mut live: HashMap<u64, u64> = HashMap::new();
        let mut live_bytes = 0u64;
        for e in &self.events {
            threads.insert(e.thread);
            streams.insert(e.stream);
            match e.action {
                // Zero-byte events hold nothing; replay skips them too.
                LogAction::Allocate if e.size == 0 => s.allocations += 1,
                LogAction::Free if e.size == 0 => s.frees += 1,
                LogAction::Allocate => {
                    s.allocations += 1;
                    if let Some(old) = live.insert(e.pointer, e.size) {
                        // Reallocated without a free: the earlier one was never freed.
                        live_bytes -= old;
                        s.never_freed += 1;
                    }
                    live_bytes += e.size;
                    s.peak_live_bytes = s.peak_live_bytes.max(live_bytes);
                    s.peak_live_count = s.peak_live_count.max(live.len());
                }
                LogAction::AllocateFailure => s.allocation_failures += 1,
                LogAction::Free => {
                    s.frees += 1;
                    match live.remove(&e.pointer) {
                        Some(size) => live_bytes -= size,
                        None => s.unknown_frees += 1,
                    }
                }
            }
        }
        s.never_freed += live.len();
        s.threads = threads.len();
        s.streams = streams.len();
        s
    }
}

/// What a log says on its own, before any replay.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogSummary {
    /// Events (lines after the header).
    pub events: usize,
    /// `allocate` events.
    pub allocations: usize,
    /// `allocate failure` events.
    pub allocation_failures: usize,
    /// `free` events.
    pub frees: usize,
    /// Distinct thread ids.
    pub threads: usize,
    /// Distinct streams.
    pub streams: usize,
    /// Largest sum of live sizes.
    pub peak_live_bytes: u64,
    /// Largest number of live allocations.
    pub peak_live_count: usize,
    /// Allocations the log never frees (leaks).
    pub never_freed: usize,
    /// Frees of pointers not live at the time (double or foreign frees).
    pub unknown_frees: usize,
}

impl fmt::Display for LogSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} events: {} allocations, {} allocation failures, {} frees; {} threads, {} \
             streams; peak live {} ({} bytes) in {} allocations; {} never freed, {} unknown \
             frees",
            self.events,
            self.allocations,
            self.allocation_failures,
            self.frees,
            self.threads,
            self.streams,
            Bytes(self.peak_live_bytes),
            self.peak_live_bytes,
            self.peak_live_count,
            self.never_freed,
            self.unknown_frees
        )
    }
}

/// The line as text without its line ending, and whether it lacked the final newline.
fn text(buf: &[u8], line: usize) -> Result<(&str, bool), ReplayError> {
    let truncated = !buf.ends_with(b"\n");
    let body = buf.strip_suffix(b"\n").unwrap_or(buf);
    let body = body.strip_suffix(b"\r").unwrap_or(body);
    let s = std::str::from_utf8(body).map_err(|_| ReplayError::Field {
        line,
        field: "line",
        expected: "UTF-8 text",
        found: shorten(&String::from_utf8_lossy(body)),
        truncated,
    })?;
    Ok((s, truncated))
}

/// At most 80 characters of `s`, for messages.
fn shorten(s: &str) -> String {
    match s.char_indices().nth(80) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_string(),
    }
}

fn parse_line(line: &str, line_no: usize, truncated: bool) -> Result<LogEvent, ReplayError> {
    let mut fields = [""; 6];
    let mut n = 0;
    for f in line.split(',') {
        if n < fields.len() {
            fields[n] = f;
        }
        n += 1;
    }
    if n != fields.len() {
        return Err(ReplayError::Fields {
            line: line_no,
            found: n,
            text: shorten(line),
            truncated,
        });
    }
    let bad = |field: &'static str, expected: &'static str, found: &str| ReplayError::Field {
        line: line_no,
        field,
        expected,
        found: shorten(found),
        truncated,
    };
    let [thread, time, action, pointer, size, stream] = fields;
    let event = LogEvent {
        thread: digits(thread).ok_or_else(|| bad("Thread", "a decimal thread id", thread))?,
        time_us: TimeOfDay::parse(time)
            .ok_or_else(|| bad("Time", "a time of day HH:MM:SS.ffffff", time))?
            .0,
        action: LogAction::parse(action)
            .ok_or_else(|| bad("Action", "`allocate`, `allocate failure` or `free`", action))?,
        pointer: hex(pointer).ok_or_else(|| {
            bad(
                "Pointer",
                "a hexadecimal address like 0x7f3c40000000",
                pointer,
            )
        })?,
        size: digits(size).ok_or_else(|| bad("Size", "a decimal byte count", size))?,
        stream: hex(stream)
            .ok_or_else(|| bad("Stream", "a hexadecimal stream handle like 0x0", stream))?,
    };
    if event.action != LogAction::AllocateFailure && event.pointer == 0 && event.size != 0 {
        return Err(ReplayError::Inconsistent {
            line: line_no,
            reason: format!(
                "`{}` of {} bytes at the null pointer: a logging adaptor writes a successful \
                 call only with a real address",
                event.action, event.size
            ),
        });
    }
    Ok(event)
}
