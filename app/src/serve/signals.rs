//! The signals `serve` handles: SIGINT and SIGTERM stop it, SIGHUP is logged and ignored.

/// The signals `serve` handles, installed before it says it listens (a signal before that would
/// take its default action: SIGHUP would kill it).
pub(super) struct Signals {
    #[cfg(unix)]
    terminate: Option<tokio::signal::unix::Signal>,
    #[cfg(unix)]
    hangup: Option<tokio::signal::unix::Signal>,
}

impl Signals {
    pub(super) fn install() -> Signals {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            Signals {
                terminate: signal(SignalKind::terminate()).ok(),
                hangup: signal(SignalKind::hangup()).ok(),
            }
        }
        #[cfg(not(unix))]
        Signals {}
    }

    /// Returns at SIGINT or SIGTERM. SIGHUP is logged and ignored (the configuration and the
    /// layouts are read at start: restart to change them).
    pub(super) async fn stop(&mut self) {
        #[cfg(unix)]
        {
            let terminate = async {
                match &mut self.terminate {
                    Some(term) => {
                        term.recv().await;
                    }
                    None => std::future::pending::<()>().await,
                }
            };
            let hangup = async {
                match &mut self.hangup {
                    Some(hup) => loop {
                        if hup.recv().await.is_none() {
                            std::future::pending::<()>().await;
                        }
                        tracing::info!(
                            target: "hicache_index_serve",
                            "SIGHUP ignored: the configuration and layouts are read at start (restart to change them)"
                        );
                    },
                    None => std::future::pending::<()>().await,
                }
            };
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                () = terminate => {}
                () = hangup => {}
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
