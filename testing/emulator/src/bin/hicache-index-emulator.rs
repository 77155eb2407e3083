//! `hicache-index-emulator`: an emulated Mooncake master on loopback, steered over stdin, for
//! tests written in other languages (the Python package's).
//!
//! It prints one JSON line, `{"events": "tcp://127.0.0.1:P", "http": "http://127.0.0.1:Q"}`, then
//! reads one JSON command a line and answers each with one JSON line:
//! `{"op": "store" | "remove" | "store_unpublished" | "remove_silently", "keys": [...]}`,
//! `{"op": "skip_sequences", "n": N}`, `{"op": "restart"}`, `{"op": "keys"}`, `{"op": "status"}`,
//! `{"op": "set_events_enabled", "enabled": BOOL}`. A published batch answers
//! `{"run": R, "seq": S}` (`{"seq": null}` when nothing was sent); an error answers
//! `{"error": "..."}`. It exits when stdin ends.

use std::io::{BufRead, Write};

use hicache_index_emulator::{Emulator, EmulatorConfig, Position};
use serde_json::{json, Value};

fn main() {
    let emulator = match Emulator::start(EmulatorConfig::default()) {
        Ok(emulator) => emulator,
        Err(e) => {
            eprintln!("hicache-index-emulator: error: cannot start: {e}");
            std::process::exit(1);
        }
    };
    let mut out = std::io::stdout().lock();
    let hello = json!({ "events": emulator.event_endpoint(), "http": emulator.http_base() });
    if writeln!(out, "{hello}").and_then(|()| out.flush()).is_err() {
        return;
    }
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { return };
        if line.trim().is_empty() {
            continue;
        }
        let answer = match serde_json::from_str::<Value>(&line) {
            Ok(command) => run(&emulator, &command).unwrap_or_else(|e| json!({ "error": e })),
            Err(e) => json!({ "error": format!("not JSON: {e}") }),
        };
        if writeln!(out, "{answer}")
            .and_then(|()| out.flush())
            .is_err()
        {
            return;
        }
    }
}

/// Runs one command and returns its answer.
fn run(emulator: &Emulator, command: &Value) -> Result<Value, String> {
    let keys = || -> Result<Vec<String>, String> {
        command["keys"]
            .as_array()
            .ok_or("\"keys\" must be a list of strings")?
            .iter()
            .map(|k| {
                k.as_str()
                    .map(str::to_owned)
                    .ok_or("a key is not a string".into())
            })
            .collect()
    };
    let published = |p: Option<Position>| match p {
        Some(p) => json!({ "run": p.run, "seq": p.seq.0 }),
        None => json!({ "seq": null }),
    };
    let done = json!({ "ok": true });
    Ok(match command["op"].as_str().unwrap_or_default() {
        "store" => published(emulator.store(keys()?)),
        "remove" => published(emulator.remove(keys()?)),
        "store_unpublished" => {
            emulator.store_unpublished(keys()?);
            done
        }
        "remove_silently" => {
            emulator.remove_silently(keys()?);
            done
        }
        "skip_sequences" => {
            emulator.skip_sequences(command["n"].as_u64().ok_or("\"n\" must be a number")?);
            done
        }
        "restart" => {
            emulator.restart().map_err(|e| format!("restart: {e}"))?;
            done
        }
        "keys" => json!({ "keys": emulator.keys() }),
        "status" => serde_json::to_value(emulator.status()).map_err(|e| e.to_string())?,
        "set_events_enabled" => {
            let enabled = command["enabled"]
                .as_bool()
                .ok_or("\"enabled\" must be true or false")?;
            emulator.set_events_enabled(enabled);
            done
        }
        other => return Err(format!("unknown op {other:?}")),
    })
}
