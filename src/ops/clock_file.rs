//! The lead file: how far this node's clock ran ahead of its wall clock
//! (`converge::clock_lead`), one small file in the server's working
//! directory (its `dir`), named by the node id so that servers sharing a
//! directory keep theirs apart. Written whole under another name, then
//! renamed over the file: a reader finds the old text or the new one.

use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use crate::converge::clock_lead;

/// The lead file of node `node_id`, in the working directory.
pub fn path(node_id: u64) -> PathBuf {
    PathBuf::from(format!("rdmasync-{node_id:016x}.clock-lead"))
}

/// The lead the file at `path` keeps: `None` when there is no file.
///
/// # Errors
/// A file that cannot be read, or whose text is not a lead, said in words.
pub fn read(path: &Path) -> Result<Option<u64>, String> {
    match std::fs::read_to_string(path) {
        Ok(text) => clock_lead::decode(&text)
            .map(Some)
            .ok_or_else(|| format!("{}: not a clock lead", path.display())),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}

/// Writes a lead of `ms` to the file at `path`.
///
/// # Errors
/// The write or the rename failed.
pub fn write(path: &Path, ms: u64) -> std::io::Result<()> {
    let mut next = path.as_os_str().to_owned();
    next.push(".next");
    std::fs::write(&next, clock_lead::encode(ms))?;
    std::fs::rename(&next, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_written_lead_reads_back_and_a_missing_file_reads_as_none() {
        let dir = std::env::temp_dir().join(format!("rdmasync-clock-file-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("lead");
        assert_eq!(read(&file), Ok(None));
        write(&file, 8_000).unwrap();
        assert_eq!(read(&file), Ok(Some(8_000)));
        write(&file, 0).unwrap();
        assert_eq!(read(&file), Ok(Some(0)));
        std::fs::write(&file, "garbage").unwrap();
        assert!(read(&file).unwrap_err().contains("not a clock lead"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
