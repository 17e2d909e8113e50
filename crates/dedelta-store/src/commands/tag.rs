//! `tag`: change the tags of snapshots (restic's `tag --add/--remove/--set`).
//!
//! A snapshot file is write-once and named by its hash, so a change of tags writes a new
//! snapshot and removes the old one, in that order: the new file is durable (temp file, fsync,
//! rename, fsync dir) before the old one is deleted, so a crash between the two leaves both
//! (the same tree twice, which `forget` can remove), never neither. The new snapshot's
//! `original` names the snapshot it was first made from, as restic records it.

use crate::backend::FileKind;
use crate::error::{Error, Result};
use crate::format::snapshot::{Snapshot, SnapshotId};
use crate::repository::lock::RepoLock;
use crate::repository::snapshot_filter::SnapshotFilter;
use crate::repository::snapshots::{list, load, resolve_name, save};
use crate::repository::Repository;

/// How the tags change.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TagChange {
    /// Replace the tags with these (with `Some`; an empty list removes every tag).
    pub set: Option<Vec<String>>,
    /// Add these.
    pub add: Vec<String>,
    /// Remove these.
    pub remove: Vec<String>,
}

impl TagChange {
    /// Checks the change: something to do, `set` not mixed with `add`/`remove` (as restic),
    /// and tags that are not empty and hold no `,` (which separates tags in `--tag a,b`).
    ///
    /// # Errors
    /// [`Error::InvalidOption`] naming the problem.
    pub fn validate(&self) -> Result<()> {
        if self.set.is_none() && self.add.is_empty() && self.remove.is_empty() {
            return Err(Error::InvalidOption(
                "nothing to do: give --add, --remove or --set".into(),
            ));
        }
        if self.set.is_some() && !(self.add.is_empty() && self.remove.is_empty()) {
            return Err(Error::InvalidOption(
                "--set cannot be combined with --add or --remove".into(),
            ));
        }
        let all = self
            .set
            .iter()
            .flatten()
            .chain(&self.add)
            .chain(&self.remove);
        for t in all {
            if t.is_empty() || t.contains(',') {
                return Err(Error::InvalidOption(format!(
                    "tag {t:?}: a tag must be non-empty and hold no ','"
                )));
            }
        }
        Ok(())
    }

    /// `tags` after the change (order kept, added tags appended, no duplicates).
    pub fn applied(&self, tags: &[String]) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        let start = self.set.as_deref().unwrap_or(tags);
        for t in start.iter().chain(&self.add) {
            if !out.contains(t) && !self.remove.contains(t) {
                out.push(t.clone());
            }
        }
        out
    }
}

/// One snapshot whose tags changed.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Retagged {
    /// The removed snapshot (full hex id).
    pub old_id: String,
    /// The snapshot written in its place.
    pub new_id: String,
    /// Its tags.
    pub tags: Vec<String>,
}

/// The snapshots named in `ids` (unique id prefixes, or `latest`: the newest `filter`
/// selects; as in restic, a named snapshot counts whatever the filter), or, with none named,
/// every snapshot `filter` selects. For the commands that change snapshots (`tag`, `rewrite`).
pub(crate) fn chosen_snapshots(
    repo: &Repository,
    ids: &[String],
    filter: &SnapshotFilter,
) -> Result<Vec<(SnapshotId, Snapshot)>> {
    let backend = repo.backend().as_ref();
    if ids.is_empty() {
        return Ok(filter.apply(list(backend)?.snapshots));
    }
    let mut v: Vec<(SnapshotId, Snapshot)> = Vec::new();
    for spec in ids {
        let s = if spec == "latest" {
            repo.find_snapshot_filtered(spec, filter)?
        } else {
            load(backend, &resolve_name(backend, spec)?)?
        };
        if !v.iter().any(|(id, _)| *id == s.0) {
            v.push(s);
        }
    }
    Ok(v)
}

/// Changes the tags of the snapshots named in `ids` (unique id prefixes; as in restic, a
/// named snapshot is changed whatever the filter), or, with none named, of every snapshot
/// `filter` selects; returns the snapshots that changed (one whose
/// tags stay the same is left alone). The caller holds the exclusive lock.
pub fn tag(
    repo: &Repository,
    _lock: &RepoLock,
    ids: &[String],
    filter: &SnapshotFilter,
    change: &TagChange,
) -> Result<Vec<Retagged>> {
    change.validate()?;
    let backend = repo.backend().as_ref();
    let chosen = chosen_snapshots(repo, ids, filter)?;
    let mut out = Vec::new();
    for (id, snap) in chosen {
        let tags = change.applied(&snap.tags);
        if tags == snap.tags {
            continue;
        }
        let rewritten = Snapshot {
            tags: tags.clone(),
            original: Some(snap.original.clone().unwrap_or_else(|| id.to_hex())),
            ..snap
        };
        // New before old: a crash in between leaves both, never neither.
        let new_id = save(backend, &rewritten)?;
        if new_id != id {
            backend.delete(FileKind::Snapshot, &id.to_hex())?;
        }
        out.push(Retagged {
            old_id: id.to_hex(),
            new_id: new_id.to_hex(),
            tags,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &[&str]) -> Vec<String> {
        s.iter().map(|t| t.to_string()).collect()
    }

    #[test]
    fn changes_follow_restic() {
        let add = TagChange {
            add: v(&["b", "c"]),
            remove: v(&["a"]),
            ..Default::default()
        };
        assert_eq!(add.applied(&v(&["a", "b"])), v(&["b", "c"]));
        let set = TagChange {
            set: Some(v(&["x"])),
            ..Default::default()
        };
        assert_eq!(set.applied(&v(&["a"])), v(&["x"]));
        let clear = TagChange {
            set: Some(vec![]),
            ..Default::default()
        };
        assert!(clear.applied(&v(&["a"])).is_empty());
        assert!(TagChange::default().validate().is_err());
        let mixed = TagChange {
            set: Some(v(&["x"])),
            add: v(&["y"]),
            ..Default::default()
        };
        assert!(mixed.validate().is_err());
        let comma = TagChange {
            add: v(&["a,b"]),
            ..Default::default()
        };
        assert!(comma.validate().is_err());
    }
}
