//! The indexes a backup works with: the sketch index its delta stage finds candidates in, the
//! fingerprint index its duplicates are looked up in (both chosen by the options), and its
//! last work on the client's chunk index.

use super::fingerprint_index::{ExactIndex, FingerprintIndex, FingerprintIndexKind, LocalityIndex};
use super::prefetch::{DensePrefetcher, PrefetchSketchIndex, PrefetchedBases};
use super::resemble::sketch_index::{FullSketchIndex, SketchIndex, StreamSketchIndex};
use super::BackupOptions;
use crate::backend::wrap::metered::Purpose;
use crate::error::Result;
use crate::format::config::{DeltaConfig, SketchIndexKind};
use crate::format::container::ContainerId;
use crate::repository::damage::DamageSet;
use crate::repository::IndexedRepository;
use std::sync::Arc;

/// The sketch index `delta` asks for, if it sketches: LoopDelta's (`prefetch`) only with the
/// dense containers `prefetched` (and the capacity of its cache).
pub(super) fn sketch_index(
    repo: &IndexedRepository,
    delta: &DeltaConfig,
    prefetched: Option<&(Arc<PrefetchedBases>, usize)>,
) -> Result<Option<Box<dyn SketchIndex>>> {
    Ok(match (delta.sketch, delta.sketch_index) {
        (None, _) => None,
        (Some(_), SketchIndexKind::Full) => Some(Box::new(FullSketchIndex::new(
            repo.index().reader()?,
            delta.sketch_keep,
        ))),
        (Some(_), SketchIndexKind::Stream) => Some(Box::new(StreamSketchIndex::new(
            repo.backend_for(Purpose::ContainerMeta),
            delta.stream_cache_containers,
        ))),
        (Some(_), SketchIndexKind::Prefetch) => prefetched.map(|(p, capacity)| {
            Box::new(PrefetchSketchIndex::new(p.clone(), *capacity)) as Box<dyn SketchIndex>
        }),
    })
}

/// The fingerprint index of `kind` over the index's read view as it is now (taken before
/// anything of this backup is indexed), counting the copies `damage` records as absent. The
/// locality index takes the fingerprint filter (a rebuild of it is a notice), the last
/// backup's containers as hints, and LoopDelta's loader of dense containers.
pub(super) fn fingerprint_index(
    repo: &IndexedRepository,
    kind: FingerprintIndexKind,
    opts: &BackupOptions,
    damage: &Arc<DamageSet>,
    dense_loader: Option<&Arc<DensePrefetcher>>,
    notices: &mut Vec<String>,
) -> Result<Arc<dyn FingerprintIndex>> {
    Ok(match kind {
        FingerprintIndexKind::Exact => {
            Arc::new(ExactIndex::new(repo.index().reader()?, damage.clone()))
        }
        FingerprintIndexKind::Locality => {
            let (filter, rebuilt) = repo.index().fingerprint_filter()?;
            notices.extend(rebuilt);
            let index = LocalityIndex::new(
                repo.index().reader()?,
                damage.clone(),
                filter,
                // Metered as prefetches (issue 16 item 4's purpose for them).
                repo.backend_for(Purpose::Prefetch),
                opts.lookup.cache_containers,
            )
            .with_hints(repo.index().recent_containers());
            let index = if opts.loopdelta.cache_aware_filter {
                index.judging_in_stream_order()
            } else {
                index
            };
            Arc::new(match dense_loader {
                Some(loader) => index.with_loader(loader.clone()),
                None => index,
            })
        }
    })
}

/// A backup's last work on the client's index, run beside the snapshot's write: takes in the
/// last batch of containers, saves the filter (every container is in it now; a filter not
/// written is rebuilt by the next backup) and the locality hints, then compacts the index if
/// worthwhile. Returns notices: none of it decides the backup, whose containers are durable.
pub(super) fn update_client_index(
    repo: &IndexedRepository,
    unindexed: crate::repository::UnindexedContainers,
    hints: Option<&[ContainerId]>,
) -> Vec<String> {
    let mut notices = Vec::new();
    if let Err(e) = unindexed.index(repo) {
        notices.push(format!(
            "the chunk index could not take in this backup's last containers ({e}); the next \
             command catches up"
        ));
        return notices;
    }
    if let Err(e) = repo.index().save_filter() {
        notices.push(format!("fingerprint filter not saved: {e}"));
    }
    if let Some(hints) = hints {
        if let Err(e) = repo.index().set_recent_containers(hints) {
            notices.push(format!("locality hints not saved: {e}"));
        }
    }
    if let Err(e) = repo.index().compact_if_worthwhile() {
        notices.push(format!("the chunk index could not be compacted: {e}"));
    }
    notices
}
