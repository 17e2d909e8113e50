//! Wrappers: backends around a backend, each adding one concern and implementing the same
//! [`crate::Backend`] trait, so they stack.
//!
//! - [`fault::FaultBackend`]: crashes, disk-full, short and flipped reads, for tests.
//! - [`metered::MeteredBackend`]: counts requests and bytes per object kind and per purpose.
//! - [`retry::RetryBackend`]: retries transient failures with backoff and jitter.

pub mod fault;
pub mod metered;
pub mod retry;
