//! The tree stream: a snapshot's file metadata and recipes as one byte stream.
//!
//! A depth-first, name-sorted list of records (directory, file, symlink). A file record holds
//! its recipe: the chunk references (length, fingerprint) that rebuild its content. The stream
//! is stored through the chunk store itself (chunked, deduplicated, compressed), so a snapshot
//! that changes little adds little metadata; it is written and read incrementally, so no
//! snapshot needs its whole tree in memory. Paths share their prefix with the previous record's
//! path. Byte layout in docs/format.md ("Tree stream").
//!
//! The stream is exactly the header, the records and the end tag: the decoder refuses bytes
//! after the end tag, so a tree reference that names too many chunks is caught rather than
//! silently cut short. What the decoder does not check, because it needs the recipe's chunks or
//! the file system, is left to its callers and stated in the document: a file's `size` equals
//! the sum of its recipe's chunk lengths, and paths have no `.`, `..` or empty component.

use crate::error::{Error, Result};
use dedelta_core::{varint, ChunkId};
use std::io::Read;

/// Stream magic.
pub const TREE_MAGIC: &[u8; 4] = b"DDTR";
/// Stream format version written. Version 2 added owner, group, atime, ctime, device, inode,
/// link count, flags and extended attributes to every record, and the special-file tags 4-7;
/// version 1 streams are still read (their nodes have [`NodeMeta::default`]).
pub const TREE_VERSION: u8 = 2;
/// The first stream version, still read.
pub const TREE_VERSION_1: u8 = 1;
/// Record tag: end of stream.
pub const TAG_END: u8 = 0;
/// Record tag: directory.
pub const TAG_DIR: u8 = 1;
/// Record tag: regular file.
pub const TAG_FILE: u8 = 2;
/// Record tag: symbolic link.
pub const TAG_SYMLINK: u8 = 3;
/// Record tag: named pipe (version 2).
pub const TAG_FIFO: u8 = 4;
/// Record tag: Unix domain socket (version 2).
pub const TAG_SOCKET: u8 = 5;
/// Record tag: character device (version 2).
pub const TAG_CHAR_DEVICE: u8 = 6;
/// Record tag: block device (version 2).
pub const TAG_BLOCK_DEVICE: u8 = 7;
/// Most extended attributes the decoder accepts on one record.
pub const MAX_XATTRS: u64 = 4096;
/// Record flag: the file was sparse when backed up (restore writes zero blocks as holes).
pub const FLAG_SPARSE: u64 = 1;
/// Longest path or link target accepted by the decoder.
pub const MAX_PATH_LEN: u64 = 64 * 1024;

/// What a node is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum NodeKind {
    /// A directory.
    Dir,
    /// A regular file.
    File,
    /// A symbolic link.
    Symlink,
    /// A named pipe.
    Fifo,
    /// A Unix domain socket.
    Socket,
    /// A character device.
    #[serde(rename = "chardev")]
    CharDevice,
    /// A block device.
    #[serde(rename = "blockdev")]
    BlockDevice,
}

impl NodeKind {
    /// The record tag.
    fn tag(self) -> u8 {
        match self {
            NodeKind::Dir => TAG_DIR,
            NodeKind::File => TAG_FILE,
            NodeKind::Symlink => TAG_SYMLINK,
            NodeKind::Fifo => TAG_FIFO,
            NodeKind::Socket => TAG_SOCKET,
            NodeKind::CharDevice => TAG_CHAR_DEVICE,
            NodeKind::BlockDevice => TAG_BLOCK_DEVICE,
        }
    }

    /// Whether the node is a device (its record holds `rdev`).
    pub fn is_device(self) -> bool {
        matches!(self, NodeKind::CharDevice | NodeKind::BlockDevice)
    }
}

/// Extended attributes: (name, value) pairs, sorted by name.
pub type Xattrs = Vec<(Vec<u8>, Vec<u8>)>;

/// A time stamp: seconds since the epoch and nanoseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Timestamp {
    /// Seconds since 1970-01-01 UTC.
    pub secs: i64,
    /// Nanoseconds (below 10^9).
    pub nanos: u32,
}

/// What a record holds besides its path, kind, mode, mtime, size and target: the rest of
/// `lstat` and the extended attributes (tree version 2; all zero or empty in a version 1
/// stream).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeMeta {
    /// Owner's user id.
    pub uid: u32,
    /// Owner's group id.
    pub gid: u32,
    /// Owner's user name (empty when the id has none).
    pub user: String,
    /// Owner's group name (empty when the id has none).
    pub group: String,
    /// Last access time.
    pub atime: Timestamp,
    /// Last status change time (recorded, never restored: the kernel sets it).
    pub ctime: Timestamp,
    /// Device of the file system holding the node (`st_dev`).
    pub dev: u64,
    /// Inode number (`st_ino`).
    pub ino: u64,
    /// Hard link count (`st_nlink`): a file with more than one is restored as hard links to
    /// the first of its paths restored with the same `dev` and `ino`.
    pub nlink: u64,
    /// Device number of a character or block device (`st_rdev`); 0 otherwise.
    pub rdev: u64,
    /// [`FLAG_SPARSE`] and future flags.
    pub flags: u64,
    /// Extended attributes (ACLs are `system.posix_acl_*` ones), sorted by name.
    pub xattrs: Xattrs,
}

impl NodeMeta {
    /// Whether the file was sparse when backed up.
    pub fn sparse(&self) -> bool {
        self.flags & FLAG_SPARSE != 0
    }
}

/// One file-system object in a snapshot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Node {
    /// Relative path, `/`-separated, raw bytes (no leading `/`).
    pub path: Vec<u8>,
    /// Kind.
    pub kind: NodeKind,
    /// Unix permission bits (and type bits, as `st_mode`).
    pub mode: u32,
    /// Modification time, seconds since the epoch.
    pub mtime_secs: i64,
    /// Nanoseconds part of the modification time.
    pub mtime_nanos: u32,
    /// Size in bytes (files); 0 otherwise.
    pub size: u64,
    /// Link target (symlinks); empty otherwise.
    pub target: Vec<u8>,
    /// Owner, other times, inode, attributes (version 2).
    pub meta: NodeMeta,
}

impl Node {
    /// The path for display.
    pub fn path_lossy(&self) -> String {
        String::from_utf8_lossy(&self.path).into_owned()
    }
}

/// A reference to a chunk in a recipe.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkRef {
    /// Fingerprint.
    pub id: ChunkId,
    /// Length of the chunk in bytes (never 0).
    pub len: u32,
}

/// Encodes records into a byte buffer that the caller drains and stores.
#[derive(Debug, Default)]
pub struct TreeEncoder {
    prev_path: Vec<u8>,
}

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

/// A length-prefixed byte string.
fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    varint::put(out, b.len() as u64);
    out.extend_from_slice(b);
}

/// A time: zigzag seconds, then nanoseconds.
fn put_time(out: &mut Vec<u8>, t: Timestamp) {
    varint::put(out, zigzag(t.secs));
    varint::put(out, u64::from(t.nanos));
}

impl TreeEncoder {
    /// Writes the stream header.
    pub fn begin(&mut self, out: &mut Vec<u8>) {
        out.extend_from_slice(TREE_MAGIC);
        out.push(TREE_VERSION);
    }

    fn header(&mut self, node: &Node, out: &mut Vec<u8>) {
        out.push(node.kind.tag());
        let shared = self
            .prev_path
            .iter()
            .zip(&node.path)
            .take_while(|(a, b)| a == b)
            .count();
        varint::put(out, shared as u64);
        put_bytes(out, &node.path[shared..]);
        self.prev_path.clone_from(&node.path);
        varint::put(out, u64::from(node.mode));
        put_time(
            out,
            Timestamp {
                secs: node.mtime_secs,
                nanos: node.mtime_nanos,
            },
        );
        let m = &node.meta;
        varint::put(out, m.flags);
        varint::put(out, u64::from(m.uid));
        varint::put(out, u64::from(m.gid));
        put_bytes(out, m.user.as_bytes());
        put_bytes(out, m.group.as_bytes());
        put_time(out, m.atime);
        put_time(out, m.ctime);
        varint::put(out, m.dev);
        varint::put(out, m.ino);
        varint::put(out, m.nlink);
        varint::put(out, m.xattrs.len() as u64);
        for (name, value) in &m.xattrs {
            put_bytes(out, name);
            put_bytes(out, value);
        }
        match node.kind {
            NodeKind::File => varint::put(out, node.size),
            NodeKind::Symlink => put_bytes(out, &node.target),
            NodeKind::CharDevice | NodeKind::BlockDevice => varint::put(out, m.rdev),
            NodeKind::Dir | NodeKind::Fifo | NodeKind::Socket => {}
        }
    }

    /// A record of anything but a file (a directory, symlink or special file).
    pub fn node(&mut self, node: &Node, out: &mut Vec<u8>) {
        debug_assert!(node.kind != NodeKind::File);
        self.header(node, out);
    }

    /// Starts a file record; follow with [`Self::chunk`]s and [`Self::file_end`].
    pub fn file_start(&mut self, node: &Node, out: &mut Vec<u8>) {
        debug_assert!(node.kind == NodeKind::File);
        self.header(node, out);
    }

    /// One chunk of the current file's recipe.
    pub fn chunk(&mut self, r: &ChunkRef, out: &mut Vec<u8>) {
        debug_assert!(r.len > 0);
        varint::put(out, u64::from(r.len));
        out.extend_from_slice(r.id.as_bytes());
    }

    /// Ends the current file's recipe.
    pub fn file_end(&mut self, out: &mut Vec<u8>) {
        out.push(0);
    }

    /// Ends the stream.
    pub fn end(&mut self, out: &mut Vec<u8>) {
        out.push(TAG_END);
    }
}

/// Decodes a tree stream from any reader, one node at a time.
pub struct TreeDecoder<R: Read> {
    inner: R,
    prev_path: Vec<u8>,
    /// The stream's version, once its header is read.
    version: Option<u8>,
    done: bool,
}

impl<R: Read> TreeDecoder<R> {
    /// A decoder over `inner` (positioned at the stream header).
    pub fn new(inner: R) -> Self {
        TreeDecoder {
            inner,
            prev_path: Vec::new(),
            version: None,
            done: false,
        }
    }

    /// The reader, to ask it why a read failed.
    pub fn get_mut(&mut self) -> &mut R {
        &mut self.inner
    }

    /// The reader (after the end of the stream: it has been read to its end).
    pub fn into_inner(self) -> R {
        self.inner
    }

    fn byte(&mut self) -> Result<u8> {
        let mut b = [0u8; 1];
        self.inner
            .read_exact(&mut b)
            .map_err(|e| Error::corrupt("tree stream", format!("truncated: {e}")))?;
        Ok(b[0])
    }

    fn varint(&mut self) -> Result<u64> {
        let mut v: u64 = 0;
        for i in 0..10u32 {
            let b = self.byte()?;
            let low = u64::from(b & 0x7f);
            if i == 9 && low > 1 {
                break;
            }
            v |= low << (7 * i);
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(Error::corrupt("tree stream", "overlong varint"))
    }

    fn bytes(&mut self, n: u64) -> Result<Vec<u8>> {
        if n > MAX_PATH_LEN {
            return Err(Error::corrupt(
                "tree stream",
                format!("implausible length {n}"),
            ));
        }
        let mut v = vec![0u8; n as usize];
        self.inner
            .read_exact(&mut v)
            .map_err(|e| Error::corrupt("tree stream", format!("truncated: {e}")))?;
        Ok(v)
    }

    /// Checks that nothing follows the end record: the stream is exactly the header, the
    /// records and tag 0, so trailing bytes mean the tree reference or the chunks are wrong.
    fn expect_eof(&mut self) -> Result<()> {
        let mut b = [0u8; 1];
        loop {
            match self.inner.read(&mut b) {
                Ok(0) => return Ok(()),
                Ok(_) => return Err(Error::corrupt("tree stream", "bytes follow the end record")),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    return Err(Error::corrupt(
                        "tree stream",
                        format!("after the end record: {e}"),
                    ))
                }
            }
        }
    }

    fn time(&mut self) -> Result<Timestamp> {
        let secs = unzigzag(self.varint()?);
        let nanos = u32::try_from(self.varint()?)
            .ok()
            .filter(|n| *n < 1_000_000_000)
            .ok_or_else(|| Error::corrupt("tree stream", "nanoseconds out of range"))?;
        Ok(Timestamp { secs, nanos })
    }

    /// A user or group name (lossy: names are meant for display).
    fn name(&mut self) -> Result<String> {
        let n = self.varint()?;
        Ok(String::from_utf8_lossy(&self.bytes(n)?).into_owned())
    }

    /// The version 2 fields common to every record.
    fn meta(&mut self) -> Result<NodeMeta> {
        let id = |v: u64| {
            u32::try_from(v).map_err(|_| Error::corrupt("tree stream", "owner id out of range"))
        };
        let flags = self.varint()?;
        let uid = id(self.varint()?)?;
        let gid = id(self.varint()?)?;
        let user = self.name()?;
        let group = self.name()?;
        let atime = self.time()?;
        let ctime = self.time()?;
        let dev = self.varint()?;
        let ino = self.varint()?;
        let nlink = self.varint()?;
        let count = self.varint()?;
        if count > MAX_XATTRS {
            return Err(Error::corrupt(
                "tree stream",
                format!("implausible extended attribute count {count}"),
            ));
        }
        let mut xattrs = Vec::new();
        for _ in 0..count {
            let n = self.varint()?;
            let name = self.bytes(n)?;
            let n = self.varint()?;
            xattrs.push((name, self.bytes(n)?));
        }
        Ok(NodeMeta {
            uid,
            gid,
            user,
            group,
            atime,
            ctime,
            dev,
            ino,
            nlink,
            rdev: 0,
            flags,
            xattrs,
        })
    }

    /// Reads and checks the stream header.
    fn header(&mut self) -> Result<u8> {
        let mut magic = [0u8; 5];
        self.inner
            .read_exact(&mut magic)
            .map_err(|e| Error::corrupt("tree stream", format!("no header: {e}")))?;
        if &magic[..4] != TREE_MAGIC {
            return Err(Error::corrupt("tree stream", "bad magic"));
        }
        if magic[4] != TREE_VERSION && magic[4] != TREE_VERSION_1 {
            return Err(Error::UnsupportedVersion {
                what: "tree stream".into(),
                found: magic[4].into(),
                supported: TREE_VERSION.into(),
            });
        }
        Ok(magic[4])
    }

    /// The next node and, for a file, its recipe; `None` at the end of the stream.
    ///
    /// # Errors
    /// [`Error::UnsupportedVersion`] for a stream version other than [`TREE_VERSION_1`] and
    /// [`TREE_VERSION`]; [`Error::Corrupt`] for a wrong magic, a truncated stream, an unknown
    /// tag (4-7 in a version 1 stream), an overlong varint, a shared prefix longer than the
    /// previous path, a path suffix, link target, name or attribute longer than
    /// [`MAX_PATH_LEN`], more than [`MAX_XATTRS`] attributes, a mode or owner id above
    /// `u32::MAX`, nanoseconds of 10^9 or more, a recipe chunk length above `u32::MAX`, or
    /// bytes after the end record.
    pub fn next_node(&mut self) -> Result<Option<(Node, Vec<ChunkRef>)>> {
        if self.done {
            return Ok(None);
        }
        let version = match self.version {
            Some(v) => v,
            None => {
                let v = self.header()?;
                self.version = Some(v);
                v
            }
        };
        let tag = self.byte()?;
        let kind = match tag {
            TAG_END => {
                self.done = true;
                self.expect_eof()?;
                return Ok(None);
            }
            TAG_DIR => NodeKind::Dir,
            TAG_FILE => NodeKind::File,
            TAG_SYMLINK => NodeKind::Symlink,
            TAG_FIFO if version >= 2 => NodeKind::Fifo,
            TAG_SOCKET if version >= 2 => NodeKind::Socket,
            TAG_CHAR_DEVICE if version >= 2 => NodeKind::CharDevice,
            TAG_BLOCK_DEVICE if version >= 2 => NodeKind::BlockDevice,
            t => {
                return Err(Error::corrupt(
                    "tree stream",
                    format!("unknown record tag {t}"),
                ))
            }
        };
        let shared = self.varint()?;
        if shared > self.prev_path.len() as u64 {
            return Err(Error::corrupt(
                "tree stream",
                "path prefix longer than previous path",
            ));
        }
        let suffix_len = self.varint()?;
        let suffix = self.bytes(suffix_len)?;
        let mut path = self.prev_path[..shared as usize].to_vec();
        path.extend_from_slice(&suffix);
        self.prev_path.clone_from(&path);
        let mode = u32::try_from(self.varint()?)
            .map_err(|_| Error::corrupt("tree stream", "mode out of range"))?;
        let mtime = self.time()?;
        let meta = if version >= 2 {
            self.meta()?
        } else {
            NodeMeta::default()
        };
        let mut node = Node {
            path,
            kind,
            mode,
            mtime_secs: mtime.secs,
            mtime_nanos: mtime.nanos,
            size: 0,
            target: Vec::new(),
            meta,
        };
        let mut chunks = Vec::new();
        match kind {
            NodeKind::File => {
                node.size = self.varint()?;
                loop {
                    let len = self.varint()?;
                    if len == 0 {
                        break;
                    }
                    let len = u32::try_from(len)
                        .map_err(|_| Error::corrupt("tree stream", "chunk length out of range"))?;
                    let mut id = [0u8; 32];
                    self.inner
                        .read_exact(&mut id)
                        .map_err(|e| Error::corrupt("tree stream", format!("truncated: {e}")))?;
                    chunks.push(ChunkRef {
                        id: ChunkId(id),
                        len,
                    });
                }
            }
            NodeKind::Symlink => {
                let n = self.varint()?;
                node.target = self.bytes(n)?;
            }
            NodeKind::CharDevice | NodeKind::BlockDevice => node.meta.rdev = self.varint()?,
            NodeKind::Dir | NodeKind::Fifo | NodeKind::Socket => {}
        }
        Ok(Some((node, chunks)))
    }
}

#[cfg(test)]
#[path = "tree_tests.rs"]
mod tests;
