//! The plan: the flags checked, with everything they name (files, addresses), before the
//! service starts.

use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::Arc;

use hicache_index_api::Limits;
use hicache_index_tokio::SubscriberConfig;

use super::args::ServeArgs;
use super::listen;

/// Everything checked before the service starts.
pub(super) struct Plan {
    pub(super) config: SubscriberConfig,
    pub(super) limits: Limits,
    pub(super) listen: SocketAddr,
    pub(super) settings: listen::Settings,
}

/// Checks the arguments and everything they name (files, addresses); a usage error otherwise.
pub(super) fn plan(args: &ServeArgs) -> Result<Plan, String> {
    if args.max_connections == 0 || args.max_body_bytes == 0 || args.client_timeout.is_zero() {
        return Err(
            "--max-connections, --max-body-bytes and --client-timeout must be positive".into(),
        );
    }
    if cfg!(not(feature = "nng")) && args.nng_listen.is_some() {
        return Err("--nng-listen: this hicache-index was built without nng support (build with --features nng)".into());
    }
    if args.shutdown_grace.is_zero() {
        return Err("--shutdown-grace must be positive".into());
    }
    if let Some(filter) = &args.log_level {
        tracing_subscriber::EnvFilter::try_new(filter)
            .map_err(|e| format!("--log-level {filter:?}: {e}"))?;
    }
    let token = args
        .auth_token_file
        .as_deref()
        .map(read_token)
        .transpose()?;
    let listen = resolve_listen(&args.listen)?;
    let open = token.is_none() && !args.allow_unauthenticated;
    if open && !listen.ip().is_loopback() {
        return Err(format!(
            "--listen {}: refusing a non-loopback address without --auth-token-file (anyone who \
             reaches it learns which prompt prefixes are cached); give a token, or \
             --allow-unauthenticated",
            args.listen
        ));
    }
    if let Some(url) = &args.nng_listen {
        if !args.allow_unauthenticated && !nng_is_local(url) {
            return Err(format!(
                "--nng-listen {url}: refusing a non-loopback nng address (nng carries no \
                 token); listen on ipc:// or 127.0.0.1, or give --allow-unauthenticated"
            ));
        }
    }
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => Some(listen::tls_acceptor(cert, key)?),
        _ => None,
    };
    let config = args.index.plan()?;
    let limits = Limits {
        max_body_bytes: args.max_body_bytes,
        max_tokens: args.max_tokens,
        max_page_hashes: args.max_page_hashes,
        max_batch_queries: args.max_batch_queries,
    };
    let settings = listen::Settings {
        client_timeout: args.client_timeout,
        max_connections: args.max_connections,
        tls,
        gate: Arc::new(listen::Gate {
            token,
            metrics: args.metrics_auth,
        }),
    };
    Ok(Plan {
        config,
        limits,
        listen,
        settings,
    })
}

/// Reads the bearer token of `--auth-token-file` (surrounding whitespace dropped).
fn read_token(path: &str) -> Result<String, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("--auth-token-file {path}: cannot read it: {e}"))?;
    let token = text.trim();
    if token.is_empty() || token.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!(
            "--auth-token-file {path}: the token must be one word, without spaces"
        ));
    }
    Ok(token.to_owned())
}

/// Resolves `--listen` (an address or a host name) to its first address.
fn resolve_listen(listen: &str) -> Result<SocketAddr, String> {
    let mut addrs = listen
        .to_socket_addrs()
        .map_err(|e| format!("--listen {listen:?} is not HOST:PORT that resolves: {e}"))?;
    addrs
        .next()
        .ok_or_else(|| format!("--listen {listen:?} resolves to no address"))
}

/// Reports whether an nng URL can only be reached from this machine (`ipc://`, `inproc://`, or
/// TCP on a loopback address).
pub(super) fn nng_is_local(url: &str) -> bool {
    if url.starts_with("ipc://") || url.starts_with("inproc://") {
        return true;
    }
    let Some(rest) = url
        .strip_prefix("tcp://")
        .or_else(|| url.strip_prefix("tcp4://"))
    else {
        return false;
    };
    rest.to_socket_addrs()
        .map(|mut a| {
            let all: Vec<SocketAddr> = a.by_ref().collect();
            !all.is_empty() && all.iter().all(|a| a.ip().is_loopback())
        })
        .unwrap_or(false)
}
