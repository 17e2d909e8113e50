//! Unchanged files are not read again (issue 18 part 3): restic's rules (size, mtime, ctime,
//! inode) against the parent snapshot, `--force`, `--ignore-ctime`, `--parent`, and what the
//! delta stage sees of a skipped file.

use crate::delta::dupadj_only_fixed;
use crate::support::*;
use dedelta_store::commands::backup::{BackupResult, SourceOptions};
use dedelta_store::format::config::DeltaConfig;
use dedelta_store::IndexedRepository;
use std::fs;
use std::path::Path;

/// Backs up `src` as backup number `n` with `sources`.
fn backup_src(
    repo: &IndexedRepository,
    src: &Path,
    n: u64,
    sources: SourceOptions,
) -> BackupResult {
    locked(repo, &me(), |lock| {
        let mut opts = backup_options(vec![src.to_path_buf()], time_of(n));
        opts.sources = sources;
        backup_with(repo, lock, opts)
    })
    .unwrap()
}

/// Bytes actually read from files (the rest of `bytes_read` came from the parent).
fn read_from_files(r: &BackupResult) -> u64 {
    r.summary.bytes_read - r.summary.bytes_unmodified
}

/// Restores the newest snapshot and checks that it holds `files` bit-exact.
fn restores_to(repo: &IndexedRepository, tmp: &Path, src: &Path, files: &Files) {
    let (_, snap) = repo.find_snapshot("latest").unwrap();
    let target = tmp.join(format!("restored-{}", snap.time));
    files_restored(restore_to(repo, &snap, &target).unwrap()).unwrap();
    assert_eq!(&read_files(&restored_root(&target, src)), files);
}

fn three_files() -> Files {
    files([
        ("a", text(200_000, 1)),
        ("b", noise(100_000, 2)),
        ("c", text(50_000, 3)),
    ])
}

/// Nothing changed: no file is read, each counts as unmodified, its bytes as duplicates, and
/// the snapshot restores bit-exact.
#[test]
fn unchanged_files_are_not_read() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = init_repo(&tmp.path().join("repo"), config(1, DeltaConfig::default()));
    let src = tmp.path().join("src");
    let files = three_files();
    write_files(&src, &files);
    let first = backup_src(&repo, &src, 0, SourceOptions::default());
    assert_eq!(first.summary.files_new, 3);
    assert_eq!(read_from_files(&first), 350_000);
    let second = backup_src(&repo, &src, 1, SourceOptions::default());
    let s = &second.summary;
    assert_eq!((s.files, s.files_unmodified, s.files_changed), (3, 3, 0));
    assert_eq!((s.bytes_read, s.bytes_unmodified), (350_000, 350_000));
    assert_eq!(read_from_files(&second), 0);
    // Every file chunk is a duplicate; at most tree chunks are new.
    assert!(s.bytes_new <= s.tree_bytes, "{s:?}");
    assert_eq!(s.chunks, first.summary.chunks, "{s:?}");
    restores_to(&repo, tmp.path(), &src, &files);
}

/// `--force` reads every file again, each counted as new.
#[test]
fn force_reads_every_file() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = init_repo(&tmp.path().join("repo"), config(1, DeltaConfig::default()));
    let src = tmp.path().join("src");
    write_files(&src, &three_files());
    backup_src(&repo, &src, 0, SourceOptions::default());
    let forced = SourceOptions {
        force: true,
        ..Default::default()
    };
    let r = backup_src(&repo, &src, 1, forced);
    assert_eq!(r.summary.files_unmodified, 0);
    assert_eq!(read_from_files(&r), 350_000);
    // Without a parent every file read is new, as restic counts (they added up to none).
    let s = &r.summary;
    assert_eq!((s.files, s.files_new, s.files_changed), (3, 3, 0), "{s:?}");
}

/// Rewrites `name` in `src` with `data` and sets its mtime back: the same mtime, and, if the
/// length is the same, the same size; `replace` writes a new file renamed over it (a new
/// inode, as editors save), else the same inode is rewritten.
fn rewrite_keeping_mtime(src: &Path, name: &str, data: &[u8], replace: bool) {
    let path = src.join(name);
    let mtime = filetime::FileTime::from_last_modification_time(&fs::metadata(&path).unwrap());
    let written = if replace {
        src.join(format!("{name}.new"))
    } else {
        path.clone()
    };
    fs::write(&written, data).unwrap();
    filetime::set_file_mtime(&written, mtime).unwrap();
    if replace {
        fs::rename(&written, &path).unwrap();
    }
}

/// A file rewritten in place with the same size and its mtime set back is caught by its
/// ctime, a file replaced by another by its inode, a file whose size changed under the same
/// mtime by its size. With `ignore_ctime` and `ignore_inode` only mtime and size decide
/// (restic's rules): the first two then count as unchanged.
#[test]
fn changed_files_are_read_again() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = init_repo(&tmp.path().join("repo"), config(1, DeltaConfig::default()));
    let src = tmp.path().join("src");
    let mut files = three_files();
    files.insert("d".into(), text(10_000, 4));
    write_files(&src, &files);
    backup_src(&repo, &src, 0, SourceOptions::default());
    let flip = |files: &Files, name: &str| {
        let mut d = files[name].clone();
        d[1000] ^= 0xff;
        d
    };
    let edit = |files: &mut Files| {
        let a = flip(files, "a");
        rewrite_keeping_mtime(&src, "a", &a, false);
        let b = flip(files, "b");
        rewrite_keeping_mtime(&src, "b", &b, true);
        let c = [files["c"].as_slice(), b"+"].concat();
        rewrite_keeping_mtime(&src, "c", &c, false);
        files.insert("a".into(), a);
        files.insert("b".into(), b);
        files.insert("c".into(), c);
    };
    edit(&mut files);
    let r = backup_src(&repo, &src, 1, SourceOptions::default());
    let s = &r.summary;
    assert_eq!((s.files_unmodified, s.files_changed), (1, 3), "{s:?}");
    assert_eq!(read_from_files(&r), 200_000 + 100_000 + 50_001);
    restores_to(&repo, tmp.path(), &src, &files);

    edit(&mut files);
    let lax = SourceOptions {
        ignore_ctime: true,
        ignore_inode: true,
        ..Default::default()
    };
    let r = backup_src(&repo, &src, 2, lax);
    let s = &r.summary;
    assert_eq!((s.files_unmodified, s.files_changed), (3, 1), "{s:?}");
    assert_eq!(read_from_files(&r), 50_002);
}

/// `parent` names the snapshot to compare with; one that does not exist is an error.
#[test]
fn the_parent_can_be_named() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = init_repo(&tmp.path().join("repo"), config(1, DeltaConfig::default()));
    let src = tmp.path().join("src");
    let files = three_files();
    write_files(&src, &files);
    let first = backup_src(&repo, &src, 0, SourceOptions::default());
    // A second source: the newest snapshot has other paths.
    let other = tmp.path().join("other");
    write_files(&other, &files);
    backup_src(&repo, &other, 1, SourceOptions::default());
    let named = SourceOptions {
        parent: Some(first.snapshot_id.to_hex()),
        ..Default::default()
    };
    let r = backup_src(&repo, &src, 2, named);
    assert_eq!(r.summary.files_unmodified, 3);
    let missing = SourceOptions {
        parent: Some("ffffffff".into()),
        ..Default::default()
    };
    let err = locked(&repo, &me(), |lock| {
        let mut opts = backup_options(vec![src.clone()], time_of(3));
        opts.sources = missing;
        backup_with(&repo, lock, opts)
    })
    .unwrap_err();
    assert!(err.to_string().contains("ffffffff"), "{err}");
}

/// Unchanged files around a changed one: the skipped files' chunks are shown to DupAdj as
/// duplicates, so its walk through the parent pairs the changed file's chunks with their old
/// versions as if every file had been read.
#[test]
fn dupadj_walks_on_past_unchanged_files() {
    let tmp = tempfile::tempdir().unwrap();
    let (repo, chunk) = dupadj_only_fixed(tmp.path());
    let src = tmp.path().join("src");
    let mut files = files([
        ("a", text(300_000, 1)),
        ("b", text(300_000, 2)),
        ("c", text(300_000, 3)),
    ]);
    write_files(&src, &files);
    backup_src(&repo, &src, 0, SourceOptions::default());
    let mut b = files["b"].clone();
    for pos in (100..b.len()).step_by(chunk) {
        b[pos] = b'#';
    }
    fs::write(src.join("b"), &b).unwrap();
    files.insert("b".into(), b);
    let r = backup_src(&repo, &src, 1, SourceOptions::default());
    let s = &r.summary;
    assert_eq!(s.files_unmodified, 2);
    let edited = (300_000 / chunk) as u64;
    assert!(s.dupadj_deltas >= edited, "{s:?}");
    restores_to(&repo, tmp.path(), &src, &files);
}

/// A file written to while it is backed up was recorded with its metadata from before the
/// read; it no longer has them, so the next backup reads it again (and restores what it holds
/// then).
#[test]
fn a_file_modified_during_backup_is_read_again() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = init_repo(&tmp.path().join("repo"), config(1, DeltaConfig::default()));
    let src = tmp.path().join("src");
    let mut files = three_files();
    write_files(&src, &files);
    let growing = src.join("growing");
    fs::write(&growing, text(2_000_000, 5)).unwrap();
    // Appends from before the backup starts until after it ends: whenever the backup takes
    // the file's metadata, it changes afterwards.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (stop, growing) = (stop.clone(), growing.clone());
        std::thread::spawn(move || {
            use std::io::Write;
            let mut f = fs::OpenOptions::new().append(true).open(growing).unwrap();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                f.write_all(b"x").unwrap();
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
        })
    };
    std::thread::sleep(std::time::Duration::from_millis(20));
    backup_src(&repo, &src, 0, SourceOptions::default());
    std::thread::sleep(std::time::Duration::from_millis(20));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    writer.join().unwrap();
    let r = backup_src(&repo, &src, 1, SourceOptions::default());
    let s = &r.summary;
    assert_eq!((s.files_unmodified, s.files_changed), (3, 1), "{s:?}");
    files.insert("growing".into(), fs::read(&growing).unwrap());
    restores_to(&repo, tmp.path(), &src, &files);
}

/// Runs `f` on this thread without the capabilities that let root open any file
/// (`CAP_DAC_OVERRIDE`, `CAP_DAC_READ_SEARCH`), so that a file of mode 000 cannot be opened
/// even by root; the effective set is put back after. Capabilities belong to a thread, and
/// the threads `f` starts inherit them.
fn without_dac_override<T>(f: impl FnOnce() -> T) -> T {
    #[repr(C)]
    struct Header {
        version: u32,
        pid: i32,
    }
    #[repr(C)]
    #[derive(Clone, Copy, Default)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    const VERSION_3: u32 = 0x2008_0522;
    let mut header = Header {
        version: VERSION_3,
        pid: 0,
    };
    let mut caps = [Data::default(); 2];
    // SAFETY: capget/capset with a version-3 header and two data words, as the kernel's ABI.
    let got = unsafe { libc::syscall(libc::SYS_capget, &mut header, caps.as_mut_ptr()) };
    assert_eq!(got, 0, "capget");
    let saved = caps;
    caps[0].effective &= !((1 << 1) | (1 << 2));
    let set = unsafe { libc::syscall(libc::SYS_capset, &mut header, caps.as_ptr()) };
    assert_eq!(set, 0, "capset");
    let out = f();
    let back = unsafe { libc::syscall(libc::SYS_capset, &mut header, saved.as_ptr()) };
    assert_eq!(back, 0, "capset back");
    out
}

/// Regression: a file that cannot be opened was counted as a new (or changed) file though
/// nothing of it was stored ("files: 1 (2 new, ...)"). It is a warning, and the counts are
/// of the files stored.
#[test]
fn a_file_that_cannot_be_opened_is_a_warning_not_a_file() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    let repo = init_repo(&tmp.path().join("repo"), config(1, DeltaConfig::default()));
    let src = tmp.path().join("src");
    let files = three_files();
    write_files(&src, &files);
    let locked_out = src.join("b");
    let first = without_dac_override(|| {
        fs::set_permissions(&locked_out, fs::Permissions::from_mode(0o000)).unwrap();
        backup_src(&repo, &src, 0, SourceOptions::default())
    });
    let s = &first.summary;
    assert_eq!((s.files, s.files_new, s.files_changed), (2, 2, 0), "{s:?}");
    assert_eq!(first.warnings.len(), 1, "{:?}", first.warnings);
    assert!(first.warnings[0].contains("/b: "), "{:?}", first.warnings);

    // Changed since (and still unreadable): not counted as changed either.
    fs::set_permissions(&locked_out, fs::Permissions::from_mode(0o644)).unwrap();
    fs::write(&locked_out, b"other bytes").unwrap();
    let second = without_dac_override(|| {
        fs::set_permissions(&locked_out, fs::Permissions::from_mode(0o000)).unwrap();
        backup_src(&repo, &src, 1, SourceOptions::default())
    });
    let s = &second.summary;
    assert_eq!(
        (s.files, s.files_new, s.files_changed, s.files_unmodified),
        (2, 0, 0, 2),
        "{s:?}"
    );
    assert_eq!(second.warnings.len(), 1, "{:?}", second.warnings);
}
