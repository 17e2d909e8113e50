//! The repository's snapshots: listing (through the client's snapshot cache, see
//! [`list_cached`]), loading and finding them by id prefix.
//!
//! A damaged or stray file in `snapshots/` is reported, never allowed to hide the others.

use crate::backend::{Backend, FileKind};
use crate::client::snapshot_cache::SnapshotCache;
use crate::error::{Error, Result};
use crate::format::snapshot::{Snapshot, SnapshotId};
use crate::repository::snapshot_filter::SnapshotFilter;
use dedelta_core::ChunkId;
use std::collections::HashSet;
use std::path::Path;

/// Writes a snapshot durably; returns its id (the BLAKE3 hash of its file).
pub fn save(backend: &dyn Backend, snapshot: &Snapshot) -> Result<SnapshotId> {
    save_cached(backend, None, snapshot)
}

/// [`save`], then adds the snapshot to the snapshot cache in `cache_dir`, if given (see
/// [`SnapshotCache::append`]).
pub fn save_cached(
    backend: &dyn Backend,
    cache_dir: Option<&Path>,
    snapshot: &Snapshot,
) -> Result<SnapshotId> {
    let bytes = snapshot.to_bytes();
    let id = SnapshotId(ChunkId::of(&bytes).0);
    backend.put(FileKind::Snapshot, &id.to_hex(), &bytes)?;
    if let Some(dir) = cache_dir {
        SnapshotCache::append(dir, id, &bytes);
    }
    Ok(id)
}

/// Loads one snapshot by full hex id, checking that the file hashes to its name.
pub fn load(backend: &dyn Backend, name: &str) -> Result<(SnapshotId, Snapshot)> {
    load_file(backend, name).map(|(id, snap, _)| (id, snap))
}

/// [`load`], also giving the file's bytes.
fn load_file(backend: &dyn Backend, name: &str) -> Result<(SnapshotId, Snapshot, Vec<u8>)> {
    let what = format!("snapshot {name}");
    let bytes = backend.get(FileKind::Snapshot, name)?;
    let id = SnapshotId(ChunkId::of(&bytes).0);
    if id.to_hex() != name {
        return Err(Error::corrupt(what, "content does not match its id"));
    }
    let snap = Snapshot::from_bytes(&bytes, &what)?;
    Ok((id, snap, bytes))
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
    list_cached(backend, None)
}

/// [`list`], with the snapshot files cached in the client cache directory `cache_dir` (see
/// [`SnapshotCache`]): the names are listed every time, a snapshot is read from the
/// repository only when the cache has no good copy of it, and the cache keeps only the names
/// listed. What `check` and `repair` read stays the repository's own ([`list`]).
pub fn list_cached(backend: &dyn Backend, cache_dir: Option<&Path>) -> Result<SnapshotList> {
    let names = backend.list_names(FileKind::Snapshot)?;
    let mut cache = cache_dir.map(SnapshotCache::open);
    let mut out = SnapshotList::default();
    let mut listed = HashSet::with_capacity(names.len());
    let mut to_read = Vec::new();
    for name in names {
        let Some(id) = is_snapshot_name(&name)
            .then(|| SnapshotId::from_hex(&name))
            .flatten()
        else {
            out.unreadable.push(UnreadableSnapshot {
                name,
                reason: "not a snapshot (its name is not a snapshot id)".into(),
                stray: true,
                content_damaged: false,
            });
            continue;
        };
        listed.insert(id);
        if let Some(c) = cache.as_mut() {
            if let Some(bytes) = c.get(&id) {
                match Snapshot::from_bytes(bytes, &format!("snapshot {name}")) {
                    Ok(snap) => {
                        out.snapshots.push((id, snap));
                        continue;
                    }
                    Err(_) => c.remove(&id),
                }
            }
        }
        to_read.push((id, name));
    }
    for ((id, name), loaded) in to_read.iter().zip(load_files(backend, &to_read)) {
        match loaded {
            Ok((id, snap, bytes)) => {
                if let Some(c) = cache.as_mut() {
                    c.insert(id, bytes);
                }
                out.snapshots.push((id, snap));
            }
            // Listed but gone when read: removed after the listing (a `forget` from another
            // client before this command took its lock, seen late by an object store's
            // listing). There is nothing to read or check; it is simply not there.
            Err(Error::ObjectMissing { .. }) => {
                listed.remove(id);
            }
            Err(e) => out.unreadable.push(UnreadableSnapshot {
                name: name.clone(),
                content_damaged: matches!(e, Error::Corrupt { .. }),
                reason: e.to_string(),
                stray: false,
            }),
        }
    }
    if let Some(c) = cache.as_mut() {
        c.retain(|id| listed.contains(id));
        c.save();
    }
    out.snapshots.sort_by(oldest_first);
    Ok(out)
}

/// Snapshots oldest first, as listed and as `latest` picks them: by their `time` strings,
/// then [`tie_order`].
pub fn oldest_first(a: &(SnapshotId, Snapshot), b: &(SnapshotId, Snapshot)) -> std::cmp::Ordering {
    a.1.time.cmp(&b.1.time).then_with(|| tie_order(a, b))
}

/// The order of two snapshots with the same time. A snapshot written in another's place
/// (`rewrite`, `repair snapshots`, `tag`) keeps its time: of two that tie, the one made from
/// another (`original` set) counts as the newer, so that `latest` names it and not the
/// snapshot it replaced; then ids decide.
pub fn tie_order(a: &(SnapshotId, Snapshot), b: &(SnapshotId, Snapshot)) -> std::cmp::Ordering {
    a.1.original
        .is_some()
        .cmp(&b.1.original.is_some())
        .then(a.0.cmp(&b.0))
}

/// Snapshot files read at once by [`list_cached`]: on an object store each is a round trip
/// (up to 45 ms on a 3-node Garage cluster), and a client with an empty cache reads them all.
const SNAPSHOT_READ_THREADS: usize = 8;

/// What [`load_file`] gives.
type LoadedFile = Result<(SnapshotId, Snapshot, Vec<u8>)>;

/// [`load_file`] of each of `files` (id, object name), in their order, up to
/// [`SNAPSHOT_READ_THREADS`] at once.
fn load_files(backend: &dyn Backend, files: &[(SnapshotId, String)]) -> Vec<LoadedFile> {
    if files.len() <= 1 {
        return files.iter().map(|(_, n)| load_file(backend, n)).collect();
    }
    let per = files.len().div_ceil(SNAPSHOT_READ_THREADS);
    std::thread::scope(|s| {
        let parts: Vec<_> = files
            .chunks(per)
            .map(|part| {
                s.spawn(move || {
                    part.iter()
                        .map(|(_, n)| load_file(backend, n))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        parts
            .into_iter()
            .flat_map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    })
}

/// The object name of the snapshot file matching `spec` (a unique id prefix, or a stray file's
/// exact name), whether or not they can be read: what `forget` needs to remove a damaged one.
pub fn resolve_name(backend: &dyn Backend, spec: &str) -> Result<String> {
    let names = backend.list_names(FileKind::Snapshot)?;
    resolve_among(names.iter().map(String::as_str), spec)
}

/// [`resolve_name`] among `names`, listed already.
fn resolve_among<'a>(names: impl Iterator<Item = &'a str> + Clone, spec: &str) -> Result<String> {
    if names.clone().any(|n| n == spec) {
        return Ok(spec.to_string());
    }
    let spec_lc = spec.to_ascii_lowercase();
    if spec.is_empty() || !spec.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(Error::SnapshotNotFound(spec.to_string()));
    }
    let matches: Vec<&str> = names.filter(|n| n.starts_with(&spec_lc)).collect();
    match matches.len() {
        0 => Err(Error::SnapshotNotFound(spec.to_string())),
        1 => Ok(matches[0].to_string()),
        n => Err(Error::AmbiguousSnapshot(spec.to_string(), n)),
    }
}

/// [`find_filtered`] in `listed`, a listing made already (the one an open made beside its
/// catch-up, [`super::Repository::listing_snapshots_at_open`]): no request for `latest` nor
/// for an id naming a readable snapshot, where [`find_filtered`] listed the names again and
/// read the snapshot (two round trips on an object store, one after the other). Only an id
/// naming a file the listing could not read is read again from `backend`, for its error.
pub fn find_in(
    backend: &dyn Backend,
    listed: &SnapshotList,
    spec: &str,
    filter: &SnapshotFilter,
) -> Result<(SnapshotId, Snapshot)> {
    if spec == "latest" {
        return latest_of(listed.snapshots.clone(), spec, filter);
    }
    let hex: Vec<String> = listed.snapshots.iter().map(|(id, _)| id.to_hex()).collect();
    let names = hex
        .iter()
        .map(String::as_str)
        .chain(listed.unreadable.iter().map(|u| u.name.as_str()));
    let name = resolve_among(names, spec)?;
    match hex.iter().position(|h| *h == name) {
        Some(i) => Ok(listed.snapshots[i].clone()),
        None => load(backend, &name),
    }
}

/// The newest of `snapshots` (oldest first) that `filter` selects, for `latest` (`spec`).
fn latest_of(
    snapshots: Vec<(SnapshotId, Snapshot)>,
    spec: &str,
    filter: &SnapshotFilter,
) -> Result<(SnapshotId, Snapshot)> {
    filter.apply(snapshots).pop().ok_or_else(|| {
        Error::SnapshotNotFound(if filter.is_empty() {
            spec.to_string()
        } else {
            format!("{spec} (with the --host/--tag/--path given)")
        })
    })
}

/// Finds a snapshot by unique id prefix, or `latest` (the newest readable one).
pub fn find(backend: &dyn Backend, spec: &str) -> Result<(SnapshotId, Snapshot)> {
    find_filtered(backend, None, spec, &SnapshotFilter::default())
}

/// Finds a snapshot by unique id prefix, or `latest`: the newest readable one `filter`
/// selects (as restic, the filter narrows `latest` only; an id names its snapshot), listing
/// with the snapshot cache in `cache_dir` if given (see [`list_cached`]).
pub fn find_filtered(
    backend: &dyn Backend,
    cache_dir: Option<&Path>,
    spec: &str,
    filter: &SnapshotFilter,
) -> Result<(SnapshotId, Snapshot)> {
    if spec == "latest" {
        return latest_of(list_cached(backend, cache_dir)?.snapshots, spec, filter);
    }
    let name = resolve_name(backend, spec)?;
    load(backend, &name)
}
