//! The restore target's chain of open directories (see [`super`]): the tree is depth-first,
//! so consecutive nodes share most of their parent path, and only the components that differ
//! are opened, one at a time, never following a symlink; at most [`super::KEEP_OPEN`]
//! handles stay open, however deep the tree.

use super::{components, io, Target, TargetError, DIR_FLAGS, KEEP_OPEN};
use rustix::fs::{self as rfs, AtFlags, Mode};
use rustix::io::Errno;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

/// One open level of the directory chain.
pub(super) struct Level {
    pub(super) name: Vec<u8>,
    /// `None` for an intermediate level dropped to stay under [`KEEP_OPEN`] handles; the
    /// deepest level always has its handle.
    pub(super) fd: Option<OwnedFd>,
}

impl Target {
    /// The deepest open directory: the parent of the node being restored.
    pub(super) fn top(&self) -> BorrowedFd<'_> {
        top_of(&self.root, &self.chain)
    }

    /// Moves the chain to the directory `dir` (a checked relative path, empty for the target
    /// itself), opening only the components that differ from the current chain. Missing
    /// directories are created (mode 0777 less the umask) when `create`.
    pub(super) fn enter(&mut self, dir: &[u8], create: bool) -> Result<(), TargetError> {
        let mut comps = components(dir);
        let mut common = 0;
        for level in &self.chain {
            match comps.clone().next() {
                Some(c) if c == level.name.as_slice() => {
                    comps.next();
                    common += 1;
                }
                _ => break,
            }
        }
        self.chain.truncate(common);
        self.reopen_deepest()?;
        for c in comps {
            let fd = self.open_dir(c, create)?;
            if self.chain.len() >= KEEP_OPEN {
                if let Some(last) = self.chain.last_mut() {
                    last.fd = None;
                }
            }
            self.chain.push(Level {
                name: c.to_vec(),
                fd: Some(fd),
            });
        }
        Ok(())
    }

    /// Reopens the deepest level if its handle was dropped, from its deepest open ancestor.
    pub(super) fn reopen_deepest(&mut self) -> Result<(), TargetError> {
        match self.chain.last() {
            Some(Level { fd: None, .. }) => {}
            _ => return Ok(()),
        }
        let start = self.chain.iter().rposition(|l| l.fd.is_some());
        let mut fd: Option<OwnedFd> = None;
        for i in start.map_or(0, |s| s + 1)..self.chain.len() {
            let parent = match (&fd, start) {
                (Some(f), _) => f.as_fd(),
                (None, Some(s)) => self.chain[s]
                    .fd
                    .as_ref()
                    .map_or(self.root.as_fd(), AsFd::as_fd),
                (None, None) => self.root.as_fd(),
            };
            let next = self.open_dir_in(parent, i)?;
            fd = Some(next);
        }
        if let Some(last) = self.chain.last_mut() {
            last.fd = fd;
        }
        Ok(())
    }

    /// Opens child `name` of the deepest level as the next level.
    pub(super) fn open_dir(&self, name: &[u8], create: bool) -> Result<OwnedFd, TargetError> {
        let parent = self.top();
        match rfs::openat(parent, name, DIR_FLAGS, Mode::empty()) {
            Ok(fd) => Ok(fd),
            Err(Errno::NOENT) if create => {
                match rfs::mkdirat(parent, name, Mode::from_raw_mode(0o777)) {
                    Ok(()) | Err(Errno::EXIST) => {}
                    Err(e) => return Err(io("creating a parent directory")(e)),
                }
                rfs::openat(parent, name, DIR_FLAGS, Mode::empty())
                    .map_err(|e| self.above_error(parent, name, e))
            }
            Err(e) => Err(self.above_error(parent, name, e)),
        }
    }

    /// Opens level `i` of the chain (by its name) in `parent`, while reopening.
    pub(super) fn open_dir_in(
        &self,
        parent: BorrowedFd<'_>,
        i: usize,
    ) -> Result<OwnedFd, TargetError> {
        let name = &self.chain[i].name;
        rfs::openat(parent, name.as_slice(), DIR_FLAGS, Mode::empty())
            .map_err(|e| self.classify_above(parent, name, e, i))
    }

    /// The error for a component above a node that could not be opened as a directory.
    pub(super) fn above_error(&self, parent: BorrowedFd<'_>, name: &[u8], e: Errno) -> TargetError {
        self.classify_above(parent, name, e, self.chain.len())
    }

    /// Classifies a failed open of component `name` at depth `depth` (never following it).
    pub(super) fn classify_above(
        &self,
        parent: BorrowedFd<'_>,
        name: &[u8],
        e: Errno,
        depth: usize,
    ) -> TargetError {
        let mut shown: Vec<u8> = Vec::new();
        for level in &self.chain[..depth.min(self.chain.len())] {
            shown.extend_from_slice(&level.name);
            shown.push(b'/');
        }
        shown.extend_from_slice(name);
        let shown = String::from_utf8_lossy(&shown).into_owned();
        match rfs::statat(parent, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => match rfs::FileType::from_raw_mode(st.st_mode) {
                rfs::FileType::Symlink => TargetError::SymlinkAbove(shown),
                rfs::FileType::Directory => io("opening a parent directory")(e),
                _ => TargetError::NotADirectoryAbove(shown),
            },
            Err(_) => io("opening a parent directory")(e),
        }
    }
}

/// The deepest open directory of `chain` below `root` (a free function, so that it can be
/// borrowed beside the target's other fields).
pub(super) fn top_of<'a>(root: &'a OwnedFd, chain: &'a [Level]) -> BorrowedFd<'a> {
    match chain.last() {
        None => root.as_fd(),
        // `enter` and `reopen_deepest` keep the deepest level open.
        Some(level) => level
            .fd
            .as_ref()
            .expect("the deepest level of the chain is always open")
            .as_fd(),
    }
}
