//! The restore target: every file operation relative to a directory handle, never following
//! a symlink below the target.
//!
//! A snapshot is untrusted input: it may hold a symlink `a/link` and then nodes under
//! `a/link/...` (crafted, or from overlapping backup sources), and the target may already hold
//! symlinks. Path-based calls (`create_dir_all`, `File::create`) follow such links and write
//! outside the target; checking each path with `lstat` first is no cure, since the check and
//! the use race. So every operation here names one component relative to an open directory:
//! directories are opened with `O_DIRECTORY | O_NOFOLLOW` one component at a time and created
//! with `mkdirat`; files are written unnamed (`O_TMPFILE`, [`super::unnamed`]) and linked
//! to their name with `linkat`, which never follows or replaces anything there, or, where
//! something is there or the file system has no unnamed files, created with `O_CREAT |
//! O_EXCL | O_NOFOLLOW` under a temporary name and renamed into place with `renameat` (which
//! replaces a link itself, never what it points to); symlinks are made with `symlinkat`;
//! modes and times are set on open handles (`fchmod`, `futimens`) or with
//! `AT_SYMLINK_NOFOLLOW`. The target directory itself is opened following symlinks: naming
//! it is the user's choice.
//!
//! Unnamed files are the fast path of a tree restore: of the seven system calls a file cost
//! by a temporary name (open, write, fchown, fchmod, utimensat, rename, close), the rename was
//! a tenth of a 23,269-file restore's target thread on tmpfs, and the owner and mode, which
//! creation usually gets right, are now set only when `fstat` says they differ.
//!
//! The open directories along the current path are kept (`target_chain.rs`): usually none
//! or one is opened per node, and at most [`KEEP_OPEN`] stay open, however deep the tree.
//!
//! What is replaced at a node's path: a regular file or symlink is replaced by the snapshot's
//! node (the entry itself, never what a link points to); an existing directory is kept for a
//! directory node and is an error for a file or symlink node, since restore never deletes a
//! directory tree. A symlink or non-directory *above* a node is never replaced or followed:
//! the node is an error, reported by path.

use super::attrs::{is_zero, Handle, MetaApplier, Times, HOLE_BLOCK};
use super::unnamed::{open_unnamed, LinkUnnamed};
use crate::format::tree::{Node, NodeKind};
use crate::write_behind::WriteBehind;
use chain::{top_of, Level};
use rustix::fs::{self as rfs, AtFlags, Mode, OFlags};
use rustix::io::Errno;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;

/// Directory handles kept open along the current path; deeper levels are reopened from the
/// deepest open ancestor when the walk climbs back to them (rare: only trees deeper than this).
pub(super) const KEEP_OPEN: usize = 64;

/// Prefix of temporary names; the pid and a counter follow.
pub(super) const TMP_PREFIX: &str = ".dedelta-tmp-";

/// Attempts at a fresh temporary name before giving up (another process's leftovers).
const TMP_ATTEMPTS: u32 = 100;

const DIR_FLAGS: OFlags = OFlags::RDONLY
    .union(OFlags::DIRECTORY)
    .union(OFlags::NOFOLLOW)
    .union(OFlags::CLOEXEC);

/// Why one node could not be restored. Displayed after the node's path, so a message names
/// other paths (an ancestor) only when they differ from the node's.
#[derive(Debug, thiserror::Error)]
pub(super) enum TargetError {
    /// The stored path could leave the target or cannot be a file name.
    #[error("unsafe path (empty, `.` or `..` component, or NUL byte); not restored")]
    UnsafePath,
    /// A component above the node is a symlink.
    #[error("/{0} is a symlink; restore never follows a symlink below its target")]
    SymlinkAbove(String),
    /// A component above the node exists and is not a directory.
    #[error("/{0} exists and is not a directory")]
    NotADirectoryAbove(String),
    /// A directory exists where the snapshot has a file or symlink.
    #[error("a directory exists at this path; restore does not replace directories")]
    IsADirectory,
    /// A system call failed.
    #[error("{what}: {cause}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// The error.
        cause: std::io::Error,
    },
}

fn io(what: &'static str) -> impl FnOnce(Errno) -> TargetError {
    move |e| TargetError::Io {
        what,
        cause: e.into(),
    }
}

/// How a pending file gets its final name.
enum Naming {
    /// Renamed from this temporary name.
    Temporary(String),
    /// Unnamed (`O_TMPFILE`), linked this way.
    Unnamed(LinkUnnamed),
}

/// A file being written under a temporary name in its parent directory (the deepest level of
/// the chain, which does not move until the file is committed or discarded).
pub(super) struct PendingFile {
    /// Written on the target's thread, which is itself behind the decoding one.
    out: WriteBehind<'static, 'static, std::fs::File>,
    /// How the file gets its name.
    naming: Naming,
    name: Vec<u8>,
    depth: usize,
    /// Zero blocks are skipped, leaving holes (the file was sparse when backed up).
    sparse: bool,
    /// Bytes written or skipped so far.
    pos: u64,
}

impl PendingFile {
    /// Appends bytes; for a sparse file, whole zero blocks ([`HOLE_BLOCK`], aligned in the
    /// file) become holes.
    pub fn write(&mut self, data: &[u8]) -> Result<(), TargetError> {
        let failed = |cause| TargetError::Io {
            what: "writing",
            cause,
        };
        if !self.sparse {
            self.pos += data.len() as u64;
            return self.out.write(data).map_err(failed);
        }
        let mut rest = data;
        while !rest.is_empty() {
            let to_boundary = HOLE_BLOCK - (self.pos % HOLE_BLOCK as u64) as usize;
            let (piece, tail) = rest.split_at(to_boundary.min(rest.len()));
            if piece.len() == HOLE_BLOCK && is_zero(piece) {
                self.out.skip(HOLE_BLOCK as u64).map_err(failed)?;
            } else {
                self.out.write(piece).map_err(failed)?;
            }
            self.pos += piece.len() as u64;
            rest = tail;
        }
        Ok(())
    }
}

/// The target directory and the cached chain of open directories below it.
pub(super) struct Target {
    root: OwnedFd,
    chain: Vec<Level>,
    pid: u32,
    next_tmp: u64,
    /// How unnamed files get their names, if the target's file system has them.
    unnamed: Option<LinkUnnamed>,
    /// Owners and attributes, and what of them the target refused.
    pub meta: MetaApplier,
}

impl Target {
    /// Creates (if needed) and opens the target directory, and checks that it is writable.
    ///
    /// # Errors
    /// [`crate::Error::Io`] naming the target: these are fatal, nothing can be restored.
    pub fn open(path: &Path, pid: u32) -> crate::Result<Target> {
        use crate::error::IoContext;
        let fatal = |what: &str| format!("{what} restore target {}", path.display());
        std::fs::create_dir_all(path).ctx(|| fatal("creating"))?;
        let root = rfs::open(
            path,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(std::io::Error::from)
        .ctx(|| fatal("opening"))?;
        let mut t = Target {
            root,
            chain: Vec::new(),
            pid,
            next_tmp: 0,
            unnamed: None,
            meta: MetaApplier::new(),
        };
        let (fd, tmp) = t.create_tmp_file().map_err(|e| {
            crate::Error::io(
                fatal("cannot write into"),
                std::io::Error::other(e.to_string()),
            )
        })?;
        drop(fd);
        let _ = rfs::unlinkat(&t.root, tmp.as_str(), AtFlags::empty());
        t.unnamed = t.probe_unnamed();
        Ok(t)
    }

    /// The same target for another writing thread (`writer`, from 1): its own handles,
    /// temporary names apart from every other writer's, unnamed files as probed here.
    pub fn for_writer(&self, writer: usize) -> std::io::Result<Target> {
        Ok(Target {
            root: rustix::io::fcntl_dupfd_cloexec(&self.root, 0)?,
            chain: Vec::new(),
            pid: self.pid,
            next_tmp: (writer as u64) << 40,
            unnamed: self.unnamed,
            meta: MetaApplier::new(),
        })
    }

    /// How unnamed files can be named in the target (see [`LinkUnnamed::probe`]).
    fn probe_unnamed(&mut self) -> Option<LinkUnnamed> {
        let names = [self.tmp_name(), self.tmp_name()];
        LinkUnnamed::probe(self.root.as_fd(), &names)
    }

    /// An unnamed file in the deepest directory, with permissions `mode` (less the umask).
    pub(super) fn open_unnamed(&self, mode: u32) -> rustix::io::Result<OwnedFd> {
        open_unnamed(self.top(), mode)
    }

    /// Whether files are written unnamed and then linked (else under temporary names).
    #[cfg(test)]
    pub(super) fn writes_unnamed(&self) -> bool {
        self.unnamed.is_some()
    }

    /// A fresh temporary name in the deepest directory, created as an empty file.
    fn create_tmp_file(&mut self) -> Result<(OwnedFd, String), TargetError> {
        let flags =
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        for _ in 0..TMP_ATTEMPTS {
            let tmp = self.tmp_name();
            match rfs::openat(self.top(), tmp.as_str(), flags, Mode::from_raw_mode(0o600)) {
                Ok(fd) => return Ok((fd, tmp)),
                Err(Errno::EXIST) => continue,
                Err(e) => return Err(io("creating a temporary file")(e)),
            }
        }
        Err(io("creating a temporary file")(Errno::EXIST))
    }

    fn tmp_name(&mut self) -> String {
        let n = self.next_tmp;
        self.next_tmp += 1;
        format!("{TMP_PREFIX}{}-{n}", self.pid)
    }

    /// Creates directory `path` with mode 0700 (its own mode is set last, by
    /// [`Target::set_dir_meta`]). An existing directory is kept; a file or symlink there is
    /// replaced (the entry itself is removed, never what it points to).
    pub fn make_dir(&mut self, path: &[u8]) -> Result<(), TargetError> {
        let (parent, name) = split(path)?;
        self.enter(parent, true)?;
        let dir = self.top();
        let mode = Mode::from_raw_mode(0o700);
        match rfs::mkdirat(dir, name, mode) {
            Ok(()) => Ok(()),
            Err(Errno::EXIST) => {
                let st = rfs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW)
                    .map_err(io("inspecting the existing entry"))?;
                if rfs::FileType::from_raw_mode(st.st_mode) == rfs::FileType::Directory {
                    return Ok(());
                }
                rfs::unlinkat(dir, name, AtFlags::empty())
                    .map_err(io("removing the existing file or symlink"))?;
                rfs::mkdirat(dir, name, mode).map_err(io("creating the directory"))
            }
            Err(e) => Err(io("creating the directory")(e)),
        }
    }

    /// Creates symlink `node` (made under a temporary name, its owner and times set, then
    /// renamed over whatever file or symlink is there).
    pub fn make_symlink(&mut self, node: &Node) -> Result<(), TargetError> {
        let (parent, name) = split(&node.path)?;
        self.enter(parent, true)?;
        let tmp = self.tmp_entry("creating the symlink", |dir, tmp| {
            rfs::symlinkat(node.target.as_slice(), dir, tmp)
        })?;
        self.finish_entry(&tmp, name, node)
    }

    /// Creates special file `node` (a FIFO, socket or device) like a symlink: under a
    /// temporary name, then renamed into place. Devices need root.
    pub fn make_special(&mut self, node: &Node) -> Result<(), TargetError> {
        let (parent, name) = split(&node.path)?;
        self.enter(parent, true)?;
        let file_type = match node.kind {
            NodeKind::Fifo => rfs::FileType::Fifo,
            NodeKind::Socket => rfs::FileType::Socket,
            NodeKind::CharDevice => rfs::FileType::CharacterDevice,
            _ => rfs::FileType::BlockDevice,
        };
        let tmp = self.tmp_entry("creating the special file", |dir, tmp| {
            rfs::mknodat(
                dir,
                tmp,
                file_type,
                Mode::from_raw_mode(0o600),
                node.meta.rdev,
            )
        })?;
        // Never a symlink: it was just made. The mode is set after the owner.
        let dir = top_of(&self.root, &self.chain);
        let done = self.meta.apply(Handle::At(dir, &tmp), node).and_then(|()| {
            rfs::chmodat(
                dir,
                tmp.as_str(),
                Mode::from_raw_mode(node.mode & 0o7777),
                AtFlags::empty(),
            )
            .map_err(io("setting the mode"))
        });
        if let Err(e) = done {
            let _ = rfs::unlinkat(dir, tmp.as_str(), AtFlags::empty());
            return Err(e);
        }
        self.finish_entry(&tmp, name, node)
    }

    /// Makes `node` a hard link to `existing` (a path restored before), under a temporary
    /// name first. `existing`'s directories are opened one by one without following links.
    pub fn hard_link(&mut self, node: &Node, existing: &[u8]) -> Result<(), TargetError> {
        let (src_parent, src_name) = split(existing)?;
        let open = |at: BorrowedFd<'_>, c: &[u8]| {
            rfs::openat(at, c, DIR_FLAGS, Mode::empty())
                .map_err(io("opening the first link's directory"))
        };
        let mut src_dir = open(self.root.as_fd(), b".")?;
        for c in components(src_parent) {
            src_dir = open(src_dir.as_fd(), c)?;
        }
        let (parent, name) = split(&node.path)?;
        self.enter(parent, true)?;
        self.replace_with("creating the hard link", name, |dir, tmp| {
            rfs::linkat(&src_dir, src_name, dir, tmp, AtFlags::empty())
        })
    }

    /// Makes an entry with `make` under a fresh temporary name in the deepest directory and
    /// renames it over `name` (replacing a file or symlink there, the entry itself); removes
    /// it if the rename fails.
    fn replace_with(
        &mut self,
        what: &'static str,
        name: &[u8],
        make: impl Fn(BorrowedFd<'_>, &str) -> rustix::io::Result<()>,
    ) -> Result<(), TargetError> {
        let tmp = self.tmp_entry(what, make)?;
        let dir = self.top();
        let done = rename_into_place(dir, &tmp, name);
        if done.is_err() {
            let _ = rfs::unlinkat(dir, tmp.as_str(), AtFlags::empty());
        }
        done
    }

    /// Makes an entry under a fresh temporary name in the deepest directory with `make`.
    fn tmp_entry(
        &mut self,
        what: &'static str,
        make: impl Fn(BorrowedFd<'_>, &str) -> rustix::io::Result<()>,
    ) -> Result<String, TargetError> {
        for _ in 0..TMP_ATTEMPTS {
            let tmp = self.tmp_name();
            match make(self.top(), &tmp) {
                Ok(()) => return Ok(tmp),
                Err(Errno::EXIST) => continue,
                Err(e) => return Err(io(what)(e)),
            }
        }
        Err(io(what)(Errno::EXIST))
    }

    /// Sets the owner (symlinks: special files had it set with their mode) and times of
    /// temporary entry `tmp`, never following it, and renames it to `name`; removes it on
    /// failure.
    fn finish_entry(&mut self, tmp: &str, name: &[u8], node: &Node) -> Result<(), TargetError> {
        let dir = top_of(&self.root, &self.chain);
        let owner = if node.kind == NodeKind::Symlink {
            self.meta.apply(Handle::At(dir, tmp), node)
        } else {
            Ok(())
        };
        let done = owner
            .and_then(|()| {
                rfs::utimensat(
                    dir,
                    tmp,
                    &Times::of(node).timestamps(),
                    AtFlags::SYMLINK_NOFOLLOW,
                )
                .map_err(io("setting the times"))
            })
            .and_then(|()| rename_into_place(dir, tmp, name));
        if done.is_err() {
            let _ = rfs::unlinkat(dir, tmp, AtFlags::empty());
        }
        done
    }

    /// Starts file `node`: an empty unnamed file with the node's permissions in its
    /// directory (not reachable by any path until it is linked), or else an empty temporary
    /// file (mode 0600: others cannot read it while it is written under its owner).
    pub fn create_file(&mut self, node: &Node) -> Result<PendingFile, TargetError> {
        let (parent, name) = split(&node.path)?;
        self.enter(parent, true)?;
        // A directory on another file system (a mount below the target) may have none.
        let unnamed = self
            .unnamed
            .and_then(|how| Some((self.open_unnamed(node.mode & 0o777).ok()?, how)));
        let (fd, naming) = match unnamed {
            Some((fd, how)) => (fd, Naming::Unnamed(how)),
            None => {
                let (fd, tmp) = self.create_tmp_file()?;
                (fd, Naming::Temporary(tmp))
            }
        };
        Ok(PendingFile {
            out: WriteBehind::on_this_thread(std::fs::File::from(fd), node.size),
            naming,
            name: name.to_vec(),
            depth: self.chain.len(),
            sparse: node.meta.sparse(),
            pos: 0,
        })
    }

    /// Finishes file `node`: flushes it (a sparse file's trailing hole made by its length),
    /// sets its owner, attributes, mode and times, and gives it its final name: an unnamed
    /// file is linked there (or, with something there, under a temporary name renamed over
    /// it), a temporary file renamed there. On any failure the temporary file is removed (an
    /// unnamed one goes with its handle).
    pub fn commit_file(&mut self, f: PendingFile, node: &Node) -> Result<(), TargetError> {
        debug_assert_eq!(
            f.depth,
            self.chain.len(),
            "the chain moved under a pending file"
        );
        let (sparse, len) = (f.sparse, f.pos);
        let (file, written) = f.out.finish();
        let finished = written
            .and_then(|()| file.ok_or_else(|| std::io::Error::other("the file was lost")))
            .map_err(|cause| TargetError::Io {
                what: "writing",
                cause,
            })
            .and_then(|file| {
                if sparse {
                    file.set_len(len).map_err(|cause| TargetError::Io {
                        what: "writing",
                        cause,
                    })?;
                }
                self.set_file_meta(file.as_fd(), node)?;
                Ok(file)
            });
        let dir = top_of(&self.root, &self.chain);
        let done = match (finished, &f.naming) {
            (Err(e), _) => Err(e),
            (Ok(_), Naming::Temporary(tmp)) => rename_into_place(dir, tmp, &f.name),
            (Ok(file), Naming::Unnamed(how)) => match how.link(file.as_fd(), dir, &f.name) {
                Ok(()) => Ok(()),
                // Something is there: replaced as a temporary file would replace it.
                Err(Errno::EXIST) => {
                    return self.replace_with("naming the file", &f.name, |dir, tmp| {
                        how.link(file.as_fd(), dir, tmp.as_bytes())
                    });
                }
                Err(e) => Err(io("naming the file")(e)),
            },
        };
        if let (Err(_), Naming::Temporary(tmp)) = (&done, &f.naming) {
            let _ = rfs::unlinkat(dir, tmp.as_str(), AtFlags::empty());
        }
        done
    }

    /// Sets the owner, attributes, mode and times of the file open as `file`. The owner and
    /// mode are set only where `fstat` shows they differ from the node's (a file restored
    /// by its owner, with the permissions it was created with, needs neither call); any
    /// attribute may change the mode (an ACL), so with attributes the mode is always set.
    fn set_file_meta(&mut self, file: BorrowedFd<'_>, node: &Node) -> Result<(), TargetError> {
        let st = rfs::fstat(file).map_err(io("inspecting the new file"))?;
        self.meta
            .apply_owned_by(Handle::Fd(file), node, Some((st.st_uid, st.st_gid)))?;
        let want = node.mode & 0o7777;
        if !node.meta.xattrs.is_empty() || st.st_mode & 0o7777 != want {
            rfs::fchmod(file, Mode::from_raw_mode(want)).map_err(io("setting the mode"))?;
        }
        rfs::futimens(file, &Times::of(node).timestamps()).map_err(io("setting the times"))
    }

    /// Abandons a file: its temporary file is removed, its final name never touched.
    pub fn discard_file(&mut self, f: PendingFile) {
        debug_assert_eq!(
            f.depth,
            self.chain.len(),
            "the chain moved under a pending file"
        );
        drop(f.out.finish());
        if let Naming::Temporary(tmp) = &f.naming {
            let _ = rfs::unlinkat(self.top(), tmp.as_str(), AtFlags::empty());
        }
    }

    /// Sets the owner, attributes, mode and times of directory `node`, opened without
    /// following symlinks. Called for the deepest directories first, so that no later change
    /// inside one moves its time; missing directories are not created.
    pub fn set_dir_meta(&mut self, node: &Node) -> Result<(), TargetError> {
        split(&node.path)?;
        self.enter(&node.path, false)?;
        let dir = top_of(&self.root, &self.chain);
        self.meta.apply(Handle::Fd(dir), node)?;
        rfs::fchmod(dir, Mode::from_raw_mode(node.mode & 0o7777))
            .map_err(io("setting the mode"))?;
        rfs::futimens(dir, &Times::of(node).timestamps()).map_err(io("setting the times"))
    }
}

/// Renames `tmp` to `name` in `dir`: replaces a file or symlink there (the entry itself), and
/// fails on a directory.
fn rename_into_place(dir: BorrowedFd<'_>, tmp: &str, name: &[u8]) -> Result<(), TargetError> {
    match rfs::renameat(dir, tmp, dir, name) {
        Ok(()) => Ok(()),
        Err(Errno::ISDIR | Errno::NOTEMPTY | Errno::EXIST) => Err(TargetError::IsADirectory),
        Err(e) => Err(io("renaming into place")(e)),
    }
}

/// The components of a checked relative path (none for the empty path).
fn components(path: &[u8]) -> impl Iterator<Item = &[u8]> + Clone {
    path.split(|b| *b == b'/').filter(|c| !c.is_empty())
}

/// Splits a stored path into its parent directory and its name, refusing any path that could
/// name something outside the target: empty, absolute, or with an empty, `.` or `..`
/// component, or a NUL byte.
fn split(path: &[u8]) -> Result<(&[u8], &[u8]), TargetError> {
    let unsafe_component = |c: &[u8]| c.is_empty() || c == b"." || c == b".." || c.contains(&0);
    if path.is_empty() || path.split(|b| *b == b'/').any(unsafe_component) {
        return Err(TargetError::UnsafePath);
    }
    Ok(match path.iter().rposition(|b| *b == b'/') {
        Some(i) => (&path[..i], &path[i + 1..]),
        None => (&path[..0], path),
    })
}

#[path = "target_chain.rs"]
mod chain;

#[cfg(test)]
#[path = "target_tests.rs"]
mod tests;
