//! `repair index`: rebuild the chunk index from container metadata.

use crate::backend::FileKind;
use crate::container::{ContainerId, ContainerMeta};
use crate::damage::DamageSet;
use crate::error::Result;
use crate::repository::{read_container_meta, IndexedRepository};

/// What a rebuild did.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct RepairStats {
    /// Containers indexed.
    pub containers: u64,
    /// Chunks indexed.
    pub chunks: u64,
    /// Stored copies left out because `check` recorded them as damaged.
    pub damaged_skipped: u64,
    /// Containers skipped because their metadata is unreadable (named in `problems`).
    pub problems: Vec<String>,
}

/// Replaces the index with every entry of every readable container, except copies recorded
/// as damaged (see [`crate::damage`]), in one transaction. Calls `warn` for each container it
/// has to skip.
pub fn rebuild_index(repo: &IndexedRepository, warn: &mut dyn FnMut(&str)) -> Result<RepairStats> {
    let mut stats = RepairStats::default();
    let (damage, notices) = DamageSet::load(repo.backend().as_ref())?;
    for n in notices {
        warn(&n);
        stats.problems.push(n);
    }
    let mut metas: Vec<(ContainerId, ContainerMeta)> = Vec::new();
    for (name, _) in repo.backend().list(FileKind::Container)? {
        let Some(id) = ContainerId::from_hex(&name) else {
            let msg = format!("ignoring {name}: not a container name");
            warn(&msg);
            stats.problems.push(msg);
            continue;
        };
        if damage.container_damaged(&id) {
            stats.damaged_skipped += 1;
            continue;
        }
        match read_container_meta(repo.backend().as_ref(), &name) {
            Ok(meta) => metas.push((id, meta)),
            Err(e) => {
                let msg = format!("skipping container {name}: {e}");
                warn(&msg);
                stats.problems.push(msg);
            }
        }
    }
    let keep =
        |id: &ContainerId, e: &crate::container::EntryMeta| damage.reason(id, &e.id).is_none();
    for (id, meta) in &metas {
        stats.containers += 1;
        let kept = meta.entries.iter().filter(|e| keep(id, e)).count() as u64;
        stats.chunks += kept;
        stats.damaged_skipped += meta.entries.len() as u64 - kept;
    }
    repo.index()
        .rebuild(metas.iter().map(|(id, meta)| (*id, meta)), keep)?;
    Ok(stats)
}
