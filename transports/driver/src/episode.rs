//! Failures named once per episode: the first failure of a kind (the key list, verification,
//! the event endpoint) logs its URL and cause at WARN, the next ones only count (the core backs
//! off between them), and the first success after them logs at INFO with how many tries and how
//! long it took. The open episodes are what `/readyz` gives as its reason.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// One failure episode: where, why (the latest cause), how often, since when.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Episode {
    /// The URL or endpoint that failed.
    pub url: String,
    /// The latest cause.
    pub cause: String,
    /// Failures in a row.
    pub tries: u64,
    /// When the first of them came.
    pub since: Instant,
}

/// The open episodes, by what failed (`"key list"`, `"verification"`, `"events"`).
#[derive(Debug, Default)]
pub struct Episodes {
    open: Mutex<BTreeMap<&'static str, Episode>>,
}

impl Episodes {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<&'static str, Episode>> {
        self.open
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Records a failure of `what` at `url`; the first of an episode is logged at WARN (and
    /// returns true), the others at DEBUG.
    pub fn failed(&self, what: &'static str, url: &str, cause: &str) -> bool {
        let mut open = self.lock();
        match open.get_mut(what) {
            Some(episode) => {
                episode.tries += 1;
                episode.cause = cause.to_owned();
                episode.url = url.to_owned();
                tracing::debug!(
                    tries = episode.tries,
                    "{what} still unreachable at {url}: {cause}"
                );
                false
            }
            None => {
                tracing::warn!(
                    "{what} unreachable at {url}: {cause} (retried with backoff; said again \
                     when it ends)"
                );
                open.insert(
                    what,
                    Episode {
                        url: url.to_owned(),
                        cause: cause.to_owned(),
                        tries: 1,
                        since: Instant::now(),
                    },
                );
                true
            }
        }
    }

    /// Replaces the cause of the open episode of `what`, if any, and logs it at WARN (a better
    /// cause found later, e.g. that the host does not resolve).
    pub fn refine(&self, what: &'static str, cause: &str) {
        if let Some(episode) = self.lock().get_mut(what) {
            tracing::warn!("{what} unreachable at {}: {cause}", episode.url);
            episode.cause = cause.to_owned();
        }
    }

    /// Records a success of `what`: an episode open ends, logged at INFO.
    pub fn succeeded(&self, what: &'static str) {
        if let Some(episode) = self.lock().remove(what) {
            tracing::info!(
                tries = episode.tries,
                "{what} reachable again at {} after {} failures in {}",
                episode.url,
                episode.tries,
                humanize(episode.since.elapsed())
            );
        }
    }

    /// Returns each open episode as one line: `key list unreachable at URL: CAUSE, N tries`.
    pub fn describe(&self) -> Vec<String> {
        self.lock()
            .iter()
            .map(|(what, e)| {
                let tries = if e.tries == 1 { "try" } else { "tries" };
                format!(
                    "{what} unreachable at {}: {}, {} {tries}",
                    e.url, e.cause, e.tries
                )
            })
            .collect()
    }

    /// Returns the open episode of `what`, if any.
    pub fn get(&self, what: &'static str) -> Option<Episode> {
        self.lock().get(what).cloned()
    }
}

fn humanize(d: Duration) -> String {
    if d < Duration::from_secs(1) {
        format!("{} ms", d.as_millis())
    } else {
        format!("{:.1} s", d.as_secs_f64())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_episode_counts_its_failures_and_ends_at_a_success() {
        let episodes = Episodes::default();
        assert!(episodes.failed("key list", "http://h:1", "refused"));
        assert!(!episodes.failed("key list", "http://h:1", "timed out"));
        assert_eq!(
            episodes.describe(),
            ["key list unreachable at http://h:1: timed out, 2 tries"]
        );
        episodes.succeeded("key list");
        assert!(episodes.describe().is_empty());
        assert!(
            episodes.failed("key list", "http://h:1", "refused"),
            "a new episode"
        );
    }
}
