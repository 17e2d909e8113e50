//! Progress of long commands: a bar with ETA on a terminal (indicatif), restic-style JSON
//! `status`, `verbose_status` and `error` lines with `--json`, or nothing.
//!
//! Sizes on the bar are binary (KiB, MiB) throughout the line, rate included, so that one
//! line never mixes unit systems.

use dedelta_store::progress::Progress;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde_json::json;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The bar: elapsed time, bytes done of the total, rate and ETA, all sizes binary.
const BAR_TEMPLATE: &str = "{elapsed_precise} [{bar:30}] {binary_bytes}/{binary_total_bytes} \
     {binary_bytes_per_sec} ETA {eta} {wide_msg}";

/// How progress is shown.
enum Mode {
    /// A bar on stderr (a terminal), or hidden.
    Bar,
    /// JSON lines (restic's messages): `status` on stdout at most `interval` apart,
    /// `verbose_status` per entry when verbose, `error` on stderr.
    Json(JsonStatus),
}

/// The state of the JSON status lines.
struct JsonStatus {
    /// What restic calls the phase in `error` messages (`archival`, `restore`, `check`).
    during: &'static str,
    started: Instant,
    interval: Duration,
    last: Mutex<Option<Instant>>,
    total: AtomicU64,
    done: AtomicU64,
    /// Files done (each entry reported through `item`).
    files_done: AtomicU64,
    /// `error` messages printed.
    errors: AtomicU64,
}

/// Progress of one command.
pub struct Bar {
    bar: ProgressBar,
    mode: Mode,
    /// Print each entry as it is done (`-v`).
    verbose: bool,
}

impl Bar {
    /// A visible bar (with ETA) if `visible`, else a hidden one; `verbose` prints each entry.
    pub fn new(visible: bool) -> Self {
        let bar = ProgressBar::with_draw_target(
            Some(0),
            if visible {
                ProgressDrawTarget::stderr()
            } else {
                ProgressDrawTarget::hidden()
            },
        );
        if let Ok(style) = ProgressStyle::with_template(BAR_TEMPLATE) {
            bar.set_style(style.progress_chars("=> "));
        }
        Bar {
            bar,
            mode: Mode::Bar,
            verbose: crate::cmd::global::verbosity() > 0,
        }
    }

    /// restic-style JSON lines for the phase `during` (`archival`, `restore`, `check`): a
    /// `status` line every 1/`DEDELTA_PROGRESS_FPS` seconds (default 1, as restic's
    /// `RESTIC_PROGRESS_FPS`) while work goes on, the first after one interval (a command
    /// done sooner prints only its summary).
    pub fn json(during: &'static str) -> Self {
        let fps: f64 = std::env::var("DEDELTA_PROGRESS_FPS")
            .ok()
            .and_then(|v| v.parse().ok())
            .filter(|f: &f64| *f > 0.0 && f.is_finite())
            .unwrap_or(1.0);
        let started = Instant::now();
        Bar {
            bar: ProgressBar::hidden(),
            mode: Mode::Json(JsonStatus {
                during,
                started,
                interval: Duration::from_secs_f64(1.0 / fps),
                last: Mutex::new(Some(started)),
                total: AtomicU64::new(0),
                done: AtomicU64::new(0),
                files_done: AtomicU64::new(0),
                errors: AtomicU64::new(0),
            }),
            verbose: crate::cmd::global::verbosity() > 0,
        }
    }

    /// Removes the bar.
    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

/// Writes one JSON line to standard output (a closed pipe ends nothing here: the command's
/// own output reports it).
fn stdout_line(v: &serde_json::Value) {
    text_line(&v.to_string());
}

/// Writes one line of text to standard output (errors ignored, as for [`stdout_line`]).
fn text_line(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stdout().lock(), "{line}");
}

impl JsonStatus {
    /// A `status` line, if the interval has passed since the last one (or the start).
    fn maybe_status(&self) {
        let now = Instant::now();
        {
            let Ok(mut last) = self.last.lock() else {
                return;
            };
            if last.is_some_and(|t| now.duration_since(t) < self.interval) {
                return;
            }
            *last = Some(now);
        }
        let total = self.total.load(Ordering::Relaxed);
        let done = self.done.load(Ordering::Relaxed);
        let elapsed = now.duration_since(self.started).as_secs_f64();
        let fraction = if total > 0 {
            (done as f64 / total as f64).min(1.0)
        } else {
            0.0
        };
        let remaining = (fraction > 0.0).then(|| elapsed * (1.0 - fraction) / fraction);
        stdout_line(&json!({
            "message_type": "status",
            "percent_done": fraction,
            "total_bytes": total,
            "bytes_done": done,
            "files_done": self.files_done.load(Ordering::Relaxed),
            "error_count": self.errors.load(Ordering::Relaxed),
            "seconds_elapsed": elapsed.round() as u64,
            "seconds_remaining": remaining.map(|r| r.round() as u64),
        }));
    }
}

/// An `error` message (restic's shape) on standard error.
pub fn json_error(during: &str, item: Option<&str>, message: &str) {
    eprintln!(
        "{}",
        json!({
            "message_type": "error",
            "error": {"message": message},
            "during": during,
            "item": item,
        })
    );
}

impl Progress for Bar {
    fn set_total(&self, bytes: u64) {
        self.bar.set_length(bytes);
        if let Mode::Json(s) = &self.mode {
            s.total.store(bytes, Ordering::Relaxed);
        }
    }
    fn inc(&self, bytes: u64) {
        self.bar.inc(bytes);
        if let Mode::Json(s) = &self.mode {
            s.done.fetch_add(bytes, Ordering::Relaxed);
            s.maybe_status();
        }
    }
    fn message(&self, msg: &str) {
        self.bar.set_message(msg.to_string());
    }
    fn warn(&self, msg: &str) {
        match &self.mode {
            // The path the message starts with, if it names one.
            Mode::Json(s) => {
                s.errors.fetch_add(1, Ordering::Relaxed);
                json_error(
                    s.during,
                    msg.split_once(": ")
                        .map(|(p, _)| p)
                        .filter(|p| p.starts_with('/')),
                    msg,
                )
            }
            // Without a bar the command prints its warnings with its result.
            Mode::Bar => self.bar.println(format!("warning: {msg}")),
        }
    }
    fn item(&self, action: &str, path: &str, bytes: u64) {
        if let Mode::Json(s) = &self.mode {
            s.files_done.fetch_add(1, Ordering::Relaxed);
        }
        if !self.verbose {
            return;
        }
        match &self.mode {
            Mode::Json(_) => stdout_line(&json!({
                "message_type": "verbose_status",
                "action": action,
                "item": path,
                "data_size": bytes,
            })),
            Mode::Bar => {
                let line = format!("{action:<10} {path}");
                if self.bar.is_hidden() {
                    text_line(&line);
                } else {
                    self.bar.println(line);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A bad template would silently fall back to indicatif's default bar (no ETA).
    #[test]
    fn the_bar_template_parses_and_shows_eta_in_one_unit_system() {
        assert!(ProgressStyle::with_template(BAR_TEMPLATE).is_ok());
        assert!(BAR_TEMPLATE.contains("{eta}"));
        // Every size on the line is named binary explicitly (KiB, MiB, MiB/s).
        for key in ["{bytes}", "{total_bytes}", "{bytes_per_sec}", "{decimal_"] {
            assert!(!BAR_TEMPLATE.contains(key), "{key}");
        }
    }

    #[test]
    fn json_status_reports_fraction_and_remaining_time() {
        let bar = Bar::json("check");
        bar.set_total(100);
        bar.inc(25);
        let Mode::Json(s) = &bar.mode else {
            panic!("not JSON")
        };
        assert_eq!(s.done.load(Ordering::Relaxed), 25);
        assert_eq!(s.total.load(Ordering::Relaxed), 100);
    }
}
