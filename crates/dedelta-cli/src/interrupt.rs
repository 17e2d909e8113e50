//! Ctrl-C, SIGTERM and SIGHUP: the command stops writing, its repository locks are removed,
//! and the process exits with 128 + the signal's number (130 for Ctrl-C), as restic does.
//! What it wrote before is what a crash leaves (unreferenced containers, for the next
//! `prune`; a restore's files are unnamed until complete), but no lock for other hosts to
//! wait out. A second signal ends the process at once.
//!
//! `mount` handles these signals itself (they unmount), so it does not install this.

use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Set by the first signal.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// Whether a signal arrived: the command's own error (a write refused because the lock was
/// given up) is then not worth printing; the handler's thread exits the process.
pub fn happened() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}

/// Starts the thread that waits for the signals. Without it (if the handlers cannot be
/// installed) a signal kills the process as before.
pub fn install() {
    const SIGNALS: [i32; 3] = [SIGINT, SIGTERM, SIGHUP];
    let second = Arc::new(AtomicBool::new(false));
    for sig in SIGNALS {
        // The second signal exits at once; the first only sets the flag that arms it.
        let _ = signal_hook::flag::register_conditional_shutdown(sig, 128 + sig, second.clone());
        let _ = signal_hook::flag::register(sig, second.clone());
    }
    let Ok(mut signals) = signal_hook::iterator::Signals::new(SIGNALS) else {
        return;
    };
    let _ = std::thread::Builder::new()
        .name("dedelta-signals".into())
        .spawn(move || {
            if let Some(sig) = signals.forever().next() {
                INTERRUPTED.store(true, Ordering::SeqCst);
                eprintln!("\ninterrupted: stopping (a second signal ends the process at once)");
                let removed = dedelta_store::repository::lock::interrupt::interrupt();
                if removed > 0 {
                    eprintln!("removed the repository lock this process held");
                }
                std::process::exit(128 + sig);
            }
        });
}
