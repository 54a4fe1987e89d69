//! Byte counts for humans, as RMM's error messages print them.

use std::fmt;

/// A byte count that displays as `1.5 MiB`, `80.0 GiB`, or `512 B`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Bytes(pub u64);

impl fmt::Display for Bytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const UNITS: [&str; 6] = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
        let n = self.0;
        if n < 1024 {
            return write!(f, "{n} B");
        }
        let mut value = n as f64 / 1024.0;
        let mut unit = 0;
        while value >= 1024.0 && unit + 1 < UNITS.len() {
            value /= 1024.0;
            unit += 1;
        }
        write!(f, "{value:.1} {}", UNITS[unit])
    }
}

impl From<usize> for Bytes {
    fn from(n: usize) -> Self {
        Bytes(n as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::Bytes;

    #[test]
    fn formats_each_unit() {
        assert_eq!(Bytes(0).to_string(), "0 B");
        assert_eq!(Bytes(1023).to_string(), "1023 B");
        assert_eq!(Bytes(1536).to_string(), "1.5 KiB");
        assert_eq!(Bytes(80 << 30).to_string(), "80.0 GiB");
        assert_eq!(Bytes(1 << 50).to_string(), "1.0 PiB");
        assert_eq!(Bytes(u64::MAX).to_string(), "16.0 EiB");
    }
}
