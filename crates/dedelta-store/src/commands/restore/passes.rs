//! The walks of a snapshot's tree around the restore itself: before it, the check that every
//! `--include` matches something and the dry run (`plan`); after it, `--verify` (each restored
//! file read back and its chunks' fingerprints compared with the snapshot's) and `--delete`
//! (what the target holds within the selection but the snapshot does not, removed).

use super::select::{Overwrite, Selector};
use super::{NodeError, RestoreStats};
use crate::error::{Error, Result};
use crate::format::snapshot::Snapshot;
use crate::format::tree::NodeKind;
use crate::progress::Progress;
use crate::read::{walk_tree_restoring, Subtree};
use crate::repository::IndexedRepository;
use std::collections::HashSet;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// What the target holds at `path` (stored form), not following a final symlink.
pub(super) fn existing(target: &Path, path: &[u8]) -> Option<std::fs::Metadata> {
    std::fs::symlink_metadata(target.join(std::ffi::OsStr::from_bytes(path))).ok()
}

/// Walks the tree once before a restore: fails if an include pattern matches nothing, and
/// counts what the restore would write (the result of `--dry-run`).
pub(super) fn plan(
    repo: &IndexedRepository,
    snapshot: &Snapshot,
    subtree: &Subtree,
    selector: &Selector,
    overwrite: Overwrite,
    target: &Path,
    progress: &dyn Progress,
) -> Result<RestoreStats> {
    let mut hit = selector.no_hits();
    let mut st = RestoreStats::default();
    walk_tree_restoring(repo, snapshot, subtree, |node, _| {
        selector.mark_hits(&node.path, &mut hit);
        if !selector.selects(&node.path) {
            return Ok(());
        }
        let replace = existing(target, &node.path).is_none_or(|e| overwrite.replaces(&node, &e));
        match node.kind {
            NodeKind::Dir => st.dirs += 1,
            NodeKind::File if !replace => st.files_unchanged += 1,
            NodeKind::File => {
                st.files += 1;
                st.bytes_written += node.size;
            }
            _ if !replace => {}
            NodeKind::Symlink => st.symlinks += 1,
            _ => st.special_files += 1,
        }
        let action = if replace { "restored" } else { "unchanged" };
        progress.item(action, &format!("/{}", node.path_lossy()), node.size);
        Ok(())
    })?;
    selector.unmatched(&hit)?;
    Ok(st)
}

/// `--verify`: reads back each selected regular file from the target and compares its chunks
/// with the snapshot's recipe; a file that differs or cannot be read is an error of `st`.
pub(super) fn verify(
    repo: &IndexedRepository,
    snapshot: &Snapshot,
    subtree: &Subtree,
    selector: &Selector,
    target: &Path,
    st: &mut RestoreStats,
) -> Result<()> {
    let failed: HashSet<Vec<u8>> = st.errors.iter().map(|e| e.path.clone()).collect();
    let mut verified = 0u64;
    let mut problems = Vec::new();
    let mut buf = Vec::new();
    // An encrypted repository's chunk ids are keyed hashes: plain BLAKE3 differs from every one.
    let hasher = repo.chunk_hasher();
    walk_tree_restoring(repo, snapshot, subtree, |node, chunks| {
        if node.kind != NodeKind::File
            || !selector.selects(&node.path)
            || failed.contains(&node.path)
        {
            return Ok(());
        }
        let p = target.join(std::ffi::OsStr::from_bytes(&node.path));
        let outcome = (|| -> std::result::Result<(), String> {
            let mut f = open_nofollow(&p).map_err(|e| format!("cannot read it back: {e}"))?;
            for (i, c) in chunks.iter().enumerate() {
                buf.resize(c.len as usize, 0);
                f.read_exact(&mut buf)
                    .map_err(|e| format!("shorter than the snapshot's (chunk {i}): {e}"))?;
                if hasher.id(&buf) != c.id {
                    return Err(format!("content differs from the snapshot's in chunk {i}"));
                }
            }
            let mut extra = [0u8; 1];
            match f.read(&mut extra) {
                Ok(0) => Ok(()),
                Ok(_) => Err("longer than the snapshot's".into()),
                Err(e) => Err(format!("cannot read it back: {e}")),
            }
        })();
        match outcome {
            Ok(()) => verified += 1,
            Err(message) => problems.push(NodeError {
                path: node.path.clone(),
                message: format!("verify: {message}"),
            }),
        }
        Ok(())
    })?;
    st.errors.extend(problems);
    st.files_verified = Some(verified);
    Ok(())
}

/// Opens a file for reading without following a symlink in its place.
fn open_nofollow(p: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(p)
}

/// `--delete`: removes what the target holds within the selection that the snapshot does not
/// (a directory with everything in it). Symlinks are removed, never followed.
pub(super) fn delete(
    repo: &IndexedRepository,
    snapshot: &Snapshot,
    subtree: &Subtree,
    selector: &Selector,
    target: &Path,
    st: &mut RestoreStats,
    progress: &dyn Progress,
) -> Result<()> {
    let mut keep: HashSet<Vec<u8>> = HashSet::new();
    walk_tree_restoring(repo, snapshot, subtree, |node, _| {
        // The directories above the sources are in the target but not in the tree.
        for (i, b) in node.path.iter().enumerate() {
            if *b == b'/' && !keep.contains(&node.path[..i]) {
                keep.insert(node.path[..i].to_vec());
            }
        }
        keep.insert(node.path);
        Ok(())
    })?;
    let root = target
        .canonicalize()
        .map_err(|e| Error::io(format!("resolving {}", target.display()), e))?;
    let mut it = walkdir::WalkDir::new(&root)
        .min_depth(1)
        .follow_links(false)
        .sort_by(|a, b| a.file_name().cmp(b.file_name()))
        .into_iter();
    while let Some(ent) = it.next() {
        let ent = match ent {
            Ok(e) => e,
            Err(e) => {
                st.warnings.push(format!("--delete: {e}"));
                continue;
            }
        };
        let Ok(rel) = ent.path().strip_prefix(&root) else {
            continue;
        };
        let rel = rel.as_os_str().as_bytes();
        if keep.contains(rel) {
            continue;
        }
        let is_dir = ent.file_type().is_dir();
        if !selector.selects(rel) {
            continue;
        }
        if is_dir {
            it.skip_current_dir();
        }
        let removed = if is_dir {
            std::fs::remove_dir_all(ent.path())
        } else {
            std::fs::remove_file(ent.path())
        };
        match removed {
            Ok(()) => {
                st.deleted += 1;
                progress.item("deleted", &format!("/{}", String::from_utf8_lossy(rel)), 0);
            }
            Err(e) => st.errors.push(NodeError {
                path: rel.to_vec(),
                message: format!("--delete: {e}"),
            }),
        }
    }
    Ok(())
}
