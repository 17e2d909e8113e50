//! The repository with its chunk index ([`IndexedRepository`]): opening the index (a private
//! copy when another process holds it, a rebuild when it is damaged), catching it up with the
//! repository, and what the open read for the rest of the command (the snapshot listing, the
//! damage records, container metadata).

use super::{
    damage, index_rebuild, index_sync, metas_at_open, read_container_meta,
    read_container_record_tail, snapshot_filter, snapshots, Repository,
};
use crate::backend::wrap::metered::Purpose;
use crate::client::index::{ChunkIndex, PrivateIndex};
use crate::error::{Error, Result};
use crate::format::container::{ContainerId, ContainerMeta};
use std::sync::Arc;

impl Repository {
    /// Opens the chunk index. The index is a cache of the containers' metadata: an index that
    /// is missing, incomplete (a rebuild never finished) or damaged is discarded and rebuilt,
    /// and [`IndexedRepository::notices`] says so. An index open in another process is
    /// copied, and this process works on its private copy ([`PrivateIndex`]).
    pub fn open_index(self) -> Result<IndexedRepository> {
        let mut notices = Vec::new();
        let opened = match ChunkIndex::open(&self.index_path) {
            Ok(i) => Ok(i),
            Err(Error::IndexDamaged(why)) => {
                // `ChunkIndex::open` has already removed the damaged file.
                notices.push(format!(
                    "the chunk index {} was damaged ({why}); it was discarded and rebuilt",
                    self.index_path.display()
                ));
                ChunkIndex::open(&self.index_path)
            }
            Err(e) => Err(e),
        };
        match opened {
            Ok(index) => self.with_opened_index(index, None, notices),
            Err(Error::IndexInUse(_)) => {
                notices.push(format!(
                    "the chunk index {} is in use by another dedelta process: this command \
                     works on a private copy of it (the shared index catches up on its next use)",
                    self.index_path.display()
                ));
                self.open_private_index_noting(notices)
            }
            Err(e) => Err(e),
        }
    }

    /// Opens a private copy of the chunk index ([`PrivateIndex`]), whether or not another
    /// process has it open: for a command that runs for hours (`mount`) and should not keep
    /// every other command on the index waiting.
    pub fn open_private_index(self) -> Result<IndexedRepository> {
        self.open_private_index_noting(Vec::new())
    }

    fn open_private_index_noting(mut self, notices: Vec<String>) -> Result<IndexedRepository> {
        let (private, index) = PrivateIndex::open(&self.index_path)?;
        self.index_path = private.manifest().to_path_buf();
        self.with_opened_index(index, Some(private), notices)
    }

    /// Catches `index` up with the repository (or rebuilds it if it is incomplete).
    fn with_opened_index(
        self,
        index: ChunkIndex,
        private: Option<PrivateIndex>,
        notices: Vec<String>,
    ) -> Result<IndexedRepository> {
        if let Some(dir) = &self.cache_dir {
            crate::client::cache::mark_used(dir, self.local_root.as_deref());
        }
        // Rebuilds, catch-ups and backups record super-features as the config says (a
        // backup that overrides it sets its own for its run).
        index.set_sketch_keep(self.config().delta.sketch_keep);
        let repo = IndexedRepository {
            repo: self,
            index,
            _private: private,
            notices: std::sync::Mutex::new(notices),
            damage: std::sync::Mutex::new(None),
            listed_at_open: std::sync::Mutex::new(None),
            metas_at_open: metas_at_open::MetasAtOpen::default(),
        };
        let (caught_up, listed) = if repo.snapshots_at_open {
            let (caught_up, listed) = crate::request_threads::beside(
                repo.reads_are_round_trips(),
                || repo.snapshots(),
                || repo.catch_up(),
            );
            (caught_up, Some(listed))
        } else {
            (repo.catch_up(), None)
        };
        caught_up?;
        *repo
            .listed_at_open
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = listed;
        Ok(repo)
    }
}

/// A repository with its chunk index: can read and write chunks.
#[derive(Debug)]
pub struct IndexedRepository {
    repo: Repository,
    index: ChunkIndex,
    /// The private copy `index` is opened from, if any: removed after `index` is closed
    /// (fields drop in order).
    _private: Option<PrivateIndex>,
    /// Things the user should know that did not stop the command (an index rebuilt).
    notices: std::sync::Mutex<Vec<String>>,
    /// The damage records as the open's catch-up read them (see [`Self::damage_records`]).
    damage: std::sync::Mutex<Option<Arc<damage::DamageSet>>>,
    /// See [`Self::snapshots_listed_at_open`].
    listed_at_open: std::sync::Mutex<Option<Result<snapshots::SnapshotList>>>,
    /// See [`Self::known_meta`].
    pub(super) metas_at_open: metas_at_open::MetasAtOpen,
}

impl std::ops::Deref for IndexedRepository {
    type Target = Repository;
    fn deref(&self) -> &Repository {
        &self.repo
    }
}

impl IndexedRepository {
    /// The chunk index.
    pub fn index(&self) -> &ChunkIndex {
        &self.index
    }

    /// The repository without its index (the index file's lock released), still unlocked if
    /// encrypted: `mount` reopens it on a private copy of the index.
    pub fn into_repository(self) -> Repository {
        self.repo
    }

    /// Replaces a damaged index (whose file [`ChunkIndex`] has already removed) with a fresh
    /// one rebuilt from the containers.
    pub fn reset_index(&self) -> Result<()> {
        self.index.reset()?;
        index_rebuild::rebuild_index(self, &mut |_| {})?;
        Ok(())
    }

    /// Rebuilds an incomplete index, else catches it up (the open's last step).
    fn catch_up(&self) -> Result<()> {
        if !self.index.is_complete()? {
            let st = index_rebuild::rebuild_index(self, &mut |_| {})?;
            for p in &st.problems {
                self.notice(format!("index rebuild: {p}"));
            }
        } else {
            self.sync_index()?;
        }
        Ok(())
    }

    /// The snapshot listing the open made beside its catch-up, with
    /// [`Repository::listing_snapshots_at_open`] (`None` without it, or once taken): what
    /// [`Repository::snapshots`] would have returned then.
    pub fn snapshots_listed_at_open(&self) -> Option<Result<snapshots::SnapshotList>> {
        self.listed_at_open
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
    }

    /// [`Repository::find_snapshot_filtered`] in the listing the open made beside its
    /// catch-up, when it made one ([`Repository::listing_snapshots_at_open`]): `latest`, or
    /// an id, found without a request (see [`snapshots::find_in`]). Else, or when that
    /// listing failed, as [`Repository::find_snapshot_filtered`].
    pub fn find_snapshot_filtered(
        &self,
        spec: &str,
        filter: &snapshot_filter::SnapshotFilter,
    ) -> Result<(
        crate::format::snapshot::SnapshotId,
        crate::format::snapshot::Snapshot,
    )> {
        let listed = self
            .listed_at_open
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        match listed.as_ref() {
            Some(Ok(l)) => snapshots::find_in(self.backend().as_ref(), l, spec, filter),
            _ => {
                drop(listed);
                self.repo.find_snapshot_filtered(spec, filter)
            }
        }
    }

    /// [`Self::find_snapshot_filtered`] without a filter.
    pub fn find_snapshot(
        &self,
        spec: &str,
    ) -> Result<(
        crate::format::snapshot::SnapshotId,
        crate::format::snapshot::Snapshot,
    )> {
        self.find_snapshot_filtered(spec, &snapshot_filter::SnapshotFilter::default())
    }

    /// Catches the index up with containers and damage records other clients wrote or
    /// deleted (see [`index_sync`]); what the user should know becomes a notice.
    pub fn sync_index(&self) -> Result<index_sync::SyncStats> {
        let st = index_sync::sync_index(self)?;
        for n in &st.notices {
            self.notice(format!("index: {n}"));
        }
        Ok(st)
    }

    /// Records in the index that it reflects the damage records as they are now: for a
    /// command that wrote records and adjusted the index itself (else the next open, seeing
    /// records it has not applied, would rebuild the index).
    pub fn index_applies_damage_records(&self) -> Result<()> {
        let (set, _) = damage::DamageSet::load(self.backend().as_ref())?;
        self.index.set_damage_digest(set.digest())?;
        self.remember_damage(set);
        Ok(())
    }

    /// The damage records, listed and read once per command: the open's catch-up
    /// ([`Self::sync_index`]) reads them and every later user (a backup's lookups and its
    /// writer) shares that set, where each listed them again before (three listings and
    /// reads per backup, one of them on the pipeline's start). A command that writes records
    /// updates the set through [`Self::index_applies_damage_records`]. Records another
    /// client writes after the open are not seen, as they were not by a listing a moment
    /// after it either (a `check` may record damage at any time during a backup).
    ///
    /// # Errors
    /// The records cannot be listed (when no catch-up has read them).
    pub fn damage_records(&self) -> Result<Arc<damage::DamageSet>> {
        if let Some(set) = self.lock_damage().clone() {
            return Ok(set);
        }
        let (set, skipped) = damage::DamageSet::load(self.backend().as_ref())?;
        for n in skipped {
            self.notice(n);
        }
        Ok(self.remember_damage(set))
    }

    /// Keeps `set` as the records [`Self::damage_records`] gives.
    pub(crate) fn remember_damage(&self, set: damage::DamageSet) -> Arc<damage::DamageSet> {
        let set = Arc::new(set);
        *self.lock_damage() = Some(set.clone());
        set
    }

    fn lock_damage(&self) -> std::sync::MutexGuard<'_, Option<Arc<damage::DamageSet>>> {
        // A poisoned slot only means a thread panicked while replacing an Arc; it is intact.
        self.damage.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes the notices gathered so far (an index that was rebuilt, records skipped).
    pub fn take_notices(&self) -> Vec<String> {
        std::mem::take(&mut *self.lock_notices())
    }

    /// Adds a notice for the user.
    pub fn notice(&self, msg: String) {
        self.lock_notices().push(msg);
    }

    fn lock_notices(&self) -> std::sync::MutexGuard<'_, Vec<String>> {
        // A poisoned list only means a thread panicked while pushing a string; it is intact.
        self.notices.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Reads and checks the metadata section of a container (a size query and two ranged
    /// reads, metered as [`Purpose::ContainerMeta`]).
    pub fn read_container_meta(&self, id: &ContainerId) -> Result<ContainerMeta> {
        read_container_meta(
            self.backend_for(Purpose::ContainerMeta).as_ref(),
            &id.to_hex(),
        )
    }

    /// [`Self::read_container_meta`] in one suffix read (two when the section is larger than
    /// it: [`super::read_container_meta_tail`]), for restore and dump; kept in the local metadata
    /// cache where there is one ([`Repository::meta_cache`]).
    pub fn read_container_meta_tail(&self, id: &ContainerId) -> Result<ContainerMeta> {
        let backend = self.backend_for(Purpose::ContainerMeta);
        let (meta, record) = read_container_record_tail(backend.as_ref(), &id.to_hex())?;
        self.remember_meta(&record);
        Ok(meta)
    }
}
