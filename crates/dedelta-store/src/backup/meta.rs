//! Runs on: the caller's thread (the walker).
//!
//! What a backup records of a node besides its content, as restic does: everything `lstat`
//! says (owner, times, device, inode, link count, device number), the owner's user and group
//! names, the extended attributes (on Linux, ACLs are the `system.posix_acl_*` ones), and
//! whether a file is sparse. Names are looked up once per id: a tree of 100,000 files has few
//! owners.

use crate::format::tree::{Node, NodeKind, NodeMeta, Timestamp, Xattrs, FLAG_SPARSE};
use rustix::io::Errno;
use std::collections::HashMap;
use std::fs::{FileType, Metadata};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;

/// Largest extended attribute list or value read (Linux's limit for one value is 64 KiB).
const XATTR_BUFFER_BYTES: usize = 64 * 1024;

/// The kind of a node of file type `ft`.
pub(super) fn kind_of(ft: FileType) -> NodeKind {
    if ft.is_dir() {
        NodeKind::Dir
    } else if ft.is_symlink() {
        NodeKind::Symlink
    } else if ft.is_fifo() {
        NodeKind::Fifo
    } else if ft.is_socket() {
        NodeKind::Socket
    } else if ft.is_char_device() {
        NodeKind::CharDevice
    } else if ft.is_block_device() {
        NodeKind::BlockDevice
    } else {
        NodeKind::File
    }
}

/// Builds nodes from `lstat` results, caching the owner names.
#[derive(Default)]
pub(super) struct MetaReader {
    users: HashMap<u32, String>,
    groups: HashMap<u32, String>,
    buf: Vec<u8>,
}

impl MetaReader {
    /// The name of user `uid` (empty if it has none).
    fn user(&mut self, uid: u32) -> String {
        self.users
            .entry(uid)
            .or_insert_with(|| {
                uzers::get_user_by_uid(uid)
                    .map(|u| u.name().to_string_lossy().into_owned())
                    .unwrap_or_default()
            })
            .clone()
    }

    /// The name of group `gid` (empty if it has none).
    fn group(&mut self, gid: u32) -> String {
        self.groups
            .entry(gid)
            .or_insert_with(|| {
                uzers::get_group_by_gid(gid)
                    .map(|g| g.name().to_string_lossy().into_owned())
                    .unwrap_or_default()
            })
            .clone()
    }

    /// The node stored as `stored` whose metadata is `md`, without its extended attributes
    /// ([`Self::xattrs`]).
    pub fn node(&mut self, stored: Vec<u8>, md: &Metadata, kind: NodeKind) -> Node {
        let uid = md.uid();
        let gid = md.gid();
        let user = self.user(uid);
        let group = self.group(gid);
        let time = |secs: i64, nanos: i64| Timestamp {
            secs,
            nanos: u32::try_from(nanos).unwrap_or(0),
        };
        let is_file = kind == NodeKind::File;
        // Fewer blocks than the length needs: holes (a file of a few bytes in one block is
        // not sparse).
        let sparse = is_file && md.blocks().saturating_mul(512) < md.len();
        Node {
            path: stored,
            kind,
            mode: md.mode(),
            mtime_secs: md.mtime(),
            mtime_nanos: u32::try_from(md.mtime_nsec()).unwrap_or(0),
            size: if is_file { md.len() } else { 0 },
            target: Vec::new(),
            meta: NodeMeta {
                uid,
                gid,
                user,
                group,
                // Walking a directory or reading a symlink sets its atime: recording it would
                // make every backup's tree differ from the last for nothing (borg records no
                // atime at all by default). Files are read with `O_NOATIME`.
                atime: if matches!(kind, NodeKind::Dir | NodeKind::Symlink) {
                    Timestamp::default()
                } else {
                    time(md.atime(), md.atime_nsec())
                },
                ctime: time(md.ctime(), md.ctime_nsec()),
                dev: md.dev(),
                ino: md.ino(),
                nlink: md.nlink(),
                rdev: if kind.is_device() { md.rdev() } else { 0 },
                flags: if sparse { FLAG_SPARSE } else { 0 },
                xattrs: Vec::new(),
            },
        }
    }

    /// The extended attributes of `path` (not following a symlink), sorted by name; none
    /// where the file system has none.
    ///
    /// # Errors
    /// The warning to give when they cannot be read.
    pub fn xattrs(&mut self, path: &Path) -> Result<Xattrs, String> {
        self.read_xattrs(path)
            .map_err(|e| format!("{}: extended attributes not read: {e}", path.display()))
    }

    fn read_xattrs(&mut self, path: &Path) -> Result<Xattrs, Errno> {
        self.buf.resize(XATTR_BUFFER_BYTES, 0);
        let n = match rustix::fs::llistxattr(path, &mut self.buf[..]) {
            Ok(n) => n,
            Err(Errno::NOTSUP | Errno::PERM) => 0,
            Err(e) => return Err(e),
        };
        if n == 0 {
            return Ok(Vec::new());
        }
        let names: Vec<Vec<u8>> = self.buf[..n]
            .split(|b| *b == 0)
            .filter(|s| !s.is_empty())
            .map(<[u8]>::to_vec)
            .collect();
        let mut out = Vec::with_capacity(names.len());
        for name in names {
            match rustix::fs::lgetxattr(path, std::ffi::OsStr::from_bytes(&name), &mut self.buf[..])
            {
                Ok(len) => out.push((name, self.buf[..len].to_vec())),
                // Removed since it was listed.
                Err(Errno::NODATA) => {}
                Err(e) => return Err(e),
            }
        }
        out.sort();
        Ok(out)
    }
}
