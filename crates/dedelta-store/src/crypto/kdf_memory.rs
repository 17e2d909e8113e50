//! The working memory of an Argon2id derivation, mapped before the derivation starts.
//!
//! Why: the 16,384 first touches of Argon2id's 64 MiB faulted (and zeroed) the memory a page
//! at a time on the derivation's threads. Now it is mapped first with
//! `madvise(MADV_POPULATE_WRITE)`, one call per half on two threads, on 4 KiB pages.
//!
//! Huge pages (`MADV_HUGEPAGE`, used until 2026-11-30) saved TLB misses and took 0.092-0.10 s
//! of CPU instead of 0.125-0.139 s when commands ran back to back. But in a virtual machine
//! that hands freed memory back to its host (Linux's free page reporting, as on the cloud VMs
//! of this project's benchmarks), a huge page is taken from the memory the host was given
//! back, and its first touch costs the host's fault: 64 MiB took 120-260 ms to touch on huge
//! pages against 22-36 ms on 4 KiB pages, and a command run 2.5 s after the last one spent
//! 0.26 s of CPU in the derivation against 0.17 s (docs/benchmarks.md, 2026-11-30). A
//! backup run every hour meets the second case. The function and its result do not depend on
//! where its memory lies.

use argon2::Block;
use memmap2::MmapMut;

/// Zeroed memory for a number of Argon2 blocks, mapped in.
pub(super) struct KdfMemory {
    map: MmapMut,
    blocks: usize,
}

impl KdfMemory {
    /// Memory for `blocks` blocks; `None` if it cannot be mapped (the caller then lets
    /// `argon2` allocate it).
    pub(super) fn new(blocks: usize) -> Option<Self> {
        let len = blocks.checked_mul(Block::SIZE)?;
        let map = MmapMut::map_anon(len).ok()?;
        #[cfg(target_os = "linux")]
        {
            use crate::buffers::populate;
            // The mapping was just made and nothing else uses it.
            let (start, half) = (map.as_ptr() as usize, len / 2 / 4096 * 4096);
            rayon::join(
                || populate(start, half),
                || populate(start + half, len - half),
            );
        }
        Some(KdfMemory { map, blocks })
    }

    /// The blocks.
    pub(super) fn blocks(&mut self) -> &mut [Block] {
        let bytes = &mut self.map[..self.blocks * Block::SIZE];
        // SAFETY: `bytes` is the mapping, which `self` owns and this borrow holds exclusively;
        // it starts on a page boundary (so at Block's 64-byte alignment) and holds exactly
        // `blocks` blocks of `Block::SIZE` bytes. A block is an array of u64, for which every
        // bit pattern (here zeros, from the anonymous mapping) is valid.
        unsafe { std::slice::from_raw_parts_mut(bytes.as_mut_ptr().cast::<Block>(), self.blocks) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_are_zeroed_aligned_and_as_many_as_asked() {
        let mut m = KdfMemory::new(3000).unwrap();
        let blocks = m.blocks();
        assert_eq!(blocks.len(), 3000);
        assert_eq!(blocks.as_ptr() as usize % 4096, 0);
        assert!(blocks.iter().all(|b| b.as_ref().iter().all(|&w| w == 0)));
        blocks[2999].as_mut()[127] = 7;
        assert_eq!(m.blocks()[2999].as_ref()[127], 7);
    }
}
