//! A private copy of the chunk index, for a process that finds the index open in another
//! process (its `flock` held: a backup running from cron while the user restores, two backups
//! of one host at once, a mount that stays up for hours).
//!
//! The index is a cache of the containers' metadata, so a private copy is as good as the
//! shared one: the process opens the copy alone, catches it up with the repository and
//! writes its own entries into it, and the copy is deleted when the process ends. The shared
//! index catches up with this process's containers on its next use, as it does after another
//! client's backup.
//!
//! The copy is made of hard links in a directory beside the index (same file system): run
//! files are immutable and the manifest is only ever replaced by a rename, so a link sees
//! exactly the bytes the other process wrote and none it writes later. A run the other process
//! deletes between reading the manifest and linking it makes the copy torn; it is made again
//! (a few times), and a copy still torn is rebuilt from the repository like any damaged index.

use super::filter::filter_path;
use super::ChunkIndex;
use crate::error::{Error, Result};
use std::path::{Path, PathBuf};

/// Times a torn copy is made again before it is rebuilt from the repository.
const ATTEMPTS: usize = 3;

/// A private copy of the index at `shared`, deleted when dropped.
#[derive(Debug)]
pub struct PrivateIndex {
    dir: tempfile::TempDir,
    manifest: PathBuf,
}

/// The directory of private copies beside the index whose manifest is `shared`.
fn private_root(shared: &Path) -> PathBuf {
    let mut name = shared.file_name().unwrap_or_default().to_os_string();
    name.push(".private");
    shared.with_file_name(name)
}

/// Removes the copies of processes that no longer run (killed before they could remove
/// their own). A copy's directory name starts with its process id.
fn remove_abandoned(root: &Path) {
    let Ok(rd) = std::fs::read_dir(root) else {
        return;
    };
    for e in rd.flatten() {
        let name = e.file_name();
        let pid = name
            .to_str()
            .and_then(|n| n.split('-').next())
            .and_then(|p| p.parse::<u32>().ok());
        if pid.is_some_and(|p| !crate::repository::lock::process_alive(p)) {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

/// Links `from` as `to`, or copies it where links are refused.
fn link_or_copy(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::hard_link(from, to).or_else(|_| std::fs::copy(from, to).map(|_| ()))
}

impl PrivateIndex {
    /// Makes a private copy of the index whose manifest is `shared` and opens it. An index
    /// that does not exist yet gives an empty copy (the caller rebuilds it).
    ///
    /// # Errors
    /// The copy cannot be made (I/O), or the copy cannot be opened for another reason than
    /// damage.
    pub fn open(shared: &Path) -> Result<(Self, ChunkIndex)> {
        let root = private_root(shared);
        std::fs::create_dir_all(&root)
            .map_err(|e| Error::io(format!("creating {}", root.display()), e))?;
        remove_abandoned(&root);
        let mut attempt = 0;
        loop {
            attempt += 1;
            let copy = Self::link(shared, &root)?;
            match ChunkIndex::open(&copy.manifest) {
                Ok(index) => return Ok((copy, index)),
                // Torn by a concurrent writer (a run deleted after the manifest was linked).
                Err(Error::IndexDamaged(_)) if attempt < ATTEMPTS => continue,
                // `ChunkIndex::open` removed the damaged manifest: opened again, the copy is
                // empty, and the caller rebuilds it.
                Err(Error::IndexDamaged(_)) => {
                    let index = ChunkIndex::open(&copy.manifest)?;
                    return Ok((copy, index));
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Links the manifest, then the run files it may name and the fingerprint filter, into a
    /// new directory under `root`.
    fn link(shared: &Path, root: &Path) -> Result<Self> {
        let dir = tempfile::Builder::new()
            .prefix(&format!("{}-", std::process::id()))
            .tempdir_in(root)
            .map_err(|e| Error::io(format!("creating a directory in {}", root.display()), e))?;
        let name = shared.file_name().unwrap_or_default();
        let manifest = dir.path().join(name);
        let io = |what: &Path| {
            let what = what.display().to_string();
            move |e| Error::io(format!("copying {what}"), e)
        };
        match link_or_copy(shared, &manifest) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(PrivateIndex { dir, manifest });
            }
            Err(e) => return Err(io(shared)(e)),
        }
        let prefix = format!("{}.", name.to_string_lossy());
        let from = shared.parent().unwrap_or(Path::new("."));
        let rd = std::fs::read_dir(from).map_err(io(from))?;
        for e in rd.flatten() {
            let n = e.file_name();
            let Some(n) = n.to_str() else { continue };
            let is_run = n.starts_with(&prefix) && n.ends_with(".run");
            let is_filter = e.path() == filter_path(shared);
            if is_run || is_filter {
                match link_or_copy(&e.path(), &dir.path().join(n)) {
                    // Deleted meanwhile: if the manifest named it, opening finds the copy torn.
                    Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
                    r => r.map_err(io(&e.path()))?,
                }
            }
        }
        Ok(PrivateIndex { dir, manifest })
    }

    /// The copy's manifest.
    pub fn manifest(&self) -> &Path {
        &self.manifest
    }

    /// The copy's directory.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}
