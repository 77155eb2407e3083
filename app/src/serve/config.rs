//! Where `serve`'s settings come from: its flags, `HICACHE_INDEX_<FLAG>` environment variables
//! and a TOML file (`--config FILE`), in that order of precedence, then the defaults.
//!
//! Every flag of `serve` gets its environment variable (`--master-http` reads
//! `HICACHE_INDEX_MASTER_HTTP`), and every key of the file is a flag's name (`master-http` or
//! `master_http`). A file's values become the flags' defaults before the command line is
//! parsed, so that clap's own order (flag, then environment, then default) is the whole rule.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::sync::OnceLock;

use clap::parser::ValueSource;
use clap::{ArgMatches, Command};

/// The environment variable of a flag's id (`master_http` -> `HICACHE_INDEX_MASTER_HTTP`).
pub(crate) fn env_name(id: &str) -> String {
    format!(
        "HICACHE_INDEX_{}",
        id.replace('-', "_").to_ascii_uppercase()
    )
}

/// The environment variable naming the configuration file when `--config` is not given.
pub(crate) const CONFIG_ENV: &str = "HICACHE_INDEX_CONFIG";

/// The ids of the flags the configuration file set (for [`effective`]).
static FROM_FILE: OnceLock<BTreeSet<String>> = OnceLock::new();

/// Adds the environment variables to every flag of the `serve` subcommand of `cli`, and the
/// values of the configuration file, if one is named, as their defaults. An unreadable file,
/// a key that names no flag or a value of the wrong shape is an error (a usage error).
pub(crate) fn configure(cli: Command, argv: &[OsString]) -> Result<Command, String> {
    let file = config_path(argv).map(|path| read_file(&path)).transpose()?;
    let mut failure = None;
    let mut from_file = BTreeSet::new();
    let cli = cli.mut_subcommand("serve", |serve| {
        let ids: Vec<String> = serve
            .get_arguments()
            .filter(|a| a.get_long().is_some())
            .map(|a| a.get_id().to_string())
            .collect();
        // A flag given twice takes its last value (a wrapper script may add to a command line).
        let mut serve = serve.args_override_self(true);
        for id in &ids {
            serve = serve.mut_arg(id, |a| a.env(env_name(id)));
        }
        if let Some((path, values)) = &file {
            for (key, value) in values {
                let id = ids
                    .iter()
                    .find(|id| id.as_str() == key.replace('-', "_"))
                    .or_else(|| {
                        // Flags whose id is not their long name (`--pool` is `pools`).
                        let long = key.replace('_', "-");
                        serve
                            .get_arguments()
                            .find(|a| a.get_long() == Some(long.as_str()))
                            .map(|a| a.get_id().as_str())
                            .and_then(|found| ids.iter().find(|id| id.as_str() == found))
                    })
                    .cloned();
                let Some(id) = id.filter(|id| id != "config" && id != "check") else {
                    failure.get_or_insert(format!(
                        "--config {path}: unknown key {key:?} (the keys are serve's flags)"
                    ));
                    continue;
                };
                let values = value.clone();
                // A value from the file satisfies a required flag (as a variable does).
                serve = serve.mut_arg(&id, |a| a.default_values(values).required(false));
                from_file.insert(id);
            }
        }
        let _ = FROM_FILE.set(std::mem::take(&mut from_file));
        serve
    });
    match failure {
        Some(e) => Err(e),
        None => Ok(cli),
    }
}

/// Returns the file `--config FILE` (or `--config=FILE`) names after `serve`, else the one
/// `HICACHE_INDEX_CONFIG` names.
fn config_path(argv: &[OsString]) -> Option<String> {
    let mut args = argv.iter().map(|a| a.to_string_lossy().into_owned());
    if !args.any(|a| a == "serve") {
        return None;
    }
    while let Some(arg) = args.next() {
        if arg == "--config" {
            return args.next();
        }
        if let Some(path) = arg.strip_prefix("--config=") {
            return Some(path.to_owned());
        }
    }
    std::env::var(CONFIG_ENV).ok().filter(|p| !p.is_empty())
}

/// Reads a TOML file of `key = value` lines into each key's values as text (an array gives
/// several, for the repeatable flags).
fn read_file(path: &str) -> Result<(String, BTreeMap<String, Vec<String>>), String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("--config {path}: cannot read it: {e}"))?;
    let table: toml::Table =
        toml::from_str(&text).map_err(|e| format!("--config {path}: {}", one_line(&e)))?;
    let mut values = BTreeMap::new();
    for (key, value) in table {
        let text = |v: &toml::Value| -> Result<String, String> {
            match v {
                toml::Value::String(s) => Ok(s.clone()),
                toml::Value::Integer(n) => Ok(n.to_string()),
                toml::Value::Float(x) => Ok(x.to_string()),
                toml::Value::Boolean(b) => Ok(b.to_string()),
                _ => Err(format!(
                    "--config {path}: {key} must be a string, a number, a boolean or a list of them"
                )),
            }
        };
        let list = match &value {
            toml::Value::Array(items) => items.iter().map(text).collect::<Result<_, _>>()?,
            other => vec![text(other)?],
        };
        values.insert(key, list);
    }
    Ok((path.to_owned(), values))
}

fn one_line(e: &impl std::fmt::Display) -> String {
    e.to_string()
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

/// The effective configuration, for the startup line and `serve --check`: every flag's
/// value(s) and where it came from (`flag`, `env`, `file`, `default`), secrets never shown (a
/// token is read from its file, whose path is shown).
pub(crate) fn effective(matches: &ArgMatches) -> serde_json::Value {
    let mut out = serde_json::Map::new();
    let from_file = FROM_FILE.get();
    for id in matches.ids() {
        let id = id.as_str();
        // Groups (the flattened LAYOUT flags' struct) and --check itself are no settings.
        if id == "check" || id.starts_with(|c: char| c.is_ascii_uppercase()) {
            continue;
        }
        let Some(source) = matches.value_source(id) else {
            continue;
        };
        let values: Vec<String> = matches
            .get_raw(id)
            .map(|v| v.map(|s| s.to_string_lossy().into_owned()).collect())
            .unwrap_or_default();
        let value = match values.as_slice() {
            [one] => serde_json::Value::String(one.clone()),
            many => serde_json::json!(many),
        };
        let from = match source {
            ValueSource::CommandLine => "flag",
            ValueSource::EnvVariable => "env",
            _ if from_file.is_some_and(|f| f.contains(id)) => "file",
            _ => "default",
        };
        out.insert(
            id.replace('_', "-"),
            serde_json::json!({ "value": value, "from": from }),
        );
    }
    serde_json::Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flag_ids_map_to_prefixed_upper_case_variables() {
        assert_eq!(env_name("master_http"), "HICACHE_INDEX_MASTER_HTTP");
        assert_eq!(env_name("max-body-bytes"), "HICACHE_INDEX_MAX_BODY_BYTES");
    }

    #[test]
    fn the_config_path_is_read_after_serve_only() {
        let argv = |a: &[&str]| a.iter().map(OsString::from).collect::<Vec<_>>();
        assert_eq!(
            config_path(&argv(&["hicache-index", "serve", "--config", "a.toml"])),
            Some("a.toml".into())
        );
        assert_eq!(
            config_path(&argv(&["hicache-index", "serve", "--config=b.toml"])),
            Some("b.toml".into())
        );
        assert_eq!(
            config_path(&argv(&["hicache-index", "keys", "--config", "a.toml"])),
            None
        );
    }
}
