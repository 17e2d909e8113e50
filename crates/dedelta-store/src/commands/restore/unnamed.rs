//! Unnamed files (`O_TMPFILE`): how restore writes a file that has no name until it is
//! complete, then links it to its name (see [`super::target`]). Linux's; elsewhere none are
//! made and files take temporary names.

use rustix::fs::{self as rfs, AtFlags};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

/// How an unnamed file is given its name, as [`LinkUnnamed::probe`] found works.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum LinkUnnamed {
    /// `linkat(fd, "", dir, name, AT_EMPTY_PATH)`: needs `CAP_DAC_READ_SEARCH` (root).
    EmptyPath,
    /// `linkat(AT_FDCWD, "/proc/self/fd/N", dir, name, AT_SYMLINK_FOLLOW)`: any user, with
    /// `/proc` mounted.
    ProcFd,
}

impl LinkUnnamed {
    /// How unnamed files can be named in `dir`: an unnamed file is made and linked under
    /// `names[i]` (then removed) each way in turn. `None` when neither works (a file system
    /// without `O_TMPFILE`, no `/proc` and not root).
    pub(super) fn probe(dir: BorrowedFd<'_>, names: &[String; 2]) -> Option<LinkUnnamed> {
        for (how, name) in [LinkUnnamed::EmptyPath, LinkUnnamed::ProcFd]
            .into_iter()
            .zip(names)
        {
            let file = open_unnamed(dir, 0o600).ok()?;
            if how.link(file.as_fd(), dir, name.as_bytes()).is_ok() {
                let _ = rfs::unlinkat(dir, name.as_str(), AtFlags::empty());
                return Some(how);
            }
        }
        None
    }

    /// Links the unnamed file `file` as `name` in `dir`; fails with `EEXIST` when anything
    /// is there (never following or replacing it).
    #[cfg(any(target_os = "linux", target_os = "android"))]
    pub(super) fn link(
        self,
        file: BorrowedFd<'_>,
        dir: BorrowedFd<'_>,
        name: &[u8],
    ) -> rustix::io::Result<()> {
        match self {
            LinkUnnamed::EmptyPath => rfs::linkat(file, c"", dir, name, AtFlags::EMPTY_PATH),
            LinkUnnamed::ProcFd => {
                use std::os::fd::AsRawFd;
                let proc = format!("/proc/self/fd/{}", file.as_raw_fd());
                rfs::linkat(rfs::CWD, proc.as_str(), dir, name, AtFlags::SYMLINK_FOLLOW)
            }
        }
    }

    /// Unnamed files are Linux's: elsewhere the probe finds none.
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    pub(super) fn link(
        self,
        _: BorrowedFd<'_>,
        _: BorrowedFd<'_>,
        _: &[u8],
    ) -> rustix::io::Result<()> {
        Err(rustix::io::Errno::NOTSUP)
    }
}

/// An unnamed file in `dir`, with permissions `mode` (less the umask).
#[cfg(any(target_os = "linux", target_os = "android"))]
pub(super) fn open_unnamed(dir: BorrowedFd<'_>, mode: u32) -> rustix::io::Result<OwnedFd> {
    rfs::openat(
        dir,
        c".",
        rfs::OFlags::WRONLY | rfs::OFlags::TMPFILE | rfs::OFlags::CLOEXEC,
        rfs::Mode::from_raw_mode(mode),
    )
}

/// Unnamed files are Linux's: elsewhere files take temporary names.
#[cfg(not(any(target_os = "linux", target_os = "android")))]
pub(super) fn open_unnamed(_dir: BorrowedFd<'_>, _mode: u32) -> rustix::io::Result<OwnedFd> {
    Err(rustix::io::Errno::NOTSUP)
}
