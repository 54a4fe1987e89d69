//! [`StreamMap`]: a hash map keyed by stream, for the per-stream state of the resources, so
//! that finding a stream's state costs the same with twenty thousand streams as with two.
//!
//! Stream handles are pointers (CUDA) or small counters (the simulator): one multiply by an
//! odd constant spreads them over the table, where SipHash would cost tens of nanoseconds on a
//! path that a stream's slow operations take.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use crate::driver::StreamId;

/// A stream's state by its handle.
pub(crate) type StreamMap<V> = HashMap<StreamId, V, BuildHasherDefault<HandleHasher>>;

/// Hashes one `u64` handle by a multiply (Fibonacci hashing); the table takes the high bits.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct HandleHasher(u64);

impl Hasher for HandleHasher {
    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }

    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        // Not reached for `StreamId` (it hashes one `u64`); any other key still hashes soundly.
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }

    #[inline]
    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0 ^ n).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_every_stream_among_many() {
        let mut m = StreamMap::default();
        for s in 0..20_000u64 {
            m.insert(StreamId(0x7f00_0000_0000 + s * 16), s);
        }
        assert!((0..20_000u64).all(|s| m[&StreamId(0x7f00_0000_0000 + s * 16)] == s));
        assert!(!m.contains_key(&StreamId(1)));
    }
}
