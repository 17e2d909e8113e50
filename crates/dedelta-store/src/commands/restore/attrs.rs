//! Restoring what a node records besides its content and mode: owner, extended attributes
//! (ACLs among them), access and modification times, holes.
//!
//! Ownership is set by numeric id, as restic does (names are recorded for display). Only root
//! can give a file away: a restore by another user sets what it may (its own uid, its groups)
//! and counts the rest, reported once as a warning rather than as an error per file, since the
//! content is restored. An attribute the target refuses (a file system without them, a
//! `security.*` or `trusted.*` one without the privilege) is counted the same way. Neither
//! makes the restore fail; a node whose owner root could not set does.

use super::target::TargetError;
use crate::format::tree::{Node, Timestamp};
use rustix::fs::{self as rfs, AtFlags, Timespec, Timestamps, XattrFlags};
use rustix::io::Errno;
use std::os::fd::BorrowedFd;

/// The file system block: a zero block of a sparse file at this alignment becomes a hole.
pub(super) const HOLE_BLOCK: usize = 4096;

/// Where a node's metadata is applied: an open handle, or a name in a directory (never
/// followed: a symlink or special file).
#[derive(Clone, Copy)]
pub(super) enum Handle<'a> {
    /// An open file or directory.
    Fd(BorrowedFd<'a>),
    /// An entry of a directory.
    At(BorrowedFd<'a>, &'a str),
}

/// A node's access and modification times.
#[derive(Clone, Copy, Debug)]
pub(super) struct Times {
    /// Access time (the modification time where none was recorded: version 1 and stdin
    /// records, directories and symlinks).
    pub atime: Timestamp,
    /// Modification time.
    pub mtime: Timestamp,
}

impl Times {
    /// The times `node` records.
    pub fn of(node: &Node) -> Times {
        let mtime = Timestamp {
            secs: node.mtime_secs,
            nanos: node.mtime_nanos,
        };
        Times {
            atime: if recorded(node) && node.meta.atime != Timestamp::default() {
                node.meta.atime
            } else {
                mtime
            },
            mtime,
        }
    }

    pub fn timestamps(self) -> Timestamps {
        let ts = |t: Timestamp| Timespec {
            tv_sec: t.secs,
            tv_nsec: t.nanos.into(),
        };
        Timestamps {
            last_access: ts(self.atime),
            last_modification: ts(self.mtime),
        }
    }
}

/// Whether `node` records an owner, times and attributes: a version 1 record, or a stream
/// backed up from standard input, has none (and a link count of 0, which no file has).
fn recorded(node: &Node) -> bool {
    node.meta.nlink > 0
}

/// Applies owners and attributes, counting what the target refused.
pub(super) struct MetaApplier {
    is_root: bool,
    /// Nodes whose owner could not be set (not root).
    pub owners_not_set: u64,
    /// Attributes that could not be set.
    pub xattrs_not_set: u64,
    /// The first attribute failure, for the warning.
    first_xattr_error: Option<String>,
}

impl MetaApplier {
    /// For the running process.
    pub fn new() -> Self {
        MetaApplier {
            is_root: uzers::get_effective_uid() == 0,
            owners_not_set: 0,
            xattrs_not_set: 0,
            first_xattr_error: None,
        }
    }

    /// Sets the owner, then the attributes (before the mode: a change of owner clears the
    /// set-user-id and set-group-id bits, and the mode is set after this).
    ///
    /// # Errors
    /// Running as root, an owner that could not be set.
    pub fn apply(&mut self, h: Handle<'_>, node: &Node) -> Result<(), TargetError> {
        self.apply_owned_by(h, node, None)
    }

    /// [`Self::apply`] for an entry whose owner (uid, gid) is known to be `current`: no
    /// `chown` when it is the node's already.
    pub fn apply_owned_by(
        &mut self,
        h: Handle<'_>,
        node: &Node,
        current: Option<(u32, u32)>,
    ) -> Result<(), TargetError> {
        if !recorded(node) {
            return Ok(());
        }
        let m = &node.meta;
        // `-1` means "unchanged" to the system call: never a real id.
        let uid = (m.uid != u32::MAX).then(|| rfs::Uid::from_raw(m.uid));
        let gid = (m.gid != u32::MAX).then(|| rfs::Gid::from_raw(m.gid));
        let unchanged = current.is_some_and(|(cu, cg)| {
            uid.is_none_or(|u| u.as_raw() == cu) && gid.is_none_or(|g| g.as_raw() == cg)
        });
        let owned = match h {
            _ if unchanged => Ok(()),
            Handle::Fd(fd) => rfs::fchown(fd, uid, gid),
            Handle::At(dir, name) => rfs::chownat(dir, name, uid, gid, AtFlags::SYMLINK_NOFOLLOW),
        };
        match owned {
            Ok(()) => {}
            Err(Errno::PERM) if !self.is_root => self.owners_not_set += 1,
            Err(e) => {
                return Err(TargetError::Io {
                    what: "setting the owner",
                    cause: e.into(),
                })
            }
        }
        // Attributes of symlinks and special files are skipped: Linux allows `user.*` ones
        // only on files and directories, and offers no call to set any other on an entry
        // that is not opened.
        let Handle::Fd(fd) = h else {
            return Ok(());
        };
        for (name, value) in &m.xattrs {
            let name_os = <std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(name);
            if let Err(e) = rfs::fsetxattr(fd, name_os, value, XattrFlags::empty()) {
                self.xattrs_not_set += 1;
                self.first_xattr_error.get_or_insert_with(|| {
                    format!(
                        "/{}: {}: {}",
                        node.path_lossy(),
                        String::from_utf8_lossy(name),
                        std::io::Error::from(e)
                    )
                });
            }
        }
        Ok(())
    }

    /// Adds what `other` (another thread's) counted.
    pub fn merge(&mut self, other: &MetaApplier) {
        self.owners_not_set += other.owners_not_set;
        self.xattrs_not_set += other.xattrs_not_set;
        if self.first_xattr_error.is_none() {
            self.first_xattr_error = other.first_xattr_error.clone();
        }
    }

    /// One warning per kind of metadata the target refused.
    pub fn warnings(&self) -> Vec<String> {
        let mut w = Vec::new();
        if self.owners_not_set > 0 {
            w.push(format!(
                "owner not restored on {} nodes: only root can set another user's \
                 ownership (they belong to uid {})",
                self.owners_not_set,
                uzers::get_effective_uid()
            ));
        }
        if let Some(first) = &self.first_xattr_error {
            w.push(format!(
                "{} extended attributes not restored (first: {first})",
                self.xattrs_not_set
            ));
        }
        w
    }
}

/// Whether `block` holds only zeros (by words: a restore of a sparse file checks every
/// block).
pub(super) fn is_zero(block: &[u8]) -> bool {
    let words = block.chunks_exact(8);
    words.remainder().iter().all(|b| *b == 0)
        && words
            .into_iter()
            .all(|c| <[u8; 8]>::try_from(c).is_ok_and(|w| u64::from_ne_bytes(w) == 0))
}
