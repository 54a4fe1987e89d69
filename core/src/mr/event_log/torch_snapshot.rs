//! PyTorch memory snapshots as event logs: what `torch.cuda.memory._dump_snapshot` writes
//! (a pickle, optionally gzip-compressed) after `torch.cuda.memory._record_memory_history`.
//!
//! A snapshot holds, per device, the trace of the caching allocator's actions
//! (`device_traces`) and the segments and blocks alive when it was taken (`segments`). Only
//! the program's requests are replayed:
//!
//! - `alloc` → `allocate` of the block's size (PyTorch's rounding, a multiple of 512 bytes);
//! - `free_completed` → `free`: the block became reusable (after the events of every stream
//!   that used it; `free_requested`, the program's call, comes earlier and is not replayed);
//! - `oom` → `allocate failure`;
//! - the allocator's own actions (`segment_alloc`, `segment_free`, `segment_map`,
//!   `segment_unmap`, `snapshot`) are its policy, not the program's demand, and are skipped.
//!
//! A block the trace frees but never allocates was allocated before recording began; so was an
//! `active_allocated` block of `segments` the trace never allocates. Both are allocated at the
//! start of the log, so that the replay holds what the program held. Times are microseconds
//! since the first event. One device's trace is one log: [`read_snapshot`] takes the first
//! device with events unless asked for another.

use std::io::Read;

use serde::Deserialize;

use crate::mr::event_log::{EventLog, LogAction, LogEvent, ReplayError, MICROS_PER_DAY};

/// The largest snapshot read (its pickle, decompressed): a trace of ten million events takes
/// about 200 MB.
pub const MAX_SNAPSHOT_BYTES: u64 = 1 << 30;

/// The two bytes that open a gzip stream.
const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

/// The opcode that opens a pickle of protocol 2 or later (`PROTO`).
const PICKLE_PROTO: u8 = 0x80;

#[derive(Deserialize)]
struct Snapshot {
    #[serde(default)]
    segments: Vec<Segment>,
    device_traces: Vec<Vec<TraceEntry>>,
}

#[derive(Deserialize)]
struct Segment {
    #[serde(default)]
    device: i64,
    #[serde(default)]
    stream: i64,
    #[serde(default)]
    blocks: Vec<SegmentBlock>,
    address: i64,
}

#[derive(Deserialize)]
struct SegmentBlock {
    size: i64,
    state: String,
}

#[derive(Deserialize)]
struct TraceEntry {
    action: String,
    addr: i64,
    size: i64,
    #[serde(default)]
    stream: i64,
    #[serde(default)]
    time_us: i64,
}

/// Whether `head`, a file's first bytes, opens a PyTorch snapshot (a pickle, or gzip data,
/// which a CSV log never is) rather than a CSV log.
pub fn looks_like_snapshot(head: &[u8]) -> bool {
    head.starts_with(&GZIP_MAGIC) || head.first() == Some(&PICKLE_PROTO)
}

/// Reads a PyTorch memory snapshot (pickle, or gzip-compressed pickle) from `reader` and turns
/// `device`'s trace into an event log (`None`: the first device whose trace has events).
///
/// # Errors
///
/// [`ReplayError::Snapshot`] when the data is no snapshot, holds no trace (recording was not
/// enabled), names no such device, or is larger than [`MAX_SNAPSHOT_BYTES`];
/// [`ReplayError::Io`] when reading fails.
///
/// # Time complexity
///
/// O(bytes + events log events).
pub fn read_snapshot(
    mut reader: impl Read,
    device: Option<usize>,
) -> Result<EventLog, ReplayError> {
    let mut head = [0u8; 2];
    let n = read_head(&mut reader, &mut head)?;
    let chained = std::io::Cursor::new(head[..n].to_vec()).chain(reader);
    let mut bytes = Vec::new();
    let read = if head[..n] == GZIP_MAGIC {
        flate2::read::GzDecoder::new(chained)
            .take(MAX_SNAPSHOT_BYTES + 1)
            .read_to_end(&mut bytes)
    } else {
        chained.take(MAX_SNAPSHOT_BYTES + 1).read_to_end(&mut bytes)
    };
    read.map_err(|source| ReplayError::Io { line: 0, source })?;
    if bytes.len() as u64 > MAX_SNAPSHOT_BYTES {
        return Err(snapshot_error(format!(
            "it is larger than {} MiB decompressed; replay one device's trace from a shorter \
             recording",
            MAX_SNAPSHOT_BYTES >> 20
        )));
    }
    let snapshot: Snapshot = serde_pickle::from_slice(&bytes, serde_pickle::DeOptions::new())
        .map_err(|e| {
            snapshot_error(format!(
                "it is not a PyTorch memory snapshot (a pickle of a dict with `device_traces`, \
                 as torch.cuda.memory._dump_snapshot writes): {e}"
            ))
        })?;
    to_log(snapshot, device)
}

/// Fills `head` from the start of `reader` as far as it goes; the bytes read.
fn read_head(reader: &mut impl Read, head: &mut [u8]) -> Result<usize, ReplayError> {
    let mut n = 0;
    while n < head.len() {
        match reader.read(&mut head[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(source) => return Err(ReplayError::Io { line: 0, source }),
        }
    }
    Ok(n)
}

fn snapshot_error(reason: String) -> ReplayError {
    ReplayError::Snapshot { reason }
}

/// A trace integer that must not be negative (an address, a size, a time).
fn unsigned(v: i64, what: &str, event: usize) -> Result<u64, ReplayError> {
    u64::try_from(v)
        .map_err(|_| snapshot_error(format!("trace event {event} has a negative {what} ({v})")))
}

fn to_log(snapshot: Snapshot, device: Option<usize>) -> Result<EventLog, ReplayError> {
    let traces = &snapshot.device_traces;
    let device = match device {
        Some(d) if d < traces.len() => d,
        Some(d) => {
            return Err(snapshot_error(format!(
                "it has traces for {} device(s); there is no device {d}",
                traces.len()
            )))
        }
        None => traces.iter().position(|t| !t.is_empty()).ok_or_else(|| {
            snapshot_error(
                "its trace is empty: record with torch.cuda.memory._record_memory_history() \
                 before the allocations, and take the snapshot before stopping the recording"
                    .into(),
            )
        })?,
    };
    let trace = &traces[device];
    let start = trace.iter().map(|e| e.time_us).min().unwrap_or(0);
    let mut events = Vec::with_capacity(trace.len());
    // Blocks live in the replay so far, by address: their size and stream.
    let mut live: std::collections::HashMap<u64, (u64, u64)> = Default::default();
    // Allocations made before recording began, found from their frees or the final segments.
    let mut before = Vec::new();
    for (i, e) in trace.iter().enumerate() {
        let action = match e.action.as_str() {
            "alloc" => LogAction::Allocate,
            "free_completed" => LogAction::Free,
            "oom" => LogAction::AllocateFailure,
            _ => continue,
        };
        let pointer = if action == LogAction::AllocateFailure {
            0
        } else {
            unsigned(e.addr, "address", i)?
        };
        let size = unsigned(e.size, "size", i)?;
        // Streams are pointers: any bit pattern, kept as it is.
        let stream = e.stream as u64;
        let time_us = unsigned(e.time_us.saturating_sub(start), "time", i)? % MICROS_PER_DAY;
        match action {
            LogAction::Allocate => {
                live.insert(pointer, (size, stream));
            }
            LogAction::Free => {
                if live.remove(&pointer).is_none() {
                    before.push((pointer, size, stream));
                }
            }
            LogAction::AllocateFailure => {}
        }
        events.push(LogEvent {
            thread: 0,
            time_us,
            action,
            pointer,
            size,
            stream,
        });
    }
    for seg in snapshot
        .segments
        .iter()
        .filter(|s| s.device == device as i64)
    {
        let mut addr = unsigned(seg.address, "segment address", 0)?;
        for b in &seg.blocks {
            let size = unsigned(b.size, "block size", 0)?;
            if b.state == "active_allocated" && !live.contains_key(&addr) {
                before.push((addr, size, seg.stream as u64));
            }
            addr += size;
        }
    }
    let head = before.into_iter().map(|(pointer, size, stream)| LogEvent {
        thread: 0,
        time_us: 0,
        action: LogAction::Allocate,
        pointer,
        size,
        stream,
    });
    Ok(EventLog::from_events(head.chain(events).collect()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pickle (protocol 2) of `{"device_traces": [[...]], "segments": [...]}`, written by
    /// hand from Python's opcodes so the test needs no Python.
    fn pickle(
        entries: &[(&str, i64, i64, i64, i64)],
        segments: &[(i64, &[(i64, &str)])],
    ) -> Vec<u8> {
        let mut p = vec![0x80, 2, b'}', b'(']; // PROTO 2, EMPTY_DICT, MARK
        let s = |p: &mut Vec<u8>, text: &str| {
            p.push(b'X'); // BINUNICODE
            p.extend((text.len() as u32).to_le_bytes());
            p.extend(text.as_bytes());
        };
        let int = |p: &mut Vec<u8>, v: i64| {
            p.push(0x8a); // LONG1
            p.push(8);
            p.extend(v.to_le_bytes());
        };
        s(&mut p, "device_traces");
        p.extend([b']', b']', b'(']); // EMPTY_LIST (devices), EMPTY_LIST (trace), MARK
        for &(action, addr, size, stream, time) in entries {
            p.extend([b'}', b'(']);
            s(&mut p, "action");
            s(&mut p, action);
            s(&mut p, "addr");
            int(&mut p, addr);
            s(&mut p, "size");
            int(&mut p, size);
            s(&mut p, "stream");
            int(&mut p, stream);
            s(&mut p, "time_us");
            int(&mut p, time);
            p.push(b'u'); // SETITEMS
        }
        p.extend([b'e', b'a']); // APPENDS (trace), APPEND (to devices)
        s(&mut p, "segments");
        p.extend([b']', b'(']);
        for &(address, blocks) in segments {
            p.extend([b'}', b'(']);
            s(&mut p, "address");
            int(&mut p, address);
            s(&mut p, "blocks");
            p.extend([b']', b'(']);
            for &(size, state) in blocks {
                p.extend([b'}', b'(']);
                s(&mut p, "size");
                int(&mut p, size);
                s(&mut p, "state");
                s(&mut p, state);
                p.push(b'u');
            }
            p.extend([b'e', b'u']);
        }
        p.extend([b'e', b'u', b'.']); // APPENDS, SETITEMS (the dict), STOP
        p
    }

    fn actions(log: &EventLog) -> Vec<(LogAction, u64, u64)> {
        log.events()
            .iter()
            .map(|e| (e.action, e.pointer, e.size))
            .collect()
    }

    #[test]
    fn program_requests_are_replayed_and_allocator_actions_skipped() {
        let p = pickle(
            &[
                ("segment_alloc", 0x1000_0000, 2 << 20, 0, 100),
                ("alloc", 0x1000_0000, 512, 0, 101),
                ("alloc", 0x1000_0200, 1024, 7, 102),
                ("free_requested", 0x1000_0000, 512, 0, 103),
                ("free_completed", 0x1000_0000, 512, 0, 104),
                ("oom", 0, 1 << 40, 0, 105),
            ],
            &[],
        );
        let log = read_snapshot(&p[..], None).unwrap();
        assert_eq!(
            actions(&log),
            vec![
                (LogAction::Allocate, 0x1000_0000, 512),
                (LogAction::Allocate, 0x1000_0200, 1024),
                (LogAction::Free, 0x1000_0000, 512),
                (LogAction::AllocateFailure, 0, 1 << 40),
            ]
        );
        assert_eq!(log.events()[1].stream, 7);
        assert_eq!(log.events()[0].time_us, 1);
        let s = log.summary();
        assert_eq!(
            (s.peak_live_bytes, s.never_freed, s.unknown_frees),
            (1536, 1, 0)
        );
    }

    #[test]
    fn blocks_allocated_before_recording_are_allocated_first() {
        let p = pickle(
            &[
                ("free_completed", 0x2000, 4096, 0, 10),
                ("alloc", 0x9000, 512, 0, 11),
            ],
            // A segment at 0x8000: a live block the trace never allocated, the block it did
            // allocate (at 0x9000), then a free one.
            &[(
                0x8000,
                &[
                    (0x1000, "active_allocated"),
                    (512, "active_allocated"),
                    (0x800, "inactive"),
                ][..],
            )],
        );
        let log = read_snapshot(&p[..], None).unwrap();
        assert_eq!(
            actions(&log),
            vec![
                (LogAction::Allocate, 0x2000, 4096),
                (LogAction::Allocate, 0x8000, 0x1000),
                (LogAction::Free, 0x2000, 4096),
                (LogAction::Allocate, 0x9000, 512),
            ]
        );
        assert_eq!(log.summary().unknown_frees, 0);
    }

    #[test]
    fn gzip_and_plain_read_the_same() {
        use std::io::Write;
        let p = pickle(&[("alloc", 0x1000, 512, 0, 1)], &[]);
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(&p).unwrap();
        let z = gz.finish().unwrap();
        assert!(looks_like_snapshot(&z) && looks_like_snapshot(&p));
        assert!(!looks_like_snapshot(b"Thread,Time"));
        assert_eq!(
            read_snapshot(&z[..], None).unwrap(),
            read_snapshot(&p[..], None).unwrap()
        );
    }

    #[test]
    fn what_is_no_snapshot_is_refused_with_a_reason() {
        let cases: [(&[u8], &str); 4] = [
            (b"", "not a PyTorch memory snapshot"),
            (&[0x80, 2, b'N', b'.'], "not a PyTorch memory snapshot"),
            (&[0x1f, 0x8b, 0, 0], "Io"),
            (&pickle(&[], &[]), "trace is empty"),
        ];
        for (bytes, expected) in cases {
            let e = read_snapshot(bytes, None).unwrap_err();
            let text = format!("{e} {e:?}");
            assert!(text.contains(expected), "{text}");
        }
        let p = pickle(&[("alloc", 0x1000, 512, 0, 1)], &[]);
        let e = read_snapshot(&p[..], Some(3)).unwrap_err().to_string();
        assert!(e.contains("no device 3"), "{e}");
        let p = pickle(&[("alloc", 0x1000, -5, 0, 1)], &[]);
        let e = read_snapshot(&p[..], None).unwrap_err().to_string();
        assert!(e.contains("negative size"), "{e}");
    }
}
