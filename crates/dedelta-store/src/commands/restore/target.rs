//! The restore target: every file operation relative to a directory handle, never following
//! a symlink below the target.
//!
//! A snapshot is untrusted input: it may hold a symlink `a/link` and then nodes under
//! `a/link/...` (crafted, or from overlapping backup sources), and the target may already hold
//! symlinks. Path-based calls (`create_dir_all`, `File::create`) follow such links and write
//! outside the target; checking each path with `lstat` first is no cure, since the check and
//! the use race. So every operation here names one component relative to an open directory:
//! directories are opened with `O_DIRECTORY | O_NOFOLLOW` one component at a time and created
//! with `mkdirat`; files are created with `O_CREAT | O_EXCL | O_NOFOLLOW` under a temporary
//! name and renamed into place with `renameat` (which replaces a link itself, never what it
//! points to); symlinks are made with `symlinkat`; modes and times are set on open handles
//! (`fchmod`, `futimens`) or with `AT_SYMLINK_NOFOLLOW`. The target directory itself is opened
//! following symlinks: naming it is the user's choice.
//!
//! The tree is depth-first, so consecutive nodes share most of their parent path: the open
//! directory chain is cached and only the components that differ are opened, usually none or
//! one per node. At most [`KEEP_OPEN`] handles stay open, however deep the tree.
//!
//! What is replaced at a node's path: a regular file or symlink is replaced by the snapshot's
//! node (the entry itself, never what a link points to); an existing directory is kept for a
//! directory node and is an error for a file or symlink node, since restore never deletes a
//! directory tree. A symlink or non-directory *above* a node is never replaced or followed:
//! the node is an error, reported by path.

use rustix::fs::{self as rfs, AtFlags, Mode, OFlags, Timespec, Timestamps};
use rustix::io::Errno;
use std::io::Write;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;

/// Directory handles kept open along the current path; deeper levels are reopened from the
/// deepest open ancestor when the walk climbs back to them (rare: only trees deeper than this).
pub(super) const KEEP_OPEN: usize = 64;

/// Prefix of temporary names; the pid and a counter follow.
pub(super) const TMP_PREFIX: &str = ".dedelta-tmp-";

/// Size of the write buffer of a file being restored.
const WRITE_BUFFER_BYTES: usize = 1 << 20;

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

/// A modification time; it is also used as the access time.
#[derive(Clone, Copy, Debug)]
pub(super) struct MTime {
    /// Seconds since the epoch.
    pub secs: i64,
    /// Nanoseconds (below 10^9).
    pub nanos: u32,
}

impl MTime {
    fn timestamps(self) -> Timestamps {
        let t = Timespec {
            tv_sec: self.secs,
            tv_nsec: self.nanos.into(),
        };
        Timestamps {
            last_access: t,
            last_modification: t,
        }
    }
}

/// One open level of the directory chain.
struct Level {
    name: Vec<u8>,
    /// `None` for an intermediate level dropped to stay under [`KEEP_OPEN`] handles; the
    /// deepest level always has its handle.
    fd: Option<OwnedFd>,
}

/// A file being written under a temporary name in its parent directory (the deepest level of
/// the chain, which does not move until the file is committed or discarded).
pub(super) struct PendingFile {
    out: std::io::BufWriter<std::fs::File>,
    tmp: String,
    name: Vec<u8>,
    depth: usize,
}

impl PendingFile {
    /// Appends bytes.
    pub fn write(&mut self, data: &[u8]) -> Result<(), TargetError> {
        self.out.write_all(data).map_err(|cause| TargetError::Io {
            what: "writing",
            cause,
        })
    }
}

/// The target directory and the cached chain of open directories below it.
pub(super) struct Target {
    root: OwnedFd,
    chain: Vec<Level>,
    pid: u32,
    next_tmp: u64,
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
        };
        let (fd, tmp) = t.create_tmp_file().map_err(|e| {
            crate::Error::io(
                fatal("cannot write into"),
                std::io::Error::other(e.to_string()),
            )
        })?;
        drop(fd);
        let _ = rfs::unlinkat(&t.root, tmp.as_str(), AtFlags::empty());
        Ok(t)
    }

    /// The deepest open directory: the parent of the node being restored.
    fn top(&self) -> BorrowedFd<'_> {
        match self.chain.last() {
            None => self.root.as_fd(),
            // `enter` and `reopen_deepest` keep the deepest level open.
            Some(level) => level
                .fd
                .as_ref()
                .expect("the deepest level of the chain is always open")
                .as_fd(),
        }
    }

    /// Moves the chain to the directory `dir` (a checked relative path, empty for the target
    /// itself), opening only the components that differ from the current chain. Missing
    /// directories are created (mode 0777 less the umask) when `create`.
    fn enter(&mut self, dir: &[u8], create: bool) -> Result<(), TargetError> {
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
    fn reopen_deepest(&mut self) -> Result<(), TargetError> {
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
    fn open_dir(&self, name: &[u8], create: bool) -> Result<OwnedFd, TargetError> {
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
    fn open_dir_in(&self, parent: BorrowedFd<'_>, i: usize) -> Result<OwnedFd, TargetError> {
        let name = &self.chain[i].name;
        rfs::openat(parent, name.as_slice(), DIR_FLAGS, Mode::empty())
            .map_err(|e| self.classify_above(parent, name, e, i))
    }

    /// The error for a component above a node that could not be opened as a directory.
    fn above_error(&self, parent: BorrowedFd<'_>, name: &[u8], e: Errno) -> TargetError {
        self.classify_above(parent, name, e, self.chain.len())
    }

    /// Classifies a failed open of component `name` at depth `depth` (never following it).
    fn classify_above(
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

    /// Creates symlink `path` pointing at `target` (made under a temporary name, its times
    /// set, then renamed over whatever file or symlink is there).
    pub fn make_symlink(
        &mut self,
        path: &[u8],
        target: &[u8],
        mtime: MTime,
    ) -> Result<(), TargetError> {
        let (parent, name) = split(path)?;
        self.enter(parent, true)?;
        let mut made = None;
        for _ in 0..TMP_ATTEMPTS {
            let tmp = self.tmp_name();
            match rfs::symlinkat(target, self.top(), tmp.as_str()) {
                Ok(()) => {
                    made = Some(tmp);
                    break;
                }
                Err(Errno::EXIST) => continue,
                Err(e) => return Err(io("creating the symlink")(e)),
            }
        }
        let tmp = made.ok_or_else(|| io("creating the symlink")(Errno::EXIST))?;
        let dir = self.top();
        let done = rfs::utimensat(
            dir,
            tmp.as_str(),
            &mtime.timestamps(),
            AtFlags::SYMLINK_NOFOLLOW,
        )
        .map_err(io("setting the symlink's times"))
        .and_then(|()| rename_into_place(dir, &tmp, name));
        if done.is_err() {
            let _ = rfs::unlinkat(dir, tmp.as_str(), AtFlags::empty());
        }
        done
    }

    /// Starts file `path`: an empty temporary file (mode 0600) in its directory.
    pub fn create_file(&mut self, path: &[u8]) -> Result<PendingFile, TargetError> {
        let (parent, name) = split(path)?;
        self.enter(parent, true)?;
        let (fd, tmp) = self.create_tmp_file()?;
        Ok(PendingFile {
            out: std::io::BufWriter::with_capacity(WRITE_BUFFER_BYTES, std::fs::File::from(fd)),
            tmp,
            name: name.to_vec(),
            depth: self.chain.len(),
        })
    }

    /// Finishes a file: flushes it, sets its mode and times, and renames it over its final
    /// name. On any failure the temporary file is removed.
    pub fn commit_file(
        &mut self,
        f: PendingFile,
        mode: u32,
        mtime: MTime,
    ) -> Result<(), TargetError> {
        debug_assert_eq!(
            f.depth,
            self.chain.len(),
            "the chain moved under a pending file"
        );
        let dir = self.top();
        let done = f
            .out
            .into_inner()
            .map_err(|e| TargetError::Io {
                what: "writing",
                cause: e.into_error(),
            })
            .and_then(|file| {
                rfs::fchmod(&file, Mode::from_raw_mode(mode & 0o7777))
                    .map_err(io("setting the mode"))?;
                rfs::futimens(&file, &mtime.timestamps()).map_err(io("setting the times"))
            })
            .and_then(|()| rename_into_place(dir, &f.tmp, &f.name));
        if done.is_err() {
            let _ = rfs::unlinkat(dir, f.tmp.as_str(), AtFlags::empty());
        }
        done
    }

    /// Abandons a file: its temporary file is removed, its final name never touched.
    pub fn discard_file(&mut self, f: PendingFile) {
        debug_assert_eq!(
            f.depth,
            self.chain.len(),
            "the chain moved under a pending file"
        );
        drop(f.out);
        let _ = rfs::unlinkat(self.top(), f.tmp.as_str(), AtFlags::empty());
    }

    /// Sets the mode and times of directory `path`, opened without following symlinks.
    /// Called for the deepest directories first, so that no later change inside one moves its
    /// time; missing directories are not created.
    pub fn set_dir_meta(
        &mut self,
        path: &[u8],
        mode: u32,
        mtime: MTime,
    ) -> Result<(), TargetError> {
        split(path)?;
        self.enter(path, false)?;
        let dir = self.top();
        rfs::fchmod(dir, Mode::from_raw_mode(mode & 0o7777)).map_err(io("setting the mode"))?;
        rfs::futimens(dir, &mtime.timestamps()).map_err(io("setting the times"))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_refuses_paths_that_leave_the_target() {
        for bad in [
            &b""[..],
            b"/a",
            b"a/",
            b"a//b",
            b"..",
            b"a/../b",
            b"./a",
            b"a/.",
            b"a\0b",
        ] {
            assert!(split(bad).is_err(), "{:?}", String::from_utf8_lossy(bad));
        }
        assert_eq!(split(b"a").unwrap(), (&b""[..], &b"a"[..]));
        assert_eq!(split(b"a/b/c\xff").unwrap(), (&b"a/b"[..], &b"c\xff"[..]));
    }

    #[test]
    fn deep_trees_keep_few_handles_open() {
        let tmp = tempfile::tempdir().unwrap();
        let mut t = Target::open(tmp.path(), 1).unwrap();
        let depth = KEEP_OPEN * 3;
        let mut path = Vec::new();
        for i in 0..depth {
            if i > 0 {
                path.push(b'/');
            }
            path.extend_from_slice(format!("d{i}").as_bytes());
            t.make_dir(&path).unwrap();
        }
        let open = t.chain.iter().filter(|l| l.fd.is_some()).count();
        assert!(open <= KEEP_OPEN + 1, "{open} handles open");
        // Climbing back up reopens dropped levels; modes and times land on the right dirs.
        let mut p = path.clone();
        let mtime = MTime {
            secs: 1_000_000,
            nanos: 5,
        };
        loop {
            t.set_dir_meta(&p, 0o755, mtime).unwrap();
            match p.iter().rposition(|b| *b == b'/') {
                Some(i) => p.truncate(i),
                None => break,
            }
        }
        let mid: std::path::PathBuf = (0..KEEP_OPEN + 5).map(|i| format!("d{i}")).collect();
        let md = std::fs::metadata(tmp.path().join(mid)).unwrap();
        assert_eq!(
            filetime::FileTime::from_last_modification_time(&md).unix_seconds(),
            1_000_000
        );
    }
}
