//! [`Config`]: the blob `emm_init` receives, read as `key=value` pairs separated by commas,
//! semicolons, spaces or newlines (`chunk_bytes=67108864,slab_bytes=2097152`).

/// A plugin's configuration blob.
#[derive(Debug, Clone, Copy)]
pub struct Config<'a> {
    bytes: &'a [u8],
}

impl<'a> Config<'a> {
    /// The config in `bytes`.
    pub fn new(bytes: &'a [u8]) -> Self {
        Config { bytes }
    }

    /// The raw blob.
    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// The value of `key`, if the blob has it.
    pub fn get(&self, key: &str) -> Option<&'a str> {
        let text = core::str::from_utf8(self.bytes).ok()?;
        text.split(|c: char| c == ',' || c == ';' || c.is_whitespace())
            .filter_map(|pair| pair.split_once('='))
            .find(|(k, _)| k.trim() == key)
            .map(|(_, v)| v.trim())
    }

    /// `key` as a number: `Ok(None)` when absent, `Err` when it does not parse.
    ///
    /// # Errors
    ///
    /// [`crate::Error::Invalid`] for a value that is not an unsigned integer.
    pub fn get_u64(&self, key: &str) -> Result<Option<u64>, crate::Error> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v.parse().map(Some).map_err(|_| crate::Error::Invalid),
        }
    }
}
