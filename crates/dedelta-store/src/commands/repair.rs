//! `repair index`: rebuild the chunk index from container metadata (see
//! [`crate::repository::index_rebuild`]).

pub use crate::repository::index_rebuild::{rebuild_index, RepairStats};
