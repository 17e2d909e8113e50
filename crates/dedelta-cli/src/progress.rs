//! The terminal progress bar (indicatif), shown only when stderr is a terminal.

use dedelta_store::progress::Progress;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// A byte progress bar, hidden when not attached to a terminal.
pub struct Bar {
    bar: ProgressBar,
}

impl Bar {
    /// A visible bar if `visible`, else a hidden one.
    pub fn new(visible: bool) -> Self {
        let bar = ProgressBar::with_draw_target(
            Some(0),
            if visible {
                ProgressDrawTarget::stderr()
            } else {
                ProgressDrawTarget::hidden()
            },
        );
        if let Ok(style) = ProgressStyle::with_template(
            "{elapsed_precise} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} {wide_msg}",
        ) {
            bar.set_style(style.progress_chars("=> "));
        }
        Bar { bar }
    }

    /// Removes the bar.
    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

impl Progress for Bar {
    fn set_total(&self, bytes: u64) {
        self.bar.set_length(bytes);
    }
    fn inc(&self, bytes: u64) {
        self.bar.inc(bytes);
    }
    fn message(&self, msg: &str) {
        self.bar.set_message(msg.to_string());
    }
    fn warn(&self, msg: &str) {
        self.bar.println(format!("warning: {msg}"));
    }
}
