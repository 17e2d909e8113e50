//! `dedelta mount MOUNTPOINT`: the snapshots as a read-only file system over FUSE (restic's
//! `mount`: `snapshots/`, `hosts/`, `tags/`, `ids/`, `latest`; the tree itself is
//! dedelta_store::commands::mount's). It runs in the foreground until the file system is
//! unmounted (`umount MOUNTPOINT`) or the command is interrupted (Ctrl-C, SIGTERM), which
//! unmounts it.
//!
//! FUSE through the `fuser` crate without libfuse: as root the kernel is asked directly
//! (`/dev/fuse` and mount(2)); other users need `fusermount3` (Debian's `fuse3`).
//!
//! Exit codes: 0 unmounted; 1 the repository or the mount point could not be used; 10 no
//! repository.

use super::select::SnapshotFilterArgs;
use super::RepoArg;
use anyhow::{Context, Result};
use clap::Args;
use dedelta_store::commands::mount::{Attr, DirEntry, MountTree};
use dedelta_store::format::tree::{NodeKind, Timestamp};
use dedelta_store::IndexedRepository;
use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, INodeNo, LockOwner, MountOption,
    OpenFlags, ReplyAttr, ReplyData, ReplyDirectory, ReplyEntry, ReplyOpen, Request,
};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// MiB of decompressed regions the mount's file reads keep.
const MOUNT_CACHE_MIB: usize = 64;
/// How long the kernel may keep attributes and entries: the tree never changes.
const TTL: Duration = Duration::from_secs(60);

/// Arguments of `dedelta mount`.
#[derive(Args)]
pub struct MountArgs {
    #[command(flatten)]
    repo: RepoArg,
    /// An empty directory to mount on.
    mountpoint: PathBuf,
    #[command(flatten)]
    filter: SnapshotFilterArgs,
    /// Let other users read the file system (needs `user_allow_other` in /etc/fuse.conf
    /// unless run as root).
    #[arg(long)]
    allow_other: bool,
}

/// The FUSE side of a [`MountTree`].
struct SnapshotFs {
    tree: MountTree<'static>,
}

fn time(t: Timestamp) -> SystemTime {
    if t.secs >= 0 {
        UNIX_EPOCH + Duration::new(t.secs as u64, t.nanos.min(999_999_999))
    } else {
        UNIX_EPOCH - Duration::from_secs(t.secs.unsigned_abs())
    }
}

fn file_type(k: NodeKind) -> FileType {
    match k {
        NodeKind::Dir => FileType::Directory,
        NodeKind::File => FileType::RegularFile,
        NodeKind::Symlink => FileType::Symlink,
        NodeKind::Fifo => FileType::NamedPipe,
        NodeKind::Socket => FileType::Socket,
        NodeKind::CharDevice => FileType::CharDevice,
        NodeKind::BlockDevice => FileType::BlockDevice,
    }
}

fn fuse_attr(a: &Attr) -> FileAttr {
    FileAttr {
        ino: INodeNo(a.ino),
        size: a.size,
        blocks: a.size.div_ceil(512),
        atime: time(a.atime),
        mtime: time(a.mtime),
        ctime: time(a.ctime),
        crtime: time(a.mtime),
        kind: file_type(a.kind),
        perm: a.perm,
        nlink: if a.kind == NodeKind::Dir { 2 } else { 1 },
        uid: a.uid,
        gid: a.gid,
        rdev: a.rdev as u32,
        blksize: 4096,
        flags: 0,
    }
}

/// Logs a read error (the kernel only hears EIO).
fn eio(e: &dedelta_store::Error) -> Errno {
    eprintln!("warning: {e}");
    Errno::EIO
}

impl Filesystem for SnapshotFs {
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        match self.tree.lookup(parent.0, name.as_bytes()) {
            Ok(Some(a)) => reply.entry(&TTL, &fuse_attr(&a), fuser::Generation(0)),
            Ok(None) => reply.error(Errno::ENOENT),
            Err(e) => reply.error(eio(&e)),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.tree.attr(ino.0) {
            Some(a) => reply.attr(&TTL, &fuse_attr(&a)),
            None => reply.error(Errno::ENOENT),
        }
    }

    /// Snapshots never change: the kernel may keep a file's pages across opens.
    fn open(&self, _req: &Request, _ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        reply.opened(FileHandle(0), FopenFlags::FOPEN_KEEP_CACHE);
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        match self.tree.readlink(ino.0) {
            Some(t) => reply.data(&t),
            None => reply.error(Errno::EINVAL),
        }
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        match self.tree.read(ino.0, offset, size) {
            Ok(Some(d)) => reply.data(&d),
            Ok(None) => reply.error(Errno::EINVAL),
            Err(e) => reply.error(eio(&e)),
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let entries = match self.tree.readdir(ino.0) {
            Ok(Some(e)) => e,
            Ok(None) => return reply.error(Errno::ENOTDIR),
            Err(e) => return reply.error(eio(&e)),
        };
        let dots = [&b"."[..], b".."].map(|name| DirEntry {
            name: name.to_vec(),
            ino: ino.0,
            kind: NodeKind::Dir,
        });
        for (i, e) in dots
            .into_iter()
            .chain(entries)
            .enumerate()
            .skip(offset as usize)
        {
            let name = OsStr::from_bytes(&e.name);
            if reply.add(INodeNo(e.ino), i as u64 + 1, file_type(e.kind), name) {
                break;
            }
        }
        reply.ok();
    }
}

/// Blocks SIGINT and SIGTERM in this thread and every thread it starts from now on, so
/// that [`wait_and_unmount`] alone receives them.
fn block_signals() -> libc::sigset_t {
    // SAFETY: sigset_t is plain data, initialised by sigemptyset before use; the calls only
    // read and write it and this thread's signal mask.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    }
}

/// Waits for SIGINT or SIGTERM, then detaches the mount, which ends the session; before
/// `mounted` is set, exits at once (130, as an interrupted command).
fn wait_and_unmount(set: libc::sigset_t, mountpoint: PathBuf, mounted: &AtomicBool) {
    let mut sig = 0;
    // SAFETY: `set` was filled by `block_signals`; sigwait writes only `sig`.
    unsafe { libc::sigwait(&set, &mut sig) };
    if !mounted.load(Ordering::SeqCst) {
        std::process::exit(130);
    }
    eprintln!("unmounting {}", mountpoint.display());
    if let Ok(c) = std::ffi::CString::new(mountpoint.as_os_str().as_bytes()) {
        // SAFETY: `c` is a valid NUL-terminated path for the duration of the call.
        unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
    }
}

/// Opens the repository with a private copy of its chunk index (removed when the mount
/// ends), under a shared lock: a mount stays up for hours, and a process holds the index's
/// `flock` while it has the index open, so with the shared index every other command on the
/// repository would work on a copy of its own meanwhile.
fn open_private_index(
    repo: &RepoArg,
) -> Result<(
    IndexedRepository,
    Option<dedelta_store::repository::lock::RepoLock>,
)> {
    let r = repo.open_repository()?;
    let lock = super::reader_lock(repo, &r, "mount")?;
    let r = r.open_private_index()?;
    crate::render::print_notices(&r.take_notices());
    Ok((r, lock))
}

/// Mounts the snapshots and serves them until unmounted.
pub fn run(args: MountArgs) -> Result<u8> {
    let meta = std::fs::metadata(&args.mountpoint)
        .with_context(|| format!("mount point {}", args.mountpoint.display()))?;
    if !meta.is_dir() {
        anyhow::bail!(
            "mount point {} is not a directory",
            args.mountpoint.display()
        );
    }
    let filter = args.filter.filter()?;
    // Signals are blocked before any thread starts, so that only the waiting thread
    // receives them.
    let set = block_signals();
    static MOUNTED: AtomicBool = AtomicBool::new(false);
    let mp = args.mountpoint.clone();
    std::thread::spawn(move || wait_and_unmount(set, mp, &MOUNTED));
    let (r, _lock) = open_private_index(&args.repo)?;
    let listed = r.snapshots()?;
    crate::render::print_warnings(&listed.warnings());
    let snapshots = filter.apply(listed.snapshots);
    // The file system lives until the process ends; FUSE wants it 'static.
    let repo: &'static IndexedRepository = Box::leak(Box::new(r));
    let tree = MountTree::new(repo, snapshots, MOUNT_CACHE_MIB << 20)?;
    let mut config = fuser::Config::default();
    config.mount_options = vec![
        MountOption::RO,
        MountOption::FSName("dedelta".into()),
        MountOption::Subtype("dedelta".into()),
        MountOption::DefaultPermissions,
    ];
    if args.allow_other {
        config.acl = fuser::SessionACL::All;
    }
    let session =
        fuser::spawn_mount(SnapshotFs { tree }, &args.mountpoint, &config).with_context(|| {
            format!(
                "mounting on {} (FUSE needs /dev/fuse, and root or fusermount3)",
                args.mountpoint.display()
            )
        })?;
    eprintln!(
        "mounted on {}; unmount with `umount {}` or Ctrl-C",
        args.mountpoint.display(),
        args.mountpoint.display()
    );
    MOUNTED.store(true, Ordering::SeqCst);
    session.join().context("serving the file system")?;
    Ok(0)
}
