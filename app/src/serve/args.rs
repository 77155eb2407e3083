//! `serve`'s flags: [`ServeArgs`], and how log lines are written ([`LogFormat`]).

use std::time::Duration;

use clap::{Args, ValueEnum};
use hicache_index_api::Limits;
use hicache_index_options::{parse_duration, IndexArgs};

/// How log lines are written (on stderr).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum LogFormat {
    /// One line of text a line.
    Text,
    /// One JSON object a line.
    Json,
}

/// `serve --events URL [--master-http URL] LAYOUT... [--workers URL,...] [--listen ADDR]
/// [--nng-listen URL]`
#[derive(Args, Debug)]
pub(crate) struct ServeArgs {
    /// A TOML file of settings: each key is a flag's name (`master-http = "http://..."`,
    /// `layout = ["a=a.json"]`, `no-verify = true`). Flags and HICACHE_INDEX_* variables win
    /// over it.
    #[arg(long, value_name = "FILE")]
    pub(super) config: Option<String>,
    /// Check the configuration (flags, variables, file, the files they name) and exit: 0 and
    /// the effective configuration on stderr if it is valid, 2 and the reason if not.
    #[arg(long)]
    pub(super) check: bool,
    #[command(flatten)]
    pub(crate) index: IndexArgs,
    /// The HTTP address to listen on, HOST:PORT (a host name resolves; every address it
    /// resolves to must be loopback unless a token or --allow-unauthenticated is given).
    #[arg(long, value_name = "HOST:PORT", default_value = "127.0.0.1:9100")]
    pub(super) listen: String,
    /// Also answer over nng on this URL (e.g. tcp://127.0.0.1:9101 or ipc:///run/hicache.ipc).
    #[arg(long, value_name = "URL")]
    pub(super) nng_listen: Option<String>,
    /// The largest request body, in bytes.
    #[arg(long, value_name = "BYTES", default_value_t = Limits::default().max_body_bytes)]
    pub(super) max_body_bytes: usize,
    /// The most tokens in one request.
    #[arg(long, value_name = "N", default_value_t = Limits::default().max_tokens)]
    pub(super) max_tokens: usize,
    /// The most page hashes in one request.
    #[arg(long, value_name = "N", default_value_t = Limits::default().max_page_hashes)]
    pub(super) max_page_hashes: usize,
    /// The most queries in one batch (POST /v1/query_batch, or a batch over nng).
    #[arg(long, value_name = "N", default_value_t = Limits::default().max_batch_queries)]
    pub(super) max_batch_queries: usize,
    /// Time a client has to send a request's headers, and then its body.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, default_value = "10s")]
    pub(super) client_timeout: Duration,
    /// The most HTTP connections open at once; past it the connection idle longest is closed
    /// to make room, and with none idle a new one is answered 503.
    #[arg(long, value_name = "N", default_value_t = 1024)]
    pub(super) max_connections: usize,
    /// A file holding the bearer token the query routes need (`Authorization: Bearer TOKEN`;
    /// /healthz, /readyz and /openapi.json stay open).
    #[arg(long, value_name = "FILE")]
    pub(super) auth_token_file: Option<String>,
    /// /metrics needs the token too.
    #[arg(long, requires = "auth_token_file")]
    pub(super) metrics_auth: bool,
    /// Listen on a non-loopback address (HTTP or nng) without a token: anyone who reaches the
    /// port learns which prompt prefixes are cached (see the threat model, docs/guarantees.md).
    #[arg(long)]
    pub(super) allow_unauthenticated: bool,
    /// Serve HTTPS with this PEM certificate chain (with --tls-key).
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    pub(super) tls_cert: Option<String>,
    /// The PEM private key of --tls-cert.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub(super) tls_key: Option<String>,
    /// On SIGTERM, the time given to finish: /readyz answers 503 at once, new connections are
    /// still accepted for the first half of it (so that load balancers see the 503), then the
    /// listener closes, requests in flight finish, and the process exits 0 at the latest when
    /// it ends.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, default_value = "5s")]
    pub(super) shutdown_grace: Duration,
    /// Log lines as text or JSON (on stderr).
    #[arg(long, value_name = "FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub(super) log_format: LogFormat,
    /// The log filter: a level (error, warn, info, debug, trace) or tracing directives
    /// (`info,hicache_index_access=debug` for the access log). Unset, RUST_LOG is read, else
    /// `info`.
    #[arg(long, value_name = "FILTER")]
    pub(super) log_level: Option<String>,
}
