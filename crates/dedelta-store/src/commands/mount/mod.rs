//! `mount`: the snapshots as a read-only file system tree, independent of FUSE (the CLI
//! adapts [`MountTree`] to the kernel; tests walk it directly).
//!
//! The layout is restic's:
//!
//! ```text
//! /snapshots/<time>/...      every snapshot, named by its time (UTC, `2026-11-24T15:04:05Z`,
//!                            `-1`, `-2` ... on a clash), and `latest` -> the newest
//! /hosts/<host>/<time>/...   the snapshots of each host, and `latest`
//! /tags/<tag>/<time>/...     the snapshots with each tag, and `latest`
//! /ids/<short id>/...        every snapshot by its short id
//! /latest                    -> snapshots/<newest>
//! ```
//!
//! A snapshot's directory is the same inode in every view. Its tree is read only when first
//! looked into, then kept; file content is read chunk by chunk through the read path (delta
//! decoding, verification; see [`files`]).

mod files;

use crate::error::Result;
use crate::format::snapshot::{Snapshot, SnapshotId};
use crate::format::tree::{ChunkRef, Node, NodeKind, Timestamp};
use crate::read::walk_tree;
use crate::repository::snapshot_filter::snapshot_time;
use crate::repository::IndexedRepository;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

pub use files::FileReader;

/// The inode number of the root directory (FUSE's).
pub const ROOT_INO: u64 = 1;

/// What an inode holds.
#[derive(Debug)]
enum Content {
    /// A directory: its entries by name.
    Dir(BTreeMap<Vec<u8>, u64>),
    /// A snapshot's root whose tree has not been read yet (index into the snapshots).
    Unloaded(usize),
    /// A regular file's recipe.
    File(Arc<Recipe>),
    /// A symlink's target.
    Symlink(Vec<u8>),
    /// A FIFO, socket or device.
    Special,
}

/// A file's chunks and where each starts in the file.
#[derive(Debug, Default)]
pub struct Recipe {
    /// The chunks, in order.
    pub chunks: Vec<ChunkRef>,
    /// `starts[i]`: the file offset of chunk `i`.
    pub starts: Vec<u64>,
}

impl Recipe {
    fn new(chunks: Vec<ChunkRef>) -> Self {
        let mut at = 0u64;
        let starts = chunks
            .iter()
            .map(|c| {
                let s = at;
                at += u64::from(c.len);
                s
            })
            .collect();
        Recipe { chunks, starts }
    }
}

/// The attributes of an inode, as `stat` shows them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attr {
    /// The inode number.
    pub ino: u64,
    /// What it is.
    pub kind: NodeKind,
    /// Permission bits.
    pub perm: u16,
    /// Size in bytes (a symlink's: its target's length).
    pub size: u64,
    /// Modification time.
    pub mtime: Timestamp,
    /// Access time.
    pub atime: Timestamp,
    /// Status change time.
    pub ctime: Timestamp,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Device number of a device.
    pub rdev: u64,
}

/// One entry of a directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirEntry {
    /// Its name.
    pub name: Vec<u8>,
    /// Its inode.
    pub ino: u64,
    /// What it is.
    pub kind: NodeKind,
}

#[derive(Debug)]
struct Inode {
    attr: Attr,
    content: Content,
}

/// The mounted tree. Thread-safe: FUSE calls it from its threads.
pub struct MountTree<'r> {
    repo: &'r IndexedRepository,
    snapshots: Vec<(SnapshotId, Snapshot)>,
    inodes: Mutex<Vec<Inode>>,
    reader: Mutex<FileReader<'r>>,
}

/// A directory's attributes with `mtime`.
fn dir_attr(ino: u64, mtime: Timestamp) -> Attr {
    Attr {
        ino,
        kind: NodeKind::Dir,
        perm: 0o555,
        size: 0,
        mtime,
        atime: mtime,
        ctime: mtime,
        uid: 0,
        gid: 0,
        rdev: 0,
    }
}

/// A snapshot's time as a file time.
fn snap_stamp(s: &Snapshot) -> Timestamp {
    snapshot_time(s).map_or(Timestamp::default(), |t| Timestamp {
        secs: t.timestamp(),
        nanos: t.timestamp_subsec_nanos(),
    })
}

/// A node's attributes.
fn node_attr(ino: u64, n: &Node) -> Attr {
    Attr {
        ino,
        kind: n.kind,
        perm: (n.mode & 0o7777) as u16,
        size: if n.kind == NodeKind::Symlink {
            n.target.len() as u64
        } else {
            n.size
        },
        mtime: Timestamp {
            secs: n.mtime_secs,
            nanos: n.mtime_nanos,
        },
        atime: n.meta.atime,
        ctime: n.meta.ctime,
        uid: n.meta.uid,
        gid: n.meta.gid,
        rdev: n.meta.rdev,
    }
}

impl<'r> MountTree<'r> {
    /// The tree of `snapshots` (oldest first, as listed) of `repo`; file reads keep
    /// `cache_bytes` of decompressed regions.
    pub fn new(
        repo: &'r IndexedRepository,
        snapshots: Vec<(SnapshotId, Snapshot)>,
        cache_bytes: usize,
    ) -> Result<Self> {
        let tree = MountTree {
            repo,
            inodes: Mutex::new(Vec::new()),
            reader: Mutex::new(FileReader::new(repo, cache_bytes)?),
            snapshots,
        };
        tree.build_views();
        Ok(tree)
    }

    fn lock(&self) -> MutexGuard<'_, Vec<Inode>> {
        self.inodes.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Builds the root and the views (the snapshots' own trees come later).
    fn build_views(&self) {
        let mut ino = self.lock();
        let newest = self
            .snapshots
            .last()
            .map(|s| snap_stamp(&s.1))
            .unwrap_or_default();
        let add = |ino: &mut Vec<Inode>, attr_of: &dyn Fn(u64) -> Attr, content| {
            let n = ino.len() as u64 + 1;
            ino.push(Inode {
                attr: attr_of(n),
                content,
            });
            n
        };
        let dir = |t: Timestamp| move |n| dir_attr(n, t);
        let root = add(&mut ino, &dir(newest), Content::Dir(BTreeMap::new()));
        debug_assert_eq!(root, ROOT_INO);
        // One inode per snapshot root, named by time (unique) in every view.
        let mut names: Vec<Vec<u8>> = Vec::new();
        let mut roots = Vec::new();
        for (i, (_, s)) in self.snapshots.iter().enumerate() {
            let base = snapshot_time(s)
                .map(|t| t.format("%Y-%m-%dT%H:%M:%SZ").to_string())
                .unwrap_or_else(|| s.time.replace('/', "_"));
            let mut name = base.clone();
            let mut k = 1;
            while names.iter().any(|n| n == name.as_bytes()) {
                name = format!("{base}-{k}");
                k += 1;
            }
            names.push(name.into_bytes());
            roots.push(add(&mut ino, &dir(snap_stamp(s)), Content::Unloaded(i)));
        }
        let mut views: BTreeMap<Vec<u8>, BTreeMap<Vec<u8>, Vec<usize>>> = BTreeMap::new();
        let all: Vec<usize> = (0..self.snapshots.len()).collect();
        for (i, (_, s)) in self.snapshots.iter().enumerate() {
            let hosts = views.entry(b"hosts".to_vec()).or_default();
            hosts.entry(s.host.as_bytes().to_vec()).or_default().push(i);
            let tags = views.entry(b"tags".to_vec()).or_default();
            for t in &s.tags {
                tags.entry(t.as_bytes().to_vec()).or_default().push(i);
            }
        }
        // A directory of snapshots (by time) with `latest`.
        let listing = |ino: &mut Vec<Inode>, members: &[usize]| -> u64 {
            let mut entries = BTreeMap::new();
            for &i in members {
                entries.insert(names[i].clone(), roots[i]);
            }
            let t = members
                .last()
                .map_or(newest, |&i| snap_stamp(&self.snapshots[i].1));
            if let Some(&last) = members.last() {
                let target = names[last].clone();
                let link = symlink(ino, target, t);
                entries.insert(b"latest".to_vec(), link);
            }
            add(ino, &dir(t), Content::Dir(entries))
        };
        let mut top = BTreeMap::new();
        top.insert(b"snapshots".to_vec(), listing(&mut ino, &all));
        for view in [&b"hosts"[..], b"tags"] {
            let mut entries = BTreeMap::new();
            for (key, members) in views.get(view).cloned().unwrap_or_default() {
                entries.insert(key, listing(&mut ino, &members));
            }
            top.insert(
                view.to_vec(),
                add(&mut ino, &dir(newest), Content::Dir(entries)),
            );
        }
        let ids = self
            .snapshots
            .iter()
            .zip(&roots)
            .map(|((id, _), &r)| (id.short().into_bytes(), r))
            .collect();
        top.insert(
            b"ids".to_vec(),
            add(&mut ino, &dir(newest), Content::Dir(ids)),
        );
        if let Some(last) = names.last() {
            let target = [&b"snapshots/"[..], last].concat();
            top.insert(b"latest".to_vec(), symlink(&mut ino, target, newest));
        }
        ino[0].content = Content::Dir(top);
    }

    /// Reads snapshot `i`'s tree into inodes under `root` (called once, on first use).
    fn load(&self, root: u64, i: usize) -> Result<()> {
        let mut nodes: Vec<(Node, Vec<ChunkRef>)> = Vec::new();
        walk_tree(self.repo, &self.snapshots[i].1, |n, c| {
            nodes.push((n, c));
            Ok(())
        })?;
        let mut ino = self.lock();
        if !matches!(ino[(root - 1) as usize].content, Content::Unloaded(_)) {
            return Ok(()); // another thread loaded it meanwhile
        }
        let stamp = ino[(root - 1) as usize].attr.mtime;
        ino[(root - 1) as usize].content = Content::Dir(BTreeMap::new());
        for (node, chunks) in nodes {
            let mut parent = root;
            let parts: Vec<&[u8]> = node.path.split(|b| *b == b'/').collect();
            let Some((name, dirs)) = parts.split_last() else {
                continue;
            };
            for d in dirs {
                parent = child_dir(&mut ino, parent, d, stamp);
            }
            let content = match node.kind {
                NodeKind::Dir => Content::Dir(BTreeMap::new()),
                NodeKind::File => Content::File(Arc::new(Recipe::new(chunks))),
                NodeKind::Symlink => Content::Symlink(node.target.clone()),
                _ => Content::Special,
            };
            let existing = dir_entries(&ino, parent).and_then(|e| e.get(*name).copied());
            match existing {
                // A directory first made as a parent of an earlier node: give it its own
                // attributes, keep its entries.
                Some(e) if node.kind == NodeKind::Dir => {
                    ino[(e - 1) as usize].attr = node_attr(e, &node);
                }
                _ => {
                    let n = ino.len() as u64 + 1;
                    ino.push(Inode {
                        attr: node_attr(n, &node),
                        content,
                    });
                    if let Content::Dir(e) = &mut ino[(parent - 1) as usize].content {
                        e.insert(name.to_vec(), n);
                    }
                }
            }
        }
        Ok(())
    }

    /// Makes sure directory `ino`'s entries are there (reading a snapshot's tree).
    fn ensure_loaded(&self, ino: u64) -> Result<()> {
        let unloaded = match self.lock().get((ino.max(1) - 1) as usize) {
            Some(Inode {
                content: Content::Unloaded(i),
                ..
            }) => Some(*i),
            _ => None,
        };
        match unloaded {
            Some(i) => self.load(ino, i),
            None => Ok(()),
        }
    }

    /// The attributes of `ino`, if it exists.
    pub fn attr(&self, ino: u64) -> Option<Attr> {
        let nodes = self.lock();
        ino.checked_sub(1)
            .and_then(|i| nodes.get(i as usize))
            .map(|n| n.attr.clone())
    }

    /// The entry `name` of directory `parent`: `Ok(None)` if there is none.
    ///
    /// # Errors
    /// A snapshot tree that could not be read.
    pub fn lookup(&self, parent: u64, name: &[u8]) -> Result<Option<Attr>> {
        self.ensure_loaded(parent)?;
        let found = dir_entries(&self.lock(), parent).and_then(|e| e.get(name).copied());
        Ok(found.and_then(|i| self.attr(i)))
    }

    /// The entries of directory `ino`, sorted by name; `Ok(None)` if it is not a directory.
    ///
    /// # Errors
    /// A snapshot tree that could not be read.
    pub fn readdir(&self, ino: u64) -> Result<Option<Vec<DirEntry>>> {
        self.ensure_loaded(ino)?;
        let nodes = self.lock();
        Ok(dir_entries(&nodes, ino).map(|e| {
            e.iter()
                .map(|(name, &i)| DirEntry {
                    name: name.clone(),
                    ino: i,
                    kind: nodes[(i - 1) as usize].attr.kind,
                })
                .collect()
        }))
    }

    /// The target of symlink `ino`.
    pub fn readlink(&self, ino: u64) -> Option<Vec<u8>> {
        match &self.lock().get((ino.max(1) - 1) as usize)?.content {
            Content::Symlink(t) => Some(t.clone()),
            _ => None,
        }
    }

    /// Up to `size` bytes of file `ino` from `offset` (fewer at the end of the file);
    /// `Ok(None)` if `ino` is not a regular file.
    ///
    /// # Errors
    /// A chunk that could not be read or failed verification.
    pub fn read(&self, ino: u64, offset: u64, size: u32) -> Result<Option<Vec<u8>>> {
        let recipe = match &self
            .lock()
            .get((ino.max(1) - 1) as usize)
            .map(|n| &n.content)
        {
            Some(Content::File(r)) => Arc::clone(r),
            _ => return Ok(None),
        };
        let mut reader = self.reader.lock().unwrap_or_else(|p| p.into_inner());
        reader.read(&recipe, offset, size).map(Some)
    }
}

/// Adds a symlink inode.
fn symlink(ino: &mut Vec<Inode>, target: Vec<u8>, t: Timestamp) -> u64 {
    let n = ino.len() as u64 + 1;
    let mut attr = dir_attr(n, t);
    attr.kind = NodeKind::Symlink;
    attr.perm = 0o777;
    attr.size = target.len() as u64;
    ino.push(Inode {
        attr,
        content: Content::Symlink(target),
    });
    n
}

/// The entries of directory `ino`, if it is a loaded directory.
fn dir_entries(ino: &[Inode], i: u64) -> Option<&BTreeMap<Vec<u8>, u64>> {
    match &ino.get((i.max(1) - 1) as usize)?.content {
        Content::Dir(e) => Some(e),
        _ => None,
    }
}

/// The directory `name` in `parent`, made (with the snapshot's time) if absent.
fn child_dir(ino: &mut Vec<Inode>, parent: u64, name: &[u8], t: Timestamp) -> u64 {
    if let Some(&e) = dir_entries(ino, parent).and_then(|e| e.get(name)) {
        return e;
    }
    let n = ino.len() as u64 + 1;
    ino.push(Inode {
        attr: dir_attr(n, t),
        content: Content::Dir(BTreeMap::new()),
    });
    if let Content::Dir(e) = &mut ino[(parent - 1) as usize].content {
        e.insert(name.to_vec(), n);
    }
    n
}
