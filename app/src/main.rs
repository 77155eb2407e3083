//! `hicache-index`: the sidecar service, an embedded demo, and the operator's tools.
//!
//! - `demo`: an emulated Mooncake master, a synthetic router workload and injected faults, with
//!   a report at the end (needs nothing external).
//! - `serve`: the sidecar routers ask over HTTP (`POST /v1/query`) or nng.
//! - `watch`: prints each batch of a master's event stream.
//! - `hash`, `keys`, `decode`: page hashes of tokens, object keys of a page, captured messages
//!   as JSON.
//!
//! Errors are one line on stderr and a non-zero exit: 1 for a failure, 2 for a usage error.
//! Every log line goes to stderr; stdout carries only what a command prints as its output.

mod demo;
mod latency;
mod layout_report;
mod outcome;
mod plumbing;
mod serve;
mod tools;
mod watch;

use std::process::ExitCode;

use clap::error::ErrorKind;
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

use crate::outcome::Failure;

/// An index of the SGLang HiCache pages present in a Mooncake store, fed by the Mooncake
/// master's KV events, for routers.
#[derive(Parser, Debug)]
#[command(name = "hicache-index")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
#[allow(clippy::large_enum_variant, reason = "parsed once at start")]
enum Command {
    /// Run an emulated Mooncake master, a router workload and injected faults; print a report.
    Demo(demo::DemoArgs),
    /// Serve queries over HTTP (and nng) from the index of a master's event stream.
    Serve(serve::ServeArgs),
    /// Print each batch of a master's event stream (sequence, events, gaps, restarts).
    Watch(watch::WatchArgs),
    /// Print the page hashes of tokens, one lowercase hex digest per line.
    Hash(tools::HashArgs),
    /// Print the object keys of a page, one per line.
    Keys(tools::KeysArgs),
    /// Decode captured messages (JSON lines with "frames_hex") into JSON lines.
    Decode(tools::DecodeArgs),
}

/// The version line: the version and the optional features built in.
fn version() -> &'static str {
    let features = serve::features();
    let features = if features.is_empty() {
        "none".to_owned()
    } else {
        features
    };
    Box::leak(format!("{} (features: {features})", env!("CARGO_PKG_VERSION")).into_boxed_str())
}

fn main() -> ExitCode {
    let argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let command = match serve::configure(Cli::command().version(version()), &argv) {
        Ok(command) => command,
        Err(message) => {
            eprintln!("hicache-index: error: {message}");
            return ExitCode::from(2);
        }
    };
    let matches = match command.try_get_matches_from(&argv) {
        Ok(matches) => matches,
        Err(e) => return usage_error(&e),
    };
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(e) => return usage_error(&e),
    };
    let outcome = match cli.command {
        Command::Demo(args) => {
            init_logging("error");
            demo::run(args)
        }
        Command::Serve(args) => {
            let serve_matches = matches
                .subcommand_matches("serve")
                .expect("the serve subcommand was parsed");
            serve::run(args, serve_matches)
        }
        Command::Watch(args) => {
            // The driver's warnings are about what watch prints itself (gaps, restarts, clears,
            // sockets that cannot be opened).
            init_logging("warn,hicache_index_driver=error");
            watch::run(args)
        }
        Command::Hash(args) => tools::hash(args),
        Command::Keys(args) => tools::keys(args),
        Command::Decode(args) => tools::decode(args),
    };
    match outcome {
        Ok(code) => code,
        Err(Failure::Usage(message)) => {
            eprintln!("hicache-index: error: {message}");
            ExitCode::from(2)
        }
        Err(Failure::Failed(message)) => {
            eprintln!("hicache-index: error: {message}");
            ExitCode::FAILURE
        }
    }
}

/// Prints help or the version as clap does, and any other parse error as one line.
fn usage_error(e: &clap::Error) -> ExitCode {
    match e.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
            let _ = e.print();
            ExitCode::SUCCESS
        }
        ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            let _ = e.print();
            ExitCode::from(2)
        }
        _ => {
            let line = hicache_index_options::clap_message(e);
            eprintln!("hicache-index: error: {line} (see --help)");
            ExitCode::from(2)
        }
    }
}

/// Logs to stderr at `default` level, or as `RUST_LOG` says (e.g. `RUST_LOG=debug`).
fn init_logging(default: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .try_init();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_line_is_consistent() {
        let argv = ["hicache-index".into(), "serve".into()];
        serve::configure(Cli::command().version(version()), &argv)
            .expect("no configuration file")
            .debug_assert();
    }
}
