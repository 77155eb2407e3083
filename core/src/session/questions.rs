//! The key list's questions: the doubted lines of a fetch's key list, and the keys live batches
//! stored that the list lacks, asked of the master with `/batch_query_keys` ([`MAX_QUESTIONS`]
//! at most), and its answers applied (why they are asked: `session/resync.rs`).

use super::parts::resync_state::{ask, MAX_QUESTIONS};
use super::resync::KeySink;
use super::*;

impl Session {
    /// Reports whether `request` is the question under way about the key list's doubted lines
    /// or the stores it lacks.
    pub(super) fn is_confirmation(&self, request: VerifyRequest) -> bool {
        matches!(&self.resync.state, ResyncState::Fetching { confirming: Some(r), .. } if *r == request)
    }

    /// Applies the master's answer about the doubted lines and the keys live batches stored
    /// that the list lacks: a doubted line it holds is applied unless a live event since the
    /// stream was placed decided it; a stored key it does not hold is removed unless a live
    /// event on it came since it was asked. What it leaves out (a request that failed, an
    /// entry without `ok`) is asked again with the stores the list lacks that came meanwhile
    /// ([`MAX_QUESTIONS`] at most), or the fetch completes: a doubted line never answered fails
    /// it, a store never answered is claimed unasked.
    pub(super) fn confirm_lines<'k>(
        &mut self,
        now: Instant,
        results: impl IntoIterator<Item = (&'k str, bool)>,
    ) -> Effects {
        let mut fx = Effects::new();
        let (mut confirmed, mut removed) = (0, 0);
        if let Some((_, mut keys)) = KeySink::of(&mut self.resync.state, &mut self.index) {
            let before = *keys.applied;
            for (key, present) in results {
                let was_asked = keys.asked.remove(key);
                let was_doubted = keys.doubted.remove(key);
                if present {
                    // A store the master holds is in the index already.
                    if was_doubted && !was_asked {
                        keys.take(key);
                    }
                } else if was_asked {
                    let _ = keys.index.remove(DEFAULT_TENANT, key);
                    removed += 1;
                }
            }
            // Stored keys the answer left out (a request that failed, an entry without `ok`):
            // not known to be held, so asked again or claimed unasked, never taken as answered
            // (as when the question goes unanswered: `unanswered`).
            keys.unlisted.append(keys.asked);
            confirmed = *keys.applied - before;
        }
        self.counters.snapshot_confirmed_lines += confirmed as u64;
        self.counters.unlisted_removed += removed;
        let ResyncState::Fetching {
            confirmed: total, ..
        } = &mut self.resync.state
        else {
            return fx;
        };
        *total += confirmed;
        if !self.ask_again(now, &mut fx) {
            self.complete_resync(now, &mut fx);
        }
        fx
    }

    /// Asks the master about the doubted lines no answer covered yet and the stores the list
    /// lacks not asked about yet, unless there are none, [`MAX_QUESTIONS`] were asked, or the
    /// fetch is full; returns whether it asked.
    pub(super) fn ask_again(&mut self, now: Instant, fx: &mut Effects) -> bool {
        let timeout = self
            .config
            .resync
            .map_or(Duration::ZERO, |r| r.fetch_timeout);
        let ResyncState::Fetching {
            unlisted,
            asked,
            doubted,
            full,
            questions,
            confirming,
            deadline,
            ..
        } = &mut self.resync.state
        else {
            return false;
        };
        if *full || (unlisted.is_empty() && doubted.is_empty()) || *questions >= MAX_QUESTIONS {
            return false;
        }
        let request = self.verify.reserve_request();
        let stores = ask(unlisted, asked);
        self.counters.unlisted_stores += stores.len() as u64;
        let mut keys: Vec<String> = doubted.iter().cloned().collect();
        keys.extend(stores);
        keys.sort_unstable();
        keys.dedup();
        *questions += 1;
        *confirming = Some(request);
        *deadline = now + timeout;
        fx.push(Command::VerifyKeys { request, keys });
        self.update_health(fx);
        true
    }

    /// The question under way failed or timed out: what it asked is asked again, with the
    /// stores that came meanwhile ([`MAX_QUESTIONS`] at most), or the fetch completes. A
    /// doubted line never answered fails it, as any failed fetch: a resync fetches again after
    /// its backoff, a reconcile falls back to one. Completing without those lines would lose
    /// the objects they name for good: a resync would never restore them, and a reconcile
    /// would remove them from the index while the master holds them (found by the simulator,
    /// seed 7304478 of the hostile preset). A store never answered is claimed unasked.
    pub(super) fn confirmation_failed(&mut self, now: Instant, fx: &mut Effects) {
        self.counters.confirm_failures += 1;
        self.unanswered();
        if !self.ask_again(now, fx) {
            self.complete_resync(now, fx);
        }
        self.update_health(fx);
    }

    /// The question under way will not be answered: its stores are not known to be held, so
    /// they go back to those not asked yet (its doubted lines stay unanswered).
    fn unanswered(&mut self) {
        if let ResyncState::Fetching {
            confirming,
            unlisted,
            asked,
            ..
        } = &mut self.resync.state
        {
            *confirming = None;
            unlisted.append(asked);
        }
    }
}
