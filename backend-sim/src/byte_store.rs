//! [`ByteStore`]: what memory holds, an owned part of the state: the bytes written so far, in
//! chunks of [`CHUNK`] bytes by address. Bytes never written, and freed ones, read as
//! [`POISON`]. With contents tracking off it keeps nothing and every read gives `POISON`.

use std::collections::BTreeMap;

/// Bytes of a contents chunk: the unit in which written memory is stored (and the gap left
/// after each allocation's addresses).
pub(crate) const CHUNK: u64 = 4096;
/// What uninitialized and freed memory reads as.
pub const POISON: u8 = 0xA5;

/// The bytes written to memory, by chunk.
///
/// Invariant: every key is a multiple of [`CHUNK`] and every chunk holds `CHUNK` bytes; the
/// map is empty when tracking is off.
#[derive(Debug)]
pub(crate) struct ByteStore {
    /// Whether contents are kept at all (`SimConfig::track_contents`).
    track: bool,
    chunks: BTreeMap<u64, Box<[u8]>>,
}

impl ByteStore {
    /// An empty store that keeps what is written when `track`.
    pub(crate) fn new(track: bool) -> Self {
        ByteStore {
            track,
            chunks: BTreeMap::new(),
        }
    }

    /// Whether contents are kept.
    #[inline]
    pub(crate) fn tracks(&self) -> bool {
        self.track
    }

    /// Stores `src` at `addr`.
    pub(crate) fn write(&mut self, mut addr: u64, mut src: &[u8]) {
        if !self.track {
            return;
        }
        while !src.is_empty() {
            let chunk = addr & !(CHUNK - 1);
            let off = (addr - chunk) as usize;
            let n = src.len().min(CHUNK as usize - off);
            let buf = self
                .chunks
                .entry(chunk)
                .or_insert_with(|| vec![POISON; CHUNK as usize].into_boxed_slice());
            buf[off..off + n].copy_from_slice(&src[..n]);
            src = &src[n..];
            addr += n as u64;
        }
    }

    /// Reads `dst.len()` bytes at `addr` into `dst`.
    pub(crate) fn read(&self, mut addr: u64, mut dst: &mut [u8]) {
        if !self.track {
            dst.fill(POISON);
            return;
        }
        while !dst.is_empty() {
            let chunk = addr & !(CHUNK - 1);
            let off = (addr - chunk) as usize;
            let n = dst.len().min(CHUNK as usize - off);
            match self.chunks.get(&chunk) {
                Some(buf) => dst[..n].copy_from_slice(&buf[off..off + n]),
                None => dst[..n].fill(POISON),
            }
            dst = &mut dst[n..];
            addr += n as u64;
        }
    }

    /// Sets `len` bytes at `addr` to `value`.
    pub(crate) fn fill(&mut self, addr: u64, value: u8, len: u64) {
        if !self.track {
            return;
        }
        let mut done = 0;
        let block = vec![value; CHUNK as usize];
        while done < len {
            let n = (len - done).min(CHUNK - ((addr + done) & (CHUNK - 1)));
            self.write(addr + done, &block[..n as usize]);
            done += n;
        }
    }

    /// Poisons `len` bytes at `addr` (freed memory): whole chunks are dropped and read back as
    /// [`POISON`].
    pub(crate) fn poison(&mut self, addr: u64, len: u64) {
        if !self.track || self.chunks.is_empty() {
            return;
        }
        let first = addr & !(CHUNK - 1);
        let chunks: Vec<u64> = self
            .chunks
            .range(first..addr + len)
            .map(|(k, _)| *k)
            .collect();
        for c in chunks {
            let (lo, hi) = (c.max(addr), (c + CHUNK).min(addr + len));
            if lo == c && hi == c + CHUNK {
                self.chunks.remove(&c);
            } else if let Some(buf) = self.chunks.get_mut(&c) {
                buf[(lo - c) as usize..(hi - c) as usize].fill(POISON);
            }
        }
    }

    /// Copies the stored bytes of `len` bytes at `from` to `to` (both [`CHUNK`] aligned),
    /// replacing what `to` held.
    pub(crate) fn copy_range(&mut self, from: u64, to: u64, len: u64) {
        if !self.track {
            return;
        }
        self.poison(to, len);
        let copies: Vec<(u64, Box<[u8]>)> = self
            .chunks
            .range(from..from + len)
            .map(|(&k, c)| (to + (k - from), c.clone()))
            .collect();
        self.chunks.extend(copies);
    }

    /// Moves the stored bytes of `len` bytes at `from` to `to` (both [`CHUNK`] aligned).
    pub(crate) fn move_range(&mut self, from: u64, to: u64, len: u64) {
        if !self.track {
            return;
        }
        let keys: Vec<u64> = self
            .chunks
            .range(from..from + len)
            .map(|(&k, _)| k)
            .collect();
        for k in keys {
            if let Some(chunk) = self.chunks.remove(&k) {
                self.chunks.insert(to + (k - from), chunk);
            }
        }
    }
}
