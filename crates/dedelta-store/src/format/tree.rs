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
/// Stream format version.
pub const TREE_VERSION: u8 = 1;
/// Record tag: end of stream.
pub const TAG_END: u8 = 0;
/// Record tag: directory.
pub const TAG_DIR: u8 = 1;
/// Record tag: regular file.
pub const TAG_FILE: u8 = 2;
/// Record tag: symbolic link.
pub const TAG_SYMLINK: u8 = 3;
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

impl TreeEncoder {
    /// Writes the stream header.
    pub fn begin(&mut self, out: &mut Vec<u8>) {
        out.extend_from_slice(TREE_MAGIC);
        out.push(TREE_VERSION);
    }

    fn header(&mut self, node: &Node, out: &mut Vec<u8>) {
        out.push(match node.kind {
            NodeKind::Dir => TAG_DIR,
            NodeKind::File => TAG_FILE,
            NodeKind::Symlink => TAG_SYMLINK,
        });
        let shared = self
            .prev_path
            .iter()
            .zip(&node.path)
            .take_while(|(a, b)| a == b)
            .count();
        varint::put(out, shared as u64);
        varint::put(out, (node.path.len() - shared) as u64);
        out.extend_from_slice(&node.path[shared..]);
        self.prev_path.clone_from(&node.path);
        varint::put(out, u64::from(node.mode));
        varint::put(out, zigzag(node.mtime_secs));
        varint::put(out, u64::from(node.mtime_nanos));
        match node.kind {
            NodeKind::File => varint::put(out, node.size),
            NodeKind::Symlink => {
                varint::put(out, node.target.len() as u64);
                out.extend_from_slice(&node.target);
            }
            NodeKind::Dir => {}
        }
    }

    /// A directory or symlink record.
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
    started: bool,
    done: bool,
}

impl<R: Read> TreeDecoder<R> {
    /// A decoder over `inner` (positioned at the stream header).
    pub fn new(inner: R) -> Self {
        TreeDecoder {
            inner,
            prev_path: Vec::new(),
            started: false,
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

    /// The next node and, for a file, its recipe; `None` at the end of the stream.
    ///
    /// # Errors
    /// [`Error::UnsupportedVersion`] for a stream version other than [`TREE_VERSION`];
    /// [`Error::Corrupt`] for a wrong magic, a truncated stream, an unknown tag, an overlong
    /// varint, a shared prefix longer than the previous path, a path suffix or link target
    /// longer than [`MAX_PATH_LEN`], a mode above `u32::MAX`, nanoseconds of 10^9 or more, a
    /// recipe chunk length above `u32::MAX`, or bytes after the end record.
    pub fn next_node(&mut self) -> Result<Option<(Node, Vec<ChunkRef>)>> {
        if self.done {
            return Ok(None);
        }
        if !self.started {
            let mut magic = [0u8; 5];
            self.inner
                .read_exact(&mut magic)
                .map_err(|e| Error::corrupt("tree stream", format!("no header: {e}")))?;
            if &magic[..4] != TREE_MAGIC {
                return Err(Error::corrupt("tree stream", "bad magic"));
            }
            if magic[4] != TREE_VERSION {
                return Err(Error::UnsupportedVersion {
                    what: "tree stream".into(),
                    found: magic[4].into(),
                    supported: TREE_VERSION.into(),
                });
            }
            self.started = true;
        }
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
        let mtime_secs = unzigzag(self.varint()?);
        let mtime_nanos = u32::try_from(self.varint()?)
            .ok()
            .filter(|n| *n < 1_000_000_000)
            .ok_or_else(|| Error::corrupt("tree stream", "nanoseconds out of range"))?;
        let mut node = Node {
            path,
            kind,
            mode,
            mtime_secs,
            mtime_nanos,
            size: 0,
            target: Vec::new(),
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
            NodeKind::Dir => {}
        }
        Ok(Some((node, chunks)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn node(path: &str, kind: NodeKind) -> Node {
        Node {
            path: path.as_bytes().to_vec(),
            kind,
            mode: 0o100644,
            mtime_secs: -5,
            mtime_nanos: 999,
            size: if kind == NodeKind::File { 10 } else { 0 },
            target: if kind == NodeKind::Symlink {
                b"../x".to_vec()
            } else {
                vec![]
            },
        }
    }

    #[test]
    fn round_trip() {
        let mut enc = TreeEncoder::default();
        let mut out = Vec::new();
        enc.begin(&mut out);
        enc.node(&node("a", NodeKind::Dir), &mut out);
        enc.file_start(&node("a/b.txt", NodeKind::File), &mut out);
        let r = ChunkRef {
            id: ChunkId::of(b"x"),
            len: 10,
        };
        enc.chunk(&r, &mut out);
        enc.file_end(&mut out);
        enc.node(&node("a/c", NodeKind::Symlink), &mut out);
        enc.end(&mut out);
        let mut dec = TreeDecoder::new(&out[..]);
        assert_eq!(
            dec.next_node().unwrap().unwrap().0,
            node("a", NodeKind::Dir)
        );
        let (n, c) = dec.next_node().unwrap().unwrap();
        assert_eq!(n, node("a/b.txt", NodeKind::File));
        assert_eq!(c, vec![r]);
        assert_eq!(
            dec.next_node().unwrap().unwrap().0,
            node("a/c", NodeKind::Symlink)
        );
        assert!(dec.next_node().unwrap().is_none());
    }

    /// The byte table of docs/format.md ("Tree stream"), on a three-record stream.
    #[test]
    fn layout_matches_the_doc() {
        let id = ChunkId([0xab; 32]);
        let mut enc = TreeEncoder::default();
        let mut out = Vec::new();
        enc.begin(&mut out);
        let dir = Node {
            path: b"a".to_vec(),
            kind: NodeKind::Dir,
            mode: 0o40755,
            mtime_secs: 5,
            mtime_nanos: 0,
            size: 0,
            target: vec![],
        };
        enc.node(&dir, &mut out);
        let file = Node {
            path: b"a/b".to_vec(),
            kind: NodeKind::File,
            mode: 0o100644,
            mtime_secs: -1,
            mtime_nanos: 300,
            size: 200,
            target: vec![],
        };
        enc.file_start(&file, &mut out);
        enc.chunk(&ChunkRef { id, len: 200 }, &mut out);
        enc.file_end(&mut out);
        let link = Node {
            path: b"a/c".to_vec(),
            kind: NodeKind::Symlink,
            mode: 0o120777,
            mtime_secs: 0,
            mtime_nanos: 0,
            size: 0,
            target: b"b".to_vec(),
        };
        enc.node(&link, &mut out);
        enc.end(&mut out);
        let expected: Vec<u8> = [
            &b"DDTR\x01"[..],
            // directory "a": tag, shared 0, suffix "a", mode 0o40755, mtime 5 (zigzag 10), 0 ns
            &[1, 0, 1, b'a', 0xed, 0x83, 0x01, 10, 0],
            // file "a/b": shared 1, suffix "/b", mode 0o100644, mtime -1 (zigzag 1), 300 ns,
            // size 200, one chunk of 200 bytes, then 0
            &[
                2, 1, 2, b'/', b'b', 0xa4, 0x83, 0x02, 1, 0xac, 0x02, 0xc8, 0x01, 0xc8, 0x01,
            ],
            &[0xab; 32],
            &[0],
            // symlink "a/c": shared 2, suffix "c", mode 0o120777, mtime 0, 0 ns, target "b"
            &[3, 2, 1, b'c', 0xff, 0xc3, 0x02, 0, 0, 1, b'b'],
            // end
            &[0],
        ]
        .concat();
        assert_eq!(out, expected);
        let mut dec = TreeDecoder::new(&out[..]);
        assert_eq!(dec.next_node().unwrap().unwrap().0, dir);
        assert_eq!(
            dec.next_node().unwrap().unwrap(),
            (file, vec![ChunkRef { id, len: 200 }])
        );
        assert_eq!(dec.next_node().unwrap().unwrap().0, link);
        assert!(dec.next_node().unwrap().is_none());
    }

    /// Nothing may follow the end tag.
    #[test]
    fn bytes_after_the_end_are_refused() {
        let mut out = Vec::new();
        let mut enc = TreeEncoder::default();
        enc.begin(&mut out);
        enc.end(&mut out);
        assert!(TreeDecoder::new(&out[..]).next_node().unwrap().is_none());
        out.push(0);
        let err = TreeDecoder::new(&out[..]).next_node().unwrap_err();
        assert!(err.to_string().contains("end record"), "{err}");
    }

    /// Header, tags and bounds the document lists as invalid.
    #[test]
    fn invalid_streams_are_refused() {
        let cases: &[(&[u8], &str)] = &[
            (b"DDTR\x02\x00", "version 2"),
            (b"DDTX\x01\x00", "magic"),
            (b"DDTR\x01\x04", "tag 4"),
            (
                b"DDTR\x01\x01\x01\x00",
                "shared prefix longer than the previous path",
            ),
            // directory "a", nanoseconds 10^9
            (
                b"DDTR\x01\x01\x00\x01a\x00\x00\x80\x94\xeb\xdc\x03",
                "nanoseconds",
            ),
            // suffix longer than 64 KiB
            (b"DDTR\x01\x01\x00\x81\x80\x04", "suffix length"),
            // 11-byte varint for the mode
            (
                b"DDTR\x01\x01\x00\x01a\x80\x80\x80\x80\x80\x80\x80\x80\x80\x80\x00",
                "overlong varint",
            ),
        ];
        for (bytes, what) in cases {
            let mut dec = TreeDecoder::new(*bytes);
            let mut failed = false;
            for _ in 0..4 {
                match dec.next_node() {
                    Ok(Some(_)) => {}
                    Ok(None) => break,
                    Err(_) => {
                        failed = true;
                        break;
                    }
                }
            }
            assert!(failed, "{what} accepted");
        }
    }

    proptest! {
        #[test]
        fn decoder_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            let mut data = b"DDTR\x01".to_vec();
            data.extend_from_slice(&bytes);
            let mut dec = TreeDecoder::new(&data[..]);
            for _ in 0..50 {
                match dec.next_node() { Ok(Some(_)) => {}, _ => break }
            }
        }
    }
}
