//! The index's files on disk: the run files beside the manifest, their names, their bytes,
//! and the clean-up of those no manifest names.

use super::manifest;
use super::rebuild::{spill_left_path, spill_path};
use std::collections::HashSet;
use std::path::{Path, PathBuf};

/// The path of run `seq` of the index whose manifest is `path`.
pub(super) fn run_path(path: &Path, seq: u64) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".{seq:016x}.run"));
    path.with_file_name(name)
}

/// Bytes on disk of the index whose manifest is `path`: the manifest and its run files.
pub fn files_bytes(path: &Path) -> u64 {
    let Some(dir) = path.parent() else { return 0 };
    let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
        return 0;
    };
    let prefix = format!("{name}.");
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .filter(|e| {
                    let n = e.file_name();
                    let n = n.to_string_lossy();
                    n == name || (n.starts_with(&prefix) && n.ends_with(".run"))
                })
                .filter_map(|e| e.metadata().ok())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

/// Deletes run files (and a temporary manifest) of the index at `path` that are not in `keep`.
pub(super) fn remove_orphans(path: &Path, keep: &HashSet<u64>) {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name().and_then(|n| n.to_str())) else {
        return;
    };
    let _ = std::fs::remove_file(manifest::tmp_path(path));
    let _ = std::fs::remove_file(spill_path(path));
    let _ = std::fs::remove_file(spill_left_path(&spill_path(path)));
    let prefix = format!("{name}.");
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let n = e.file_name();
        let Some(n) = n.to_str() else { continue };
        let Some(seq) = n
            .strip_prefix(&prefix)
            .and_then(|s| s.strip_suffix(".run"))
            .and_then(|s| u64::from_str_radix(s, 16).ok())
        else {
            continue;
        };
        if !keep.contains(&seq) {
            let _ = std::fs::remove_file(e.path());
        }
    }
}
