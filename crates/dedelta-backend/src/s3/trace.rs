//! A request trace for finding out where an object store's time goes: with
//! `DEDELTA_S3_TRACE=FILE` set, every request the S3 backend makes appends a line to FILE:
//!
//! `START_MS END_MS OP KIND BYTES THREAD NAME`
//!
//! (milliseconds since the backend was built; OP `get`, `range`, `tail`, `put`, `list`,
//! `head`, `delete`; BYTES moved). Which requests overlap, and what waited on what, reads off
//! the start and end times (issue 19: restore's read-ahead, a backup's fixed requests).
//! With `DEDELTA_S3_TRACE_STACKS=1` too, each line is followed by the dedelta frames of the
//! request's call stack, indented (which code waited on it). Unset, the trace costs one
//! branch per request.

use std::fs::File;
use std::io::Write;
use std::sync::Mutex;
use std::time::Instant;

/// Where the trace goes, and the time it counts from.
pub(super) struct Trace {
    file: Mutex<File>,
    epoch: Instant,
    /// `DEDELTA_S3_TRACE_STACKS=1`: each request's call stack follows its line.
    stacks: bool,
}

/// One request under way; [`Trace::end`] writes its line.
pub(super) struct Started(Instant);

impl Trace {
    /// The trace `DEDELTA_S3_TRACE` names, if set (and the file can be opened).
    pub(super) fn from_env() -> Option<Trace> {
        let path = std::env::var_os("DEDELTA_S3_TRACE").filter(|p| !p.is_empty())?;
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .ok()?;
        Some(Trace {
            file: Mutex::new(file),
            epoch: Instant::now(),
            stacks: std::env::var_os("DEDELTA_S3_TRACE_STACKS").is_some_and(|v| v == "1"),
        })
    }

    pub(super) fn start() -> Started {
        Started(Instant::now())
    }

    pub(super) fn end(&self, started: Started, op: &str, kind: &str, name: &str, bytes: usize) {
        // Fields never empty, so that the line splits on spaces (the config's kind has no
        // directory, a listing no name).
        let or_dash = |s: &str| {
            if s.is_empty() {
                "-".to_string()
            } else {
                s.to_string()
            }
        };
        let (kind, name) = (or_dash(kind), or_dash(name));
        let ms = |t: Instant| t.duration_since(self.epoch).as_secs_f64() * 1e3;
        let thread = std::thread::current();
        let mut line = format!(
            "{:.2} {:.2} {op} {kind} {bytes} {} {name}\n",
            ms(started.0),
            ms(Instant::now()),
            thread.name().unwrap_or("?"),
        );
        if self.stacks {
            let stack = std::backtrace::Backtrace::force_capture().to_string();
            let frames = stack
                .lines()
                .map(str::trim)
                .filter(|l| l.contains("dedelta_") && !l.starts_with("at "))
                .filter(|l| !l.contains("dedelta_backend::"))
                .take(12);
            for f in frames {
                line.push_str("    ");
                line.push_str(f);
                line.push('\n');
            }
        }
        if let Ok(mut f) = self.file.lock() {
            let _ = f.write_all(line.as_bytes());
        }
    }
}
