//! Why a chunk cannot be had: the errors [`ChunkLocator`] gives for a chunk the index does
//! not hold, or whose container is gone, with the advice that can bring it back.

use super::ChunkLocator;
use crate::error::Error;
use crate::format::container::ContainerId;
use crate::read::corrupt;
use crate::repository::damage::DamageSet;
use dedelta_core::ChunkId;

impl ChunkLocator<'_> {
    /// The error for a chunk the index does not hold: corruption if `check` recorded its copy
    /// as damaged (it took the copy out of the index), else [`Error::ChunkMissing`], whose
    /// advice names the containers recorded as damaged whole if there are any: `check` took
    /// their copies out of the index without knowing which chunks they held (their metadata
    /// cannot be read), so such a chunk is missing for that reason, and `repair index` cannot
    /// bring it back.
    pub(super) fn missing(&mut self, id: &ChunkId, hex: String) -> Error {
        if self.damage.is_none() {
            // Without readable records the plain "missing" is still true.
            self.damage = Some(
                DamageSet::load(self.repo.backend().as_ref())
                    .map(|(set, _)| set)
                    .unwrap_or_default(),
            );
        }
        let Some(damage) = &self.damage else {
            return Error::chunk_missing(hex);
        };
        if let Some((container, reason)) = damage.chunk_damage(id) {
            return corrupt(
                &container,
                id,
                format!(
                    "recorded as damaged by check ({reason}); back up the file again, or run \
                     `dedelta repair snapshots`"
                ),
            );
        }
        let whole = damage.whole_containers();
        match whole.first() {
            None => Error::chunk_missing(hex),
            Some(first) => Error::ChunkMissing {
                chunk: hex,
                advice: format!(
                    "it may have been in a container recorded as damaged whole by check, whose \
                     metadata cannot be read: {first}{}; back up its files again, or run \
                     `dedelta repair packs`, then `dedelta repair snapshots`",
                    match whole.len() - 1 {
                        0 => String::new(),
                        n => format!(" (and {n} more)"),
                    }
                ),
            },
        }
    }
}

/// Why one attempt to locate a chunk failed.
pub(super) enum Located {
    /// The container the index names does not exist (any more).
    Gone(ContainerId),
    /// Anything else: final.
    Failed(Error),
}

impl From<Error> for Located {
    fn from(e: Error) -> Self {
        Located::Failed(e)
    }
}

/// The error for a chunk whose container is gone even from a fresh index view.
pub(super) fn gone(container: &ContainerId, chunk: &ChunkId) -> Error {
    Error::ContainerGone {
        container: container.to_hex(),
        chunk: chunk.to_hex(),
    }
}
