//! Errors of the evaluation harness.

use std::path::PathBuf;

/// What can go wrong in an evaluation.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EvalError {
    /// A file or directory could not be read or written. The cause is part of the message
    /// and not also exposed as `source()`, so that a printed error chain (`{:#}`) does not
    /// repeat it ("No space left on device (os error 28): No space left on device (os error
    /// 28)"), as the store's errors do.
    #[error("{context}: {cause}")]
    Io {
        /// What was being done, with the path.
        context: String,
        /// The cause.
        cause: std::io::Error,
    },
    /// The dataset could not be found or has too few versions.
    #[error("dataset {0}")]
    Dataset(String),
    /// An option is invalid (unknown configuration name, bad number).
    #[error("invalid option: {0}")]
    InvalidOption(String),
    /// The repository library failed (the cause in the message only, as for `Io`).
    #[error("{context}: {cause}")]
    Store {
        /// What was being done (configuration and version).
        context: String,
        /// The cause (boxed: the store's error is large and this enum travels in every Result).
        cause: Box<dedelta_store::Error>,
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
        self.map_err(|cause| EvalError::Io {
            context: f(),
            cause,
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
        self.map_err(|cause| EvalError::Store {
            context: f(),
            cause: Box::new(cause),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An error chain printed whole states its cause once.
    #[test]
    fn the_cause_is_stated_once() {
        let full = std::io::Error::from_raw_os_error(28);
        let e: Result<()> = Err(full).ctx(|| "writing report.md".into());
        let e = e.unwrap_err();
        assert!(std::error::Error::source(&e).is_none());
        let shown = e.to_string();
        assert_eq!(shown.matches("os error 28").count(), 1, "{shown}");
        let store: Result<()> = Err(dedelta_store::Error::io(
            "writing a container",
            std::io::Error::from_raw_os_error(28),
        ))
        .store_ctx(|| "backup of v1".into());
        let shown = store.unwrap_err().to_string();
        assert_eq!(shown.matches("os error 28").count(), 1, "{shown}");
    }
}
