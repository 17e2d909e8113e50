//! `repair index`: rebuild the chunk index from container metadata.

use crate::backend::FileKind;
use crate::container::ContainerId;
use crate::error::Result;
use crate::repository::{read_container_meta, IndexedRepository};

/// What a rebuild did.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct RepairStats {
    /// Containers indexed.
    pub containers: u64,
    /// Chunks indexed.
    pub chunks: u64,
    /// Containers skipped because their metadata is unreadable (named in `problems`).
    pub problems: Vec<String>,
}

/// Clears the index and re-inserts every entry of every readable container. Calls `warn` for
/// each container it has to skip.
pub fn rebuild_index(repo: &IndexedRepository, warn: &mut dyn FnMut(&str)) -> Result<RepairStats> {
    let mut stats = RepairStats::default();
    repo.index().clear()?;
    for (name, _) in repo.backend().list(FileKind::Container)? {
        let Some(id) = ContainerId::from_hex(&name) else {
            let msg = format!("ignoring {name}: not a container name");
            warn(&msg);
            stats.problems.push(msg);
            continue;
        };
        match read_container_meta(repo.backend().as_ref(), &name) {
            Ok(meta) => {
                repo.index().insert_container(id, &meta)?;
                stats.containers += 1;
                stats.chunks += meta.entries.len() as u64;
            }
            Err(e) => {
                let msg = format!("skipping container {name}: {e}");
                warn(&msg);
                stats.problems.push(msg);
            }
        }
    }
    Ok(stats)
}
