//! `dedelta dump SNAPSHOT DIR`: a directory of a snapshot (`/` for all of it) as a tar stream
//! on standard output, as restic's `dump` writes one (`--archive tar`).
//!
//! Entries carry the stored path (without the leading `/`), mode, owner (ids and names) and
//! modification time; symlinks, hard links (a later path of the same inode links to the
//! first), FIFOs and devices are entries of their kind; sockets have no tar form and are
//! skipped. File content is read chunk by chunk as the tree is walked, so memory does not
//! grow with the directory.

use anyhow::Result;
use dedelta_store::format::snapshot::Snapshot;
use dedelta_store::format::tree::{Node, NodeKind};
use dedelta_store::read::{walk_tree, ChunkReader, ChunkStreamReader, Subtree};
use dedelta_store::{Error, IndexedRepository};
use std::collections::HashMap;
use std::ffi::OsStr;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use tar::{EntryType, Header};

/// Whether `path` (stored form) is `dir` or below it (`dir` empty: the whole snapshot).
fn under(path: &[u8], dir: &[u8]) -> bool {
    dir.is_empty() || path == dir || (path.starts_with(dir) && path.get(dir.len()) == Some(&b'/'))
}

/// Writes the nodes at and below `dir` (stored form, relative to `subtree`, whose paths the
/// entries carry) as a tar stream to `out`; returns the number of entries, or an error if
/// `dir` names nothing.
pub fn write_tar(
    repo: &IndexedRepository,
    snapshot: &Snapshot,
    subtree: &Subtree,
    dir: &[u8],
    out: &mut dyn Write,
) -> Result<u64> {
    let mut builder = tar::Builder::new(out);
    let mut content = ChunkReader::new(repo, super::restore::RESTORE_CACHE_MIB << 20)?;
    let mut linked: HashMap<(u64, u64), Vec<u8>> = HashMap::new();
    let mut entries = 0u64;
    let tar_err = |e: std::io::Error| Error::io("writing the tar stream", e);
    walk_tree(repo, snapshot, |node, chunks| {
        let Some(node) = subtree.view(node) else {
            return Ok(());
        };
        if !under(&node.path, dir) || node.kind == NodeKind::Socket {
            return Ok(());
        }
        let path = as_path(&node.path);
        let mut h = header(&node);
        entries += 1;
        if node.kind == NodeKind::File && node.meta.nlink > 1 && node.meta.ino != 0 {
            match linked.entry((node.meta.dev, node.meta.ino)) {
                std::collections::hash_map::Entry::Occupied(first) => {
                    h.set_entry_type(EntryType::Link);
                    h.set_size(0);
                    let target = as_path(first.get());
                    return builder.append_link(&mut h, path, target).map_err(tar_err);
                }
                std::collections::hash_map::Entry::Vacant(v) => {
                    v.insert(node.path.clone());
                }
            }
        }
        match node.kind {
            NodeKind::File => {
                let ids = chunks.iter().map(|c| c.id).collect();
                let mut data = ChunkStreamReader::new(&mut content, ids);
                builder
                    .append_data(&mut h, path, &mut data)
                    .map_err(|e| match data.take_error() {
                        Some(cause) => cause,
                        None => tar_err(e),
                    })
            }
            NodeKind::Symlink => {
                let target = as_path(&node.target);
                builder.append_link(&mut h, path, target).map_err(tar_err)
            }
            _ => builder
                .append_data(&mut h, path, std::io::empty())
                .map_err(tar_err),
        }
    })?;
    if entries == 0 {
        return Err(Error::PathNotInSnapshot {
            path: format!("/{}", String::from_utf8_lossy(dir)),
            snapshot: "the snapshot".into(),
        }
        .into());
    }
    builder.into_inner()?.flush()?;
    Ok(entries)
}

/// The tar header of `node` (its size, kind, mode, owner and time).
fn header(node: &Node) -> Header {
    let mut h = Header::new_gnu();
    let kind = match node.kind {
        NodeKind::Dir => EntryType::Directory,
        NodeKind::File => EntryType::Regular,
        NodeKind::Symlink => EntryType::Symlink,
        NodeKind::Fifo => EntryType::Fifo,
        NodeKind::CharDevice => EntryType::Char,
        NodeKind::BlockDevice => EntryType::Block,
        NodeKind::Socket => EntryType::Regular,
    };
    h.set_entry_type(kind);
    h.set_size(if node.kind == NodeKind::File {
        node.size
    } else {
        0
    });
    h.set_mode(node.mode & 0o7777);
    h.set_mtime(node.mtime_secs.max(0) as u64);
    h.set_uid(u64::from(node.meta.uid));
    h.set_gid(u64::from(node.meta.gid));
    // Names longer than the header holds are left out (the ids stay).
    let _ = h.set_username(&node.meta.user);
    let _ = h.set_groupname(&node.meta.group);
    if matches!(node.kind, NodeKind::CharDevice | NodeKind::BlockDevice) {
        let rdev = node.meta.rdev;
        let _ = h.set_device_major(libc::major(rdev as libc::dev_t));
        let _ = h.set_device_minor(libc::minor(rdev as libc::dev_t));
    }
    h
}

/// Raw bytes as a path.
fn as_path(b: &[u8]) -> &Path {
    Path::new(OsStr::from_bytes(b))
}
