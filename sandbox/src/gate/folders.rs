//! Making the gate's folders with the permissions they need.

use std::path::Path;

/// Creates `dir` (and its parents) if missing; the folders made get `mode` (on Unix): 0755 for
/// the store, 0700 for the folder of the gate's key.
pub(super) fn create_dirs(dir: &Path, mode: u32) -> std::io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        builder.mode(mode);
    }
    #[cfg(not(unix))]
    let _ = mode;
    builder.create(dir)
}
