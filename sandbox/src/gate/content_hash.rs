//! [`ContentHash`]: the sha256 of a plugin's bytes, the name a verdict is recorded under.

use std::fmt;

use sha2::{Digest, Sha256};

/// The sha256 of a plugin's `.wasm` bytes. A verdict belongs to exactly these bytes: a plugin
/// changed by one byte has another hash and needs a verdict of its own.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ContentHash([u8; 32]);

impl ContentHash {
    /// The hash of `bytes`.
    ///
    /// # Time complexity
    ///
    /// O(n) in the length of `bytes` (about 0.5 ms per MiB without SHA extensions).
    pub fn of(bytes: &[u8]) -> ContentHash {
        ContentHash(Sha256::digest(bytes).into())
    }

    /// The 32 bytes.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// The 64 lower-case hex digits, as records and the verdict store name it.
    pub fn to_hex(&self) -> String {
        hex(&self.0)
    }

    /// Reads 64 hex digits (either case); `None` for anything else.
    pub fn from_hex(text: &str) -> Option<ContentHash> {
        let text = text.as_bytes();
        if text.len() != 64 {
            return None;
        }
        let mut out = [0u8; 32];
        for (byte, pair) in out.iter_mut().zip(text.chunks_exact(2)) {
            *byte = (digit(pair[0])? << 4) | digit(pair[1])?;
        }
        Some(ContentHash(out))
    }
}

fn digit(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

/// Lower-case hex of `bytes`.
pub(crate) fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(char::from(DIGITS[usize::from(b >> 4)]));
        s.push(char::from(DIGITS[usize::from(b & 0xf)]));
    }
    s
}

impl fmt::Display for ContentHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl fmt::Debug for ContentHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sha256:{}", self.to_hex())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hash_is_sha256_in_hex_and_reads_back() {
        // FIPS 180-2's "abc" vector.
        let h = ContentHash::of(b"abc");
        assert_eq!(
            h.to_hex(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(ContentHash::from_hex(&h.to_hex()), Some(h));
        assert_eq!(ContentHash::from_hex(&h.to_hex().to_uppercase()), Some(h));
        assert_eq!(ContentHash::from_hex("abc"), None);
        assert_eq!(ContentHash::from_hex(&"g".repeat(64)), None);
        assert_ne!(ContentHash::of(b"abd"), h);
    }
}
