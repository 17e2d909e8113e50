//! Errors of the evaluation harness.

use std::path::PathBuf;

/// What can go wrong in an evaluation.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EvalError {
    /// A file or directory could not be read or written.
    #[error("{context}: {source}")]
    Io {
        /// What was being done, with the path.
        context: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The dataset could not be found or has too few versions.
    #[error("dataset {0}")]
    Dataset(String),
    /// An option is invalid (unknown configuration name, bad number).
    #[error("invalid option: {0}")]
    InvalidOption(String),
    /// The repository library failed.
    #[error("{context}: {source}")]
    Store {
        /// What was being done (configuration and version).
        context: String,
        /// The cause (boxed: the store's error is large and this enum travels in every Result).
        #[source]
        source: Box<dedelta_store::Error>,
    },
    /// A restored version differs from its original.
    #[error("restore of {version} in configuration {config} does not match {path}")]
    Mismatch {
        /// Configuration name.
        config: String,
        /// Version name.
        version: String,
        /// The original file.
        path: PathBuf,
    },
    /// An external tool (peer, sqlite3, redis-server) failed.
    #[error("{tool} failed: {reason}")]
    Tool {
        /// The program.
        tool: String,
        /// Exit status and the end of its stderr.
        reason: String,
    },
    /// Drawing a plot failed.
    #[error("plot {name}: {reason}")]
    Plot {
        /// The plot file.
        name: String,
        /// The cause.
        reason: String,
    },
}

/// Result with [`EvalError`].
pub type Result<T, E = EvalError> = std::result::Result<T, E>;

/// Adds a context to I/O errors.
pub(crate) trait IoContext<T> {
    /// Wraps the error with `f()` as context.
    fn ctx(self, f: impl FnOnce() -> String) -> Result<T>;
}

impl<T> IoContext<T> for std::io::Result<T> {
    fn ctx(self, f: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|source| EvalError::Io {
            context: f(),
            source,
        })
    }
}

/// Adds a context to store errors.
pub(crate) trait StoreContext<T> {
    /// Wraps the error with `f()` as context.
    fn store_ctx(self, f: impl FnOnce() -> String) -> Result<T>;
}

impl<T> StoreContext<T> for dedelta_store::Result<T> {
    fn store_ctx(self, f: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|source| EvalError::Store {
            context: f(),
            source: Box::new(source),
        })
    }
}
