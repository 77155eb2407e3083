//! Verification: rounds of sampled keys asked of the master, sweeps, and the confirmation age
//! (its state: `parts/verify.rs`).

use super::parts::checksum::key_checksum;
use super::parts::verify::{Round, Skipped, Sweep};
use super::*;

impl Session {
    pub(super) fn on_verify_failed(&mut self, now: Instant, request: VerifyRequest) -> Effects {
        self.see(now);
        if self.is_confirmation(request) {
            let mut fx = Effects::new();
            self.confirmation_failed(now, &mut fx);
            return fx;
        }
        if self.verify.is_point_check(request) {
            let mut fx = Effects::new();
            self.verify.point_check = None;
            self.point_check_failed(now, &mut fx);
            self.update_health(&mut fx);
            return fx;
        }
        match &self.verify.in_flight {
            Some(round) if round.request == request => {
                self.verify.in_flight = None;
                self.counters.verify_failures += 1;
                self.schedule_verify_after_failure(now);
            }
            _ => self.counters.unawaited_answers += 1,
        }
        self.verify.sweep = None;
        Effects::new()
    }

    /// Takes the master's answer to the verification `request`, from any iterator (the contract
    /// is [`Input::VerifyResult`]'s).
    pub(super) fn on_verify_result<'k, I>(
        &mut self,
        now: Instant,
        request: VerifyRequest,
        results: I,
    ) -> Effects
    where
        I: IntoIterator<Item = (&'k str, bool)>,
    {
        self.see(now);
        if self.is_confirmation(request) {
            let fx = self.confirm_lines(now, results);
            self.index.settle();
            return fx;
        }
        if self.verify.is_point_check(request) {
            return self.point_checked(now, results);
        }
        let mut fx = Effects::new();
        let round = match self.verify.in_flight.take() {
            Some(round) if round.request == request => {
                self.verify.failures.attempts = 0;
                round
            }
            other => {
                self.verify.in_flight = other;
                self.verify.sweep = None;
                self.counters.unawaited_answers += 1;
                return fx;
            }
        };
        let (mut checked, mut stale, mut checksum, mut kept) = (0usize, 0usize, 0u64, false);
        let mut confirmed = false;
        for (key, exists) in results {
            checked += 1;
            checksum = checksum.wrapping_add(key_checksum(key));
            if exists {
                // A suspect the master still holds, read after its removal: present again.
                if self.index.confirm_suspect(DEFAULT_TENANT, key, round.stamp) && !confirmed {
                    self.note_evidence(round.sampled_at);
                    confirmed = true;
                }
            } else if self.index.drop_suspect(DEFAULT_TENANT, key) {
                // A suspect that went with its removal (an older publisher): already absent.
            } else {
                if self.index.remove_stale(DEFAULT_TENANT, key, round.stamp) {
                    stale += 1;
                } else {
                    // Absent at the master, yet kept because its page changed meanwhile.
                    kept |= self.index.contains_key(DEFAULT_TENANT, key);
                }
            }
        }
        self.end_round(
            &round,
            checked == round.keys && checksum == round.checksum && !kept,
        );
        self.counters.verify_rounds += 1;
        self.counters.verified_keys += checked as u64;
        self.counters.stale_keys_found += stale as u64;
        if stale > 0 {
            fx.push(Report::StaleFound {
                keys: stale,
                checked,
            });
        }
        self.emit_deltas(&mut fx);
        if stale > 0 && self.reconciling() {
            // The key list being read may hold what this round found gone (it may have been
            // read before the master dropped it): only a list asked for from now on tells.
            self.resync.watch.want(now);
        }
        if stale > 0 {
            self.escalate_stale(now, &mut fx);
        }
        self.schedule_verify(now);
        self.update_health(&mut fx);
        // Removals of stale keys are over: lock-free queries may use what they read.
        self.index.settle();
        fx
    }

    /// A round removed stale keys: an object gone without an event means the master dropped
    /// objects silently (a client's segment went away), and the keys this round did not sample
    /// are as doubtful. With resync on, ask for a reconcile (the key list brought into the
    /// index without forgetting it; answers say `reconciling` until it is applied), unless the
    /// last escalation was less than `escalate_every` ago: then only the sampled keys left,
    /// and the escalation waits for the first round due once the limit has passed
    /// ([`Session::start_verify`]).
    fn escalate_stale(&mut self, now: Instant, fx: &mut Effects) {
        let (Some(v), Some(_)) = (self.config.verify, self.config.resync) else {
            return;
        };
        match self.verify.escalated_at.map(|at| at + v.escalate_every) {
            Some(until) if now < until => {
                self.verify.held = true;
                self.counters.stale_escalations_held += 1;
                fx.push(Report::EscalationHeld { until });
            }
            _ => {
                self.verify.escalated_at = Some(now);
                self.verify.held = false;
                self.counters.stale_escalations += 1;
                self.resync.watch.want(now);
                self.reconcile_if_wanted(now, fx);
            }
        }
    }

    /// R3: the stream proved its status point only after batches before it came, by numbers
    /// that another run of the same sizes has too (a restart between the status and the key
    /// list, or after both, that no transport saw). Asks the master (`/batch_query_keys`, which
    /// resync needs anyway, verification rounds on or off) whether it holds a sample of what the
    /// index claims; queries miss until it answers.
    /// The keys the skipped batches stored are asked about too: the index claiming nothing
    /// (a key list of another run, empty) proves nothing.
    pub(super) fn check_point(&mut self, now: Instant, fx: &mut Effects) {
        if self.verify.point_check.is_some() {
            // One check at a time: the next asks once this one answers, so that no answer
            // that would fail it is lost to a newer request.
            self.verify.check_again = true;
            return;
        }
        let sample = self.config.verify.unwrap_or_default().sample;
        let mut keys = Vec::new();
        let _ = self.index.sample_keys(DEFAULT_TENANT, sample, &mut keys);
        let index = &self.index;
        let stores: Vec<String> = core::mem::take(&mut self.verify.skipped.stores)
            .into_iter()
            .filter(|key| !index.contains_key(DEFAULT_TENANT, key))
            .collect();
        keys.extend(stores.iter().cloned());
        self.verify.point_stores = stores;
        if keys.is_empty() && self.verify.reordered.stores.is_empty() {
            return; // nothing claimed or stored: nothing to check
        }
        // The sample moved the sweep's place outside a round: the sweep confirms nothing.
        self.verify.sweep = None;
        self.ask_point(now, keys, fx);
    }

    /// R7: batches applied out of their order of arrival stored what the master is to confirm.
    /// Asks about those keys alone when no key list that places the stream is being handed
    /// over (the resync's end asks then) and no check is under way (its answer asks then); a
    /// store verification cannot ask about (another tenant's) forgets.
    pub(super) fn check_reordered(&mut self, now: Instant, fx: &mut Effects) {
        let reordered = &self.verify.reordered;
        if !reordered.is_pending()
            || self.resync.state.is_fetching()
            || self.verify.point_check.is_some()
        {
            return;
        }
        if reordered.unaskable {
            self.forget(now, ClearReason::Unproven, fx);
            return;
        }
        self.ask_point(now, Vec::new(), fx);
    }

    /// Asks the master about `keys` and what batches applied out of their order of arrival
    /// stored (R7) as the point check; queries miss until every key is answered.
    fn ask_point(&mut self, now: Instant, mut keys: Vec<String>, fx: &mut Effects) {
        keys.append(&mut self.verify.reordered.stores);
        // Once each: an answer is told whole by its keys.
        keys.sort_unstable();
        keys.dedup();
        let request = self.verify.reserve_request();
        let timeout = self.config.verify.unwrap_or_default().timeout;
        self.verify.point_check = Some((request, now + timeout));
        self.verify.point_asked = asked(keys.iter().map(String::as_str));
        self.counters.point_checks += 1;
        fx.push(Command::VerifyKeys { request, keys });
    }

    /// The point check failed or was not answered: the master could not tell, neither can the
    /// stream (R3): forget.
    pub(super) fn point_check_failed(&mut self, now: Instant, fx: &mut Effects) {
        self.counters.point_checks_failed += 1;
        self.forget(now, ClearReason::Unproven, fx);
    }

    /// The master's answer to a point check: a key the index claims (and no event changed
    /// since) absent at the master, or one a skipped batch stored that the master holds and
    /// the index lacks (and lost nothing to its bounds since the placement), shows the key list
    /// was not the stream's run's: forget. An answer that leaves a key out cannot tell: forget.
    fn point_checked<'k>(
        &mut self,
        now: Instant,
        results: impl IntoIterator<Item = (&'k str, bool)>,
    ) -> Effects {
        let mut fx = Effects::new();
        self.verify.point_check = None;
        let stores = core::mem::take(&mut self.verify.point_stores);
        let index = &self.index;
        let lossless = lossy(index) == self.verify.skipped.lossy_at;
        let mut contradicted = false;
        let mut answered = (0usize, 0u64);
        for (key, present) in results {
            let claimed = index.contains_key(DEFAULT_TENANT, key);
            contradicted |= (!present && claimed)
                || (present && !claimed && lossless && stores.iter().any(|s| s == key));
            answered = (answered.0 + 1, answered.1.wrapping_add(key_checksum(key)));
        }
        let complete = answered == self.verify.point_asked;
        if contradicted {
            self.counters.point_checks_failed += 1;
            self.forget(now, ClearReason::Restart, &mut fx);
        } else if !complete {
            self.point_check_failed(now, &mut fx);
        }
        // A check asked for, or batches applied out of order, while this one was out: ask now
        // (a forget dropped both).
        if core::mem::take(&mut self.verify.check_again) {
            self.check_point(now, &mut fx);
        }
        self.check_reordered(now, &mut fx);
        self.update_health(&mut fx);
        self.index.settle();
        fx
    }

    pub(super) fn schedule_verify(&mut self, now: Instant) {
        self.verify.next_at = self.config.verify.map(|v| now + v.interval);
    }

    /// Schedules the next round after one that failed or timed out: the interval, or longer
    /// while the master's HTTP side keeps failing (its backoff: doubling, jittered, up to 8
    /// intervals); an answered round resets it.
    pub(super) fn schedule_verify_after_failure(&mut self, now: Instant) {
        let Some(v) = self.config.verify else {
            return;
        };
        let delay = self.verify.failures.delay(&BackoffConfig {
            initial: v.interval,
            max: v.interval.saturating_mul(super::resync::RETRY_BACKOFF_CAP),
            ..BackoffConfig::default()
        });
        self.verify.failures.attempts = self.verify.failures.attempts.saturating_add(1);
        self.verify.next_at = Some(now + delay.max(v.interval));
    }

    pub(super) fn start_verify(&mut self, now: Instant, fx: &mut Effects) {
        let Some(v) = self.config.verify else { return };
        if self.health.health != Health::Live {
            self.schedule_verify(now);
            return;
        }
        let limit_passed = |at: Instant| now >= at + v.escalate_every;
        if self.verify.held && self.verify.escalated_at.is_none_or(limit_passed) {
            // A round held an escalation back and the limit has passed: reconcile now
            // rather than wait for another round to find a stale key.
            self.escalate_stale(now, fx);
            self.schedule_verify(now);
            return;
        }
        let mut keys = Vec::new();
        // Suspects first: each is a page that misses until its answer comes back.
        self.index
            .sample_suspects(DEFAULT_TENANT, v.sample, &mut keys);
        let sampled = self.index.sample_keys(DEFAULT_TENANT, v.sample, &mut keys);
        if keys.is_empty() {
            // No default-tenant object at all: nothing for a sweep to confirm.
            self.verify.sweep = None;
            self.schedule_verify(now);
            return;
        }
        if sampled.began_sweep && self.verify.sweep.is_none() {
            self.verify.sweep = Some(Sweep {
                began: now,
                other_tenants: false,
            });
        }
        let request = self.verify.reserve_request();
        self.verify.next_at = None;
        self.verify.in_flight = Some(Round {
            request,
            stamp: sampled.stamp,
            deadline: now + v.timeout,
            keys: keys.len(),
            checksum: asked(keys.iter().map(String::as_str)).1,
            ended_sweep: sampled.ended_sweep,
            began_next: sampled.began_next,
            other_tenants: sampled.other_tenants,
            sampled_at: now,
        });
        fx.push(Command::VerifyKeys { request, keys });
    }

    /// Accounts an answered round to the sweep: a round answered only in part breaks it; a
    /// round that ends a sweep all of whose rounds were answered in full confirms the index as
    /// of the sweep's first round, unless its rounds passed objects of a tenant verification
    /// does not sample (objects of any tenant stored since the sweep began are confirmed by
    /// their own events).
    pub(super) fn end_round(&mut self, round: &Round, full: bool) {
        if !full {
            self.verify.sweep = None;
            return;
        }
        if !round.ended_sweep {
            if let Some(sweep) = &mut self.verify.sweep {
                sweep.other_tenants |= round.other_tenants;
            }
            return;
        }
        if let Some(sweep) = self.verify.sweep {
            if !(sweep.other_tenants || round.other_tenants) {
                self.confirm(sweep.began);
            }
        }
        // The next sweep began in this round, or begins with the next one. Whether the other
        // tenant's page was before or after the wrap is not known: count it for both.
        self.verify.sweep = round.began_next.then_some(Sweep {
            began: round.sampled_at,
            other_tenants: round.other_tenants,
        });
    }
}

impl Session {
    /// The stream was placed at a status point: what batches skipped before it store is noted
    /// from now on (R3).
    pub(super) fn note_placed(&mut self) {
        self.verify.skipped = Skipped {
            stores: Vec::new(),
            lossy_at: lossy(&self.index),
        };
    }

    /// Notes what the batch `batch`, skipped before the status point (R3), stored, up to a
    /// sample: the point check asks the master about it.
    pub(super) fn note_skipped(&mut self, batch: &Batch<'_>) {
        let sample = self.config.verify.unwrap_or_default().sample;
        let stores = &mut self.verify.skipped.stores;
        for event in &batch.events {
            if stores.len() >= sample {
                return;
            }
            if let (EventKind::Stored, Some(key)) = (event.kind, event.object_key) {
                if event.tenant_id.unwrap_or(DEFAULT_TENANT) == DEFAULT_TENANT
                    && parse_object_key(key).is_some()
                {
                    stores.push(key.into());
                }
            }
        }
    }

    /// Notes what the batch `batch`, applied after a batch that arrived after it, stores (R7):
    /// the next point check asks the master about it.
    pub(super) fn note_reordered(&mut self, batch: &Batch<'_>) {
        self.counters.reordered_batches += 1;
        let reordered = &mut self.verify.reordered;
        for event in &batch.events {
            if let (EventKind::Stored, Some(key)) = (event.kind, event.object_key) {
                if parse_object_key(key).is_none() {
                    continue; // not a page: never claimed
                }
                match event.tenant_id.unwrap_or(DEFAULT_TENANT) {
                    DEFAULT_TENANT => reordered.stores.push(key.into()),
                    _ => reordered.unaskable = true,
                }
            }
        }
    }
}

/// How many keys and their checksum: what a point check asked, to tell a whole answer.
fn asked<'k>(keys: impl Iterator<Item = &'k str>) -> (usize, u64) {
    keys.fold((0, 0), |(n, sum), k| {
        (n + 1, sum.wrapping_add(key_checksum(k)))
    })
}

/// What the index lost to its bounds so far: evictions and untracked objects.
fn lossy(index: &Index) -> u64 {
    let c = index.counters();
    c.evictions + c.untracked_objects
}
