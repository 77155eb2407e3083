//! The operator's tools: `hash`, `keys` and `decode`, thin over [`crate::plumbing`].

use std::io::{BufRead, BufReader, Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use crate::plumbing::{decode_line, object_keys, page_hashes_hex};
use clap::Args;
use hicache_index::{Namespace, PageHash};
use hicache_index_options::LayoutArgs;
use serde::Serialize;
use serde_json::Value;

use crate::outcome::{Failure, Outcome};

/// `hash --page-size N [--eagle] [--extra-key K] [--cache-salt S] TOKEN...`
#[derive(Args, Debug)]
pub(crate) struct HashArgs {
    /// Tokens per page (SGLang's --page-size).
    #[arg(long, value_name = "N")]
    page_size: u32,
    /// EAGLE speculative decoding: pages of token bigrams.
    #[arg(long)]
    eagle: bool,
    /// The request's extra_key (namespaced requests; an empty one is none, as in SGLang).
    #[arg(long, value_name = "K")]
    extra_key: Option<String>,
    /// The request's cache_salt (namespaced requests; an empty one is none, as in SGLang).
    #[arg(long, value_name = "S")]
    cache_salt: Option<String>,
    /// Token ids (up to 2^64-1), as separate arguments or separated by commas.
    #[arg(value_name = "TOKEN", required = true, num_args = 1..)]
    tokens: Vec<String>,
}

/// Prints the page hashes of the tokens, one lowercase hex digest per line.
pub(crate) fn hash(args: HashArgs) -> Outcome {
    if args.page_size == 0 {
        return Err(Failure::Usage("--page-size must be at least 1".into()));
    }
    let mut tokens = Vec::new();
    for word in args.tokens.iter().flat_map(|a| a.split(',')) {
        let word = word.trim();
        if word.is_empty() {
            continue;
        }
        let token = word
            .parse::<u64>()
            .map_err(|_| Failure::Usage(format!("{word:?} is not a token id (0 to 2^64-1)")))?;
        tokens.push(token);
    }
    let namespace = Namespace::new(args.extra_key.as_deref(), args.cache_salt.as_deref());
    let hashes = page_hashes_hex(&tokens, args.page_size, args.eagle, namespace);
    if hashes.is_empty() {
        eprintln!(
            "hicache-index: no full page in {} tokens at page size {}",
            tokens.len(),
            args.page_size
        );
    }
    print_lines(hashes)
}

/// `keys --page-hash H LAYOUT`
#[derive(Args, Debug)]
pub(crate) struct KeysArgs {
    /// The page hash: 64 lowercase hex characters.
    #[arg(long, value_name = "H")]
    page_hash: String,
    #[command(flatten)]
    layout: LayoutArgs,
}

/// Prints the object keys of the page, one per line.
pub(crate) fn keys(args: KeysArgs) -> Outcome {
    let hash: PageHash = args.page_hash.parse().map_err(|_| {
        Failure::Usage("--page-hash must be 64 lowercase hex characters".to_owned())
    })?;
    let layout = args.layout.to_layout().map_err(Failure::Usage)?;
    print_lines(object_keys(&layout, &hash))
}

/// `decode [FILE]`
#[derive(Args, Debug)]
pub(crate) struct DecodeArgs {
    /// JSON lines `{"frames_hex": [topic, seq, payload]}`; stdin when absent or `-`.
    #[arg(value_name = "FILE")]
    file: Option<PathBuf>,
}

/// Prints one JSON line per message: the decoded batch, or `{"error": "..."}`.
pub(crate) fn decode(args: DecodeArgs) -> Outcome {
    let input: Box<dyn Read> = match &args.file {
        Some(path) if path.as_os_str() != "-" => Box::new(
            std::fs::File::open(path)
                .map_err(|e| format!("cannot read {}: {e}", path.display()))?,
        ),
        _ => Box::new(std::io::stdin()),
    };
    let mut input = BufReader::new(input);
    let mut out = std::io::stdout().lock();
    let mut line = Vec::new();
    loop {
        line.clear();
        let n = input
            .read_until(b'\n', &mut line)
            .map_err(|e| format!("cannot read the input: {e}"))?;
        if n == 0 {
            break;
        }
        let decoded = match std::str::from_utf8(&line) {
            Ok(text) if text.trim().is_empty() => continue,
            Ok(text) => in_order(&decode_line(text)),
            Err(_) => serde_json::json!({ "error": "the line is not UTF-8" }).to_string(),
        };
        if writeln!(out, "{decoded}").is_err() {
            // The reader went away (a closed pipe): nothing more to do.
            return Ok(ExitCode::SUCCESS);
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Writes a decoded message with its fields in the documented order: `seq`, `timestamp_ms`,
/// `events` (each `event_type`, `object_key`, `tenant_id`, `group_id`, `medium`, `event_id`).
fn in_order(decoded: &Value) -> String {
    #[derive(Serialize)]
    struct Event<'a> {
        event_type: &'a Value,
        object_key: &'a Value,
        tenant_id: &'a Value,
        group_id: &'a Value,
        medium: &'a Value,
        event_id: &'a Value,
    }
    #[derive(Serialize)]
    struct Message<'a> {
        seq: &'a Value,
        timestamp_ms: &'a Value,
        events: Vec<Event<'a>>,
    }
    let Some(events) = decoded.get("events").and_then(Value::as_array) else {
        return decoded.to_string();
    };
    let message = Message {
        seq: &decoded["seq"],
        timestamp_ms: &decoded["timestamp_ms"],
        events: events
            .iter()
            .map(|e| Event {
                event_type: &e["event_type"],
                object_key: &e["object_key"],
                tenant_id: &e["tenant_id"],
                group_id: &e["group_id"],
                medium: &e["medium"],
                event_id: &e["event_id"],
            })
            .collect(),
    };
    serde_json::to_string(&message).unwrap_or_else(|_| decoded.to_string())
}

/// Prints each item on its own line; a closed pipe ends quietly.
fn print_lines(lines: impl IntoIterator<Item = String>) -> Outcome {
    let mut out = std::io::stdout().lock();
    for line in lines {
        if writeln!(out, "{line}").is_err() {
            break;
        }
    }
    Ok(ExitCode::SUCCESS)
}
