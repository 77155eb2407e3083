//! What a subcommand returns ([`Outcome`]: its exit code, or why it failed) and how it prints
//! its lines.

use std::process::ExitCode;

/// Why a subcommand failed, in one line: a usage error (exit 2: the command line, a variable
/// or a configuration file is wrong) or a failure (exit 1).
#[derive(Debug)]
pub(crate) enum Failure {
    /// The invocation is wrong: exit 2.
    Usage(String),
    /// Something failed: exit 1.
    Failed(String),
}

impl From<String> for Failure {
    fn from(message: String) -> Failure {
        Failure::Failed(message)
    }
}

impl From<&str> for Failure {
    fn from(message: &str) -> Failure {
        Failure::Failed(message.to_owned())
    }
}

/// What a subcommand returns: its exit code, or why it failed.
pub(crate) type Outcome = Result<ExitCode, Failure>;

/// Prints a line on stdout; returns false when stdout is closed (a reader that went away).
pub(crate) fn say(line: &str) -> bool {
    use std::io::Write;
    writeln!(std::io::stdout().lock(), "{line}").is_ok()
}
