//! Reading a file that someone else may have put there — a plugin, a verdict record, the gate's
//! key — without blocking on it and without reading without end: the file is opened without
//! waiting (`O_NONBLOCK`, so a FIFO with no writer does not hang the open), refused unless the
//! opened file is a regular file (a FIFO, a device such as `/dev/zero`, a folder), and read
//! only up to a cap.

use std::fs::{File, OpenOptions};
use std::io::Read;
use std::path::Path;

/// Why a file was not read.
#[derive(Debug)]
pub(crate) enum ReadRefusal {
    /// The operating system's error (missing, no permission, a link where none is followed).
    Io(std::io::Error),
    /// Not a regular file: what it is.
    NotRegular(&'static str),
    /// Longer than the cap: at least this many bytes.
    TooLarge(u64),
}

impl std::fmt::Display for ReadRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadRefusal::Io(e) => write!(f, "{e}"),
            ReadRefusal::NotRegular(kind) => {
                write!(f, "it is {kind}, not a regular file, and is not read")
            }
            ReadRefusal::TooLarge(n) => write!(f, "it is at least {n} bytes"),
        }
    }
}

/// Opens `path` for reading without blocking; `follow`: whether a symbolic link at `path`
/// itself is followed. Refuses anything but a regular file, judged on the opened file.
pub(crate) fn open_regular(path: &Path, follow: bool) -> Result<File, ReadRefusal> {
    let mut options = OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        let nofollow = if follow { 0 } else { libc::O_NOFOLLOW };
        options.custom_flags(libc::O_NONBLOCK | nofollow);
    }
    let file = options.open(path).map_err(ReadRefusal::Io)?;
    let meta = file.metadata().map_err(ReadRefusal::Io)?;
    if !meta.is_file() {
        return Err(ReadRefusal::NotRegular(kind_of(&meta)));
    }
    Ok(file)
}

/// The bytes of the regular file at `path`, at most `cap` of them.
pub(crate) fn read_capped(path: &Path, cap: u64, follow: bool) -> Result<Vec<u8>, ReadRefusal> {
    let file = open_regular(path, follow)?;
    let len = file.metadata().map_err(ReadRefusal::Io)?.len();
    if len > cap {
        return Err(ReadRefusal::TooLarge(len));
    }
    let mut bytes = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
    // The file may grow while it is read: never more than one byte past the cap.
    file.take(cap.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(ReadRefusal::Io)?;
    if bytes.len() as u64 > cap {
        return Err(ReadRefusal::TooLarge(bytes.len() as u64));
    }
    Ok(bytes)
}

fn kind_of(meta: &std::fs::Metadata) -> &'static str {
    let t = meta.file_type();
    if t.is_dir() {
        return "a folder";
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if t.is_fifo() {
            return "a FIFO (named pipe)";
        }
        if t.is_char_device() {
            return "a character device";
        }
        if t.is_block_device() {
            return "a block device";
        }
        if t.is_socket() {
            return "a socket";
        }
    }
    "not a regular file"
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;

    #[test]
    fn devices_and_folders_are_refused_and_reads_stop_at_the_cap() {
        let e = read_capped(Path::new("/dev/zero"), 1 << 20, true).unwrap_err();
        assert!(
            matches!(e, ReadRefusal::NotRegular("a character device")),
            "{e}"
        );
        let e = read_capped(Path::new("/"), 1 << 20, true).unwrap_err();
        assert!(matches!(e, ReadRefusal::NotRegular("a folder")), "{e}");
        let path = std::env::temp_dir().join(format!("emm-read-{}", std::process::id()));
        std::fs::write(&path, [7u8; 100]).unwrap();
        assert_eq!(read_capped(&path, 100, true).unwrap().len(), 100);
        assert!(matches!(
            read_capped(&path, 99, true),
            Err(ReadRefusal::TooLarge(100))
        ));
        let _ = std::fs::remove_file(&path);
    }
}
