//! `backup --stdin-from-command`: the standard output of a command as the stream to back up,
//! as restic's flag of the same name.
//!
//! Why not a pipe (`pg_dump db | dedelta backup --stdin`): the shell hides the dump's exit
//! status from the backup, so a dump that fails halfway is saved as a snapshot, truncated,
//! and looks like a good one. Here the command's exit status is read at the end of its
//! output: anything but success is a read error, which fails the backup (no snapshot; what was
//! stored is garbage for the next prune).

use anyhow::{Context, Result};
use std::ffi::OsString;
use std::io::Read;
use std::process::{Child, ChildStdout, Command, Stdio};

/// A running command's standard output; at its end, the command's exit status.
pub struct CommandOutput {
    child: Child,
    /// `None` once the output ended (then the command was waited for).
    stdout: Option<ChildStdout>,
    /// The command line, for messages.
    shown: String,
    /// Whether the command was waited for.
    waited: bool,
}

impl CommandOutput {
    /// Starts `argv` (the program, then its arguments; no shell) with its standard output
    /// piped here, its standard input empty and its standard error the terminal's.
    pub fn spawn(argv: &[OsString]) -> Result<Self> {
        let (program, args) = argv
            .split_first()
            .context("--stdin-from-command needs the command to run, e.g. `-- pg_dump mydb`")?;
        let shown = argv
            .iter()
            .map(|a| a.to_string_lossy())
            .collect::<Vec<_>>()
            .join(" ");
        let mut child = Command::new(program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .with_context(|| format!("starting `{shown}`"))?;
        let stdout = child.stdout.take();
        Ok(CommandOutput {
            child,
            stdout,
            shown,
            waited: false,
        })
    }
}

impl Read for CommandOutput {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let Some(out) = self.stdout.as_mut() else {
            return Ok(0);
        };
        let n = out.read(buf)?;
        if n > 0 || buf.is_empty() {
            return Ok(n);
        }
        // The end of its output: the command's verdict decides whether the stream is whole.
        self.stdout = None;
        let status = self.child.wait()?;
        self.waited = true;
        if status.success() {
            Ok(0)
        } else {
            Err(std::io::Error::other(format!(
                "the command `{}` failed ({status}); no snapshot is saved",
                self.shown
            )))
        }
    }
}

impl Drop for CommandOutput {
    /// A backup that fails before the output's end stops the command rather than leave it
    /// blocked on a pipe nobody reads.
    fn drop(&mut self) {
        if !self.waited {
            self.stdout = None;
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(argv: &[&str]) -> (Vec<u8>, std::io::Result<usize>) {
        let argv: Vec<OsString> = argv.iter().map(OsString::from).collect();
        let mut out = CommandOutput::spawn(&argv).unwrap();
        let mut got = Vec::new();
        let r = out.read_to_end(&mut got);
        (got, r)
    }

    #[test]
    fn a_command_that_succeeds_gives_its_whole_output() {
        let (got, r) = run(&["sh", "-c", "printf 'a%.0s' $(seq 100000)"]);
        assert_eq!(r.unwrap(), 100_000);
        assert_eq!(got, vec![b'a'; 100_000]);
    }

    #[test]
    fn a_command_that_fails_ends_its_output_with_an_error() {
        let (got, r) = run(&["sh", "-c", "echo partial; exit 3"]);
        assert_eq!(got, b"partial\n");
        let e = r.unwrap_err().to_string();
        assert!(e.contains("exit status: 3"), "{e}");
        assert!(e.contains("no snapshot is saved"), "{e}");
    }

    #[test]
    fn a_command_that_cannot_start_is_an_error() {
        let argv = [OsString::from("/nonexistent/dedelta-test-command")];
        let e = CommandOutput::spawn(&argv).err().unwrap();
        assert!(format!("{e:#}").contains("starting"), "{e:#}");
        assert!(CommandOutput::spawn(&[]).is_err());
    }
}
