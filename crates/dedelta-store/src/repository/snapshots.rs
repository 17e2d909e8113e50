//! The repository's snapshots: listing, loading and finding them by id prefix.
//!
//! A damaged or stray file in `snapshots/` is reported, never allowed to hide the others.

use crate::backend::{Backend, FileKind};
use crate::error::{Error, Result};
use crate::format::snapshot::{Snapshot, SnapshotId};
use crate::repository::snapshot_filter::SnapshotFilter;
use dedelta_core::ChunkId;

/// Writes a snapshot durably; returns its id (the BLAKE3 hash of its file).
pub fn save(backend: &dyn Backend, snapshot: &Snapshot) -> Result<SnapshotId> {
    let bytes = snapshot.to_bytes();
    let id = SnapshotId(ChunkId::of(&bytes).0);
    backend.put(FileKind::Snapshot, &id.to_hex(), &bytes)?;
    Ok(id)
}

/// Loads one snapshot by full hex id, checking that the file hashes to its name.
pub fn load(backend: &dyn Backend, name: &str) -> Result<(SnapshotId, Snapshot)> {
    let what = format!("snapshot {name}");
    let bytes = backend.get(FileKind::Snapshot, name)?;
    let id = SnapshotId(ChunkId::of(&bytes).0);
    if id.to_hex() != name {
        return Err(Error::corrupt(what, "content does not match its id"));
    }
    Ok((id, Snapshot::from_bytes(&bytes, &what)?))
}

/// A snapshot file that could not be used.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct UnreadableSnapshot {
    /// Its object name.
    pub name: String,
    /// Why it cannot be used.
    pub reason: String,
    /// Its name is not a snapshot id at all (a stray file), rather than a damaged snapshot.
    pub stray: bool,
    /// Its bytes were read and are damaged (not an I/O error, not a newer format version):
    /// `repair snapshots --forget` may delete it.
    pub content_damaged: bool,
}

impl UnreadableSnapshot {
    /// A one-line description for warnings.
    pub fn describe(&self) -> String {
        if self.stray {
            format!("ignoring snapshots/{}: {}", self.name, self.reason)
        } else {
            format!(
                "snapshot {} is unreadable and was skipped: {} (remove it with `dedelta forget {}`)",
                self.name, self.reason, self.name
            )
        }
    }
}

/// The snapshots of a repository: the readable ones, oldest first, and the files that are
/// not (one damaged or stray file must not hide the others).
#[derive(Clone, Debug, Default)]
pub struct SnapshotList {
    /// Readable snapshots, oldest first.
    pub snapshots: Vec<(SnapshotId, Snapshot)>,
    /// Files that could not be read as snapshots.
    pub unreadable: Vec<UnreadableSnapshot>,
}

impl SnapshotList {
    /// Warnings for every unreadable file.
    pub fn warnings(&self) -> Vec<String> {
        self.unreadable
            .iter()
            .map(UnreadableSnapshot::describe)
            .collect()
    }

    /// The unreadable files that look like snapshots (not strays).
    pub fn damaged(&self) -> impl Iterator<Item = &UnreadableSnapshot> {
        self.unreadable.iter().filter(|u| !u.stray)
    }
}

/// Whether `name` has the form of a snapshot id (64 lowercase hex digits).
fn is_snapshot_name(name: &str) -> bool {
    name.len() == 64 && name.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// Reads every snapshot file. Fails only if the folder cannot be listed.
pub fn list(backend: &dyn Backend) -> Result<SnapshotList> {
    let mut out = SnapshotList::default();
    for (name, _) in backend.list(FileKind::Snapshot)? {
        if !is_snapshot_name(&name) {
            out.unreadable.push(UnreadableSnapshot {
                name,
                reason: "not a snapshot (its name is not a snapshot id)".into(),
                stray: true,
                content_damaged: false,
            });
            continue;
        }
        match load(backend, &name) {
            Ok(s) => out.snapshots.push(s),
            Err(e) => out.unreadable.push(UnreadableSnapshot {
                name,
                content_damaged: matches!(e, Error::Corrupt { .. }),
                reason: e.to_string(),
                stray: false,
            }),
        }
    }
    out.snapshots
        .sort_by(|a, b| a.1.time.cmp(&b.1.time).then(a.0.cmp(&b.0)));
    Ok(out)
}

/// The object name of the snapshot file matching `spec` (a unique id prefix, or a stray file's
/// exact name), whether or not they can be read: what `forget` needs to remove a damaged one.
pub fn resolve_name(backend: &dyn Backend, spec: &str) -> Result<String> {
    let names: Vec<String> = backend
        .list(FileKind::Snapshot)?
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    if names.iter().any(|n| n == spec) {
        return Ok(spec.to_string());
    }
    let spec_lc = spec.to_ascii_lowercase();
    if spec.is_empty() || !spec.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(Error::SnapshotNotFound(spec.to_string()));
    }
    let matches: Vec<&String> = names.iter().filter(|n| n.starts_with(&spec_lc)).collect();
    match matches.len() {
        0 => Err(Error::SnapshotNotFound(spec.to_string())),
        1 => Ok(matches[0].clone()),
        n => Err(Error::AmbiguousSnapshot(spec.to_string(), n)),
    }
}

/// Finds a snapshot by unique id prefix, or `latest` (the newest readable one).
pub fn find(backend: &dyn Backend, spec: &str) -> Result<(SnapshotId, Snapshot)> {
    find_filtered(backend, spec, &SnapshotFilter::default())
}

/// Finds a snapshot by unique id prefix, or `latest`: the newest readable one `filter`
/// selects (as restic, the filter narrows `latest` only; an id names its snapshot).
pub fn find_filtered(
    backend: &dyn Backend,
    spec: &str,
    filter: &SnapshotFilter,
) -> Result<(SnapshotId, Snapshot)> {
    if spec == "latest" {
        return filter.apply(list(backend)?.snapshots).pop().ok_or_else(|| {
            Error::SnapshotNotFound(if filter.is_empty() {
                spec.to_string()
            } else {
                format!("{spec} (with the --host/--tag/--path given)")
            })
        });
    }
    let name = resolve_name(backend, spec)?;
    load(backend, &name)
}
