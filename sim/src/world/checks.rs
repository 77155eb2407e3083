//! The checks: safety after every query, confirmation, and the final liveness and staleness
//! checks.

use std::fmt::Write as _;

use hicache_index::{Health, HitPolicy, Hits, Instant, Lookup, Pages, Tokens};

use crate::master::{ObjId, PageId, Request};
use crate::models::TENANTS;
use crate::oracle::Oracle;
use crate::system::System;

use super::pools::PoolPlan;
use super::report::FailureKind;
use super::state::World;
use super::step::IDLE_BOUND;

impl<S: System> World<S> {
    // ---- queries and the safety check ----

    pub(super) fn model_name(&self, model: u8) -> Option<&str> {
        if model == 0 && self.opts.master.default_model {
            None
        } else {
            Some(self.models[model as usize].name.as_str())
        }
    }

    pub(super) fn random_query(&mut self) {
        let Some(req) = self.master.recent_request(&mut self.query_rng).cloned() else {
            return;
        };
        let req: &Request = &req;
        let total = req.pages.len();
        let n = if total > 1 && self.query_rng.chance(0.2) {
            self.query_rng.range(1, total as u64) as usize
        } else {
            total
        };
        let form = self.query_rng.below(10);
        self.hashes.clear();
        for &p in &req.pages[..n] {
            self.hashes.push(self.master.page(p).hash);
        }
        if form < 6 {
            self.ask(req, n, QueryForm::Hashes);
        } else if form < 9 {
            self.ask(req, n, QueryForm::Tokens);
        } else {
            self.ask(req, n, QueryForm::Map);
        }
    }

    fn ask(&mut self, req: &Request, n: usize, form: QueryForm) {
        let spec = &self.models[req.model as usize];
        let ps = spec.layout.page_size as usize;
        let eagle = usize::from(spec.layout.eagle);
        let tokens_len = if n == req.pages.len() {
            req.tokens.len()
        } else {
            n * ps + eagle
        };
        let tokens = &req.tokens[..tokens_len];
        let narrow: Option<Vec<u32>> = if form == QueryForm::Tokens && self.query_rng.chance(0.5) {
            tokens.iter().map(|&t| u32::try_from(t).ok()).collect()
        } else {
            None
        };
        let pages = match form {
            QueryForm::Hashes | QueryForm::Map => Pages::Hashes(&self.hashes),
            QueryForm::Tokens => Pages::Tokens {
                tokens: match &narrow {
                    Some(t) => Tokens::U32(t),
                    None => Tokens::U64(tokens),
                },
                namespace: req.namespace(),
            },
        };
        let model = if req.model == 0 && self.opts.master.default_model {
            None
        } else {
            Some(self.models[req.model as usize].name.as_str())
        };
        let lookup = Lookup {
            tenant: TENANTS[req.tenant as usize],
            model,
            pages,
        };
        let answer = if form == QueryForm::Map {
            self.map.clear();
            self.map.resize(n, false);
            self.sut.query_map(&lookup, &mut self.map)
        } else {
            self.sut.query(&lookup)
        };
        match answer {
            Ok(hits) => {
                self.record_answer(&hits);
                if hits.total_pages != n {
                    self.fail(
                        FailureKind::Mismatch,
                        format!("{n} pages asked, {} counted", hits.total_pages),
                    );
                }
                self.check_hits(req.model, &req.pages[..n], &hits, form == QueryForm::Map);
            }
            Err(e) => {
                let detail = format!("{e:?} for {lookup:?}");
                self.fail(FailureKind::QueryError, detail);
            }
        }
    }

    pub(super) fn record_answer(&mut self, hits: &Hits) {
        self.transcript.number(
            (hits.prefix_pages as u64) << 32 | (hits.total_pages as u64) << 8 | hits.trust as u64,
        );
        self.stats.queries += 1;
        self.stats.hit_pages += hits.prefix_pages as u64;
    }

    /// Checks one answer: every required object of every reported page is justified.
    pub(super) fn check_hits(&mut self, model: u8, pages: &[PageId], hits: &Hits, with_map: bool) {
        let prefix = hits.prefix_pages;
        self.judge_now();
        if prefix > pages.len() {
            self.fail(
                FailureKind::Mismatch,
                format!("{prefix} hit pages reported for {} pages", pages.len()),
            );
            return;
        }
        for (i, &page) in pages.iter().enumerate().take(prefix) {
            // The objects page `i` needs: every all-pages pool, and the trailing pools whose
            // window covers it.
            let mut required = 0u128;
            for plan in &self.plans[model as usize] {
                let needed = match plan.policy {
                    HitPolicy::AllPages => true,
                    HitPolicy::TrailingPages(w) => i + (w.max(1) as usize) >= prefix,
                };
                if needed {
                    for slot in plan.start..plan.end.min(128) {
                        required |= 1 << slot;
                    }
                }
            }
            let slots = (0..128).filter(move |&slot| required & (1 << slot) != 0);
            self.check_page(page, slots, "prefix");
        }
        if with_map {
            for (i, &page) in pages.iter().enumerate() {
                if self.map.get(i) == Some(&true) {
                    let objs = self.master.page(page).objs as usize;
                    self.check_page(page, 0..objs, "map");
                }
            }
        }
        if self.opts.exact && self.snapshots.iter().all(|&s| s <= self.applied_pos) {
            let want = self.expected_prefix(model, pages);
            if want != prefix {
                self.fail(
                    FailureKind::Mismatch,
                    format!(
                        "prefix {prefix}, oracle says {want} ({} pages, applied position {})",
                        pages.len(),
                        self.applied_pos
                    ),
                );
            }
        }
    }

    /// Finds the horizon the hits of a query are judged against (see [`crate::oracle`]).
    pub(super) fn judge_now(&mut self) {
        self.judge = self.horizon();
    }

    /// Checks the objects `slots` of a page reported complete; counts excuses and staleness.
    pub(super) fn check_page(
        &mut self,
        page: PageId,
        slots: impl Iterator<Item = usize>,
        how: &str,
    ) {
        let info = *self.master.page(page);
        let default = info.tenant == 0;
        let from = self
            .judge
            .map_or(self.oracle.position(), |p| p.saturating_sub(1));
        let mut stale = false;
        let mut excused = false;
        for slot in slots {
            let obj = info.first_obj + slot as u32;
            if !self.oracle.present_since(obj, from) {
                let status = self.sut.status(self.now);
                let detail = format!(
                    "{how} hit on page {} of tenant {:?} model {:?}: object {} is not justified: \
                     absent at the master since before position {from} (the oldest pending for \
                     the session: {:?}, created at {:?}); master position {}, applied seq {:?}, \
                     health {:?}; {}",
                    info.hash,
                    TENANTS[info.tenant as usize],
                    self.models[info.model as usize].name,
                    self.master.key(obj),
                    self.judge,
                    self.judge.map(|p| self.time_of(p)),
                    self.master.position(),
                    status.last_applied_seq,
                    status.health,
                    self.oracle.describe(obj),
                );
                self.fail(FailureKind::FalseHit, detail);
                return;
            }
            excused |= !self.oracle.p_now(obj);
            stale |= !self.oracle.t_now(obj);
            self.check_confirmed(obj);
            if default {
                self.check_unlisted(obj);
            }
        }
        if excused {
            self.stats.excused_claims += 1;
            if let Some(p) = self.judge {
                let age = self.now.saturating_duration_since(self.time_of(p));
                if self.trace && age > self.stats.longest_excuse {
                    eprintln!(
                        "{:>14} excuse of {age:?}: the oldest pending event is at position {p}",
                        self.now.as_nanos()
                    );
                }
                self.stats.longest_excuse = self.stats.longest_excuse.max(age);
            }
        }
        if stale {
            if default {
                self.stats.stale_hits += 1;
            } else {
                self.stats.stale_hits_other_tenants += 1;
            }
        }
    }

    /// Checks that a hit's object was present at the master at or after the time the index
    /// reports its content confirmed (less the oldest evidence a message delivered, and a
    /// millisecond for the gauge's rounding).
    pub(super) fn check_confirmed(&mut self, obj: ObjId) {
        let Some(until) = self.oracle.t_present_until(obj) else {
            return;
        };
        let gone = self.time_of(until);
        let age = self.sut.status(self.now).counters.unconfirmed_ms;
        let claimed = Instant::from_nanos(
            self.now
                .as_nanos()
                .saturating_sub(age.saturating_add(1).saturating_mul(1_000_000)),
        );
        if gone + self.evidence_lag < claimed {
            let detail = format!(
                "object {} left the master at {gone:?} (position {until}), but the index reports \
                 its content confirmed {age} ms before {:?}; oldest evidence delivered {:?}; {}",
                self.master.key(obj),
                self.now,
                self.evidence_lag,
                self.oracle.describe(obj),
            );
            self.fail(FailureKind::Unconfirmed, detail);
        }
    }

    /// The oracle's own answer: the prefix the index must report when it holds exactly the event
    /// history at the applied position, learned since the last loss (exact mode has no fault, so
    /// the only loss is what was sent before the first connection).
    pub(super) fn expected_prefix(&self, model: u8, pages: &[PageId]) -> usize {
        let plans = &self.plans[model as usize];
        let mut runs = vec![0usize; plans.len()];
        let mut prefix = 0;
        for (i, &page) in pages.iter().enumerate() {
            let first = self.master.page(page).first_obj;
            let since = self.p_loss.max(self.net.lost_upto());
            let present = |p: &PoolPlan| {
                (p.start..p.end).all(|s| {
                    self.oracle
                        .e_stored_between(first + s as u32, since, self.applied_pos)
                })
            };
            let mut all = true;
            for (k, plan) in plans.iter().enumerate() {
                let ok = present(plan);
                match plan.policy {
                    HitPolicy::AllPages => all &= ok,
                    HitPolicy::TrailingPages(_) => runs[k] = if ok { runs[k] + 1 } else { 0 },
                }
            }
            if !all {
                break;
            }
            let n = i + 1;
            let trailing_ok = plans.iter().zip(&runs).all(|(p, &run)| match p.policy {
                HitPolicy::AllPages => true,
                HitPolicy::TrailingPages(w) => run >= (w.max(1) as usize).min(n),
            });
            if trailing_ok {
                prefix = n;
            }
        }
        prefix
    }

    // ---- the idle master, and the end ----

    /// The check of the idle master, [`IDLE_BOUND`] after it went idle and reachable: the
    /// index is live (or in the expected stall of a master without status counters) and exact:
    /// no page claimed that the master lacks (a loss nothing revealed no longer excuses a claim
    /// when the master tells its counters and the session resyncs, so it can ask them), every
    /// page it holds a hit.
    pub(super) fn idle_checks(&mut self) {
        self.idle_checked = true;
        // A resyncing session with its quiet stream's check on asks the counters of a master
        // that tells them (rule R11 of the core's sequence module); without the check only
        // its fetches read them, so only verification bounds what no batch revealed (R10).
        let can_ask = self.http_opts.watermark
            && self.opts.session.resync
            && self.opts.session.status_check.is_some();
        self.stats.unrevealed_at_idle = if can_ask {
            self.driver.flight.expire_unrevealed() as u64
        } else {
            u64::from(self.driver.flight.first_unrevealed().is_some())
        };
        let when = format!("{IDLE_BOUND:?} after the master went idle");
        if self.live_or_stalled(&when) {
            self.sweep_pages("idle", true);
        }
    }

    /// Reports whether the session is live; if not, fails the run, or counts the expected
    /// stall: a master without status counters, the session recovering since its last fetch,
    /// no batch handed after that fetch (nothing can anchor its snapshot), and a reason to
    /// forget that a correct session must follow at or after the last batch handed (a
    /// connection, a loss or a restart that batch revealed, stale keys, an unreadable removal):
    /// a session that forgot for no such reason, and fetches again and again, is not live
    /// for a reason of its own. With a reorder window, a stream the master's status cannot
    /// place stays recovering though batches keep coming: that stall too is expected.
    fn live_or_stalled(&mut self, when: &str) -> bool {
        let health = self.sut.status(self.now).health;
        if health == Health::Live {
            return true;
        }
        let handed = self.last_handed_at;
        let unanchored = self
            .last_fetch_at
            .is_some_and(|f| handed.is_none_or(|h| h < f));
        let forced = self
            .last_forced_at
            .is_some_and(|f| handed.is_none_or(|h| h <= f));
        // A reordering stream without status counters is never placed (rules R6 and R7 of the
        // core's sequence module), though batches keep coming; between its fetches, asked again
        // and again, it says why (`Recovering::NoStatus`), and during one, that it fetches.
        let unplaceable = self.opts.session.reorder.is_on();
        if !self.http_opts.watermark
            && health == Health::Recovering
            && ((unanchored && forced) || unplaceable)
        {
            self.stats.expected_stall = true;
        } else {
            self.fail(FailureKind::NotLive, format!("health {health:?} {when}"));
        }
        false
    }

    pub(super) fn final_checks(&mut self) {
        if !self.live_or_stalled("after settling") {
            if self.stats.expected_stall && self.failures.is_empty() {
                // The safety sweep still holds while the index stays recovering.
                self.sweep_pages("final", false);
            }
            return;
        }
        let (stale, first_stale) = self.sweep_pages("final", true);
        // Verification finds what the master dropped silently, and so does the watch of its
        // signals: every silent removal of this master, every hide and unmount moves a
        // counter. A restart that no stream signal reveals moves none (this master's counters
        // count on across restarts), so only verification is held to it.
        let watched = self.watch_bound().is_some();
        let stale_left = if self.opts.session.verify {
            stale.all
        } else if watched {
            stale.signalled
        } else {
            0
        };
        if stale_left > 0 {
            let mut detail =
                format!("{stale_left} stale pages of the default tenant still hit after settling");
            if let Some(page) = first_stale {
                let info = *self.master.page(page);
                let _ = write!(detail, "; first {}:", info.hash);
                for o in info.first_obj..info.first_obj + u32::from(info.objs) {
                    let key = self.master.key(o);
                    let _ = write!(
                        detail,
                        " {key} (held {:?}, present {}; {})",
                        self.sut.holds_object(TENANTS[0], key),
                        self.oracle.t_now(o),
                        self.oracle.describe(o)
                    );
                }
            }
            self.fail(FailureKind::Staleness, detail);
        }
    }

    /// Asks about every page ever written: each hit must be justified (the safety sweep), and,
    /// with `liveness`, each page the master holds that the session can know of must be a hit.
    /// Returns the stale hits of the default tenant left (all, and those the master's signals
    /// revealed), and the first of them.
    ///
    /// A page the liveness check demands: every object present at the master (true state and
    /// event history), none with a per-medium removal after its last store (reading that as
    /// gone everywhere is always safe), none of the default tenant back after a stall unless
    /// the session watches the master's signals (then a reconcile brings it back), and either
    /// of the default tenant with resync on, or each object stored after the last loss the
    /// world knows of. Without status counters a
    /// loss nothing revealed cannot be known: objects stored at or after it are not demanded.
    /// Nothing is demanded when the index evicted pages (its cap).
    fn sweep_pages(&mut self, how: &str, liveness: bool) -> (StaleLeft, Option<PageId>) {
        let evictions = self.sut.status(self.now).counters.evictions;
        self.stats.liveness_skipped = evictions > 0;
        self.judge_now();
        let p_loss = self.p_loss.max(self.net.lost_upto());
        let unknowable = self.driver.flight.first_unrevealed();
        let resync = self.opts.session.resync;
        let watched = self.watch_bound().is_some();
        let mut stale_left = StaleLeft::default();
        let mut first_stale = None;
        for page in 0..self.master.pages().len() as PageId {
            let info = *self.master.page(page);
            let objs = info.first_obj..info.first_obj + u32::from(info.objs);
            let lookup = Lookup {
                tenant: TENANTS[info.tenant as usize],
                model: self.model_name(info.model),
                pages: Pages::Hashes(core::slice::from_ref(&info.hash)),
            };
            let mut map = [false];
            let hit = match self.sut.query_map(&lookup, &mut map) {
                Ok(_) => map[0],
                Err(e) => {
                    self.fail(FailureKind::QueryError, format!("{e:?}"));
                    return (stale_left, first_stale);
                }
            };
            if hit {
                // The safety sweep: every object of a complete page is justified.
                self.check_page(page, 0..info.objs as usize, how);
                if info.tenant == 0 && objs.clone().any(|o| !self.oracle.t_now(o)) {
                    stale_left.all += 1;
                    if objs.clone().any(|o| self.oracle.absent_by_signal(o)) {
                        stale_left.signalled += 1;
                    }
                    first_stale.get_or_insert(page);
                }
            }
            if !liveness || evictions > 0 {
                continue;
            }
            let present = objs
                .clone()
                .all(|o| self.oracle.t_now(o) && self.oracle.e_now(o));
            let doubtful = objs.clone().any(|o| self.oracle.medium_doubt(o));
            // Objects back after a stall, with no event: only a key list read after they came
            // back tells the session, and only the watch asks for one (issue 27).
            let restored = info.tenant == 0
                && !watched
                && objs.clone().any(|o| self.oracle.restored_since_store(o));
            let known =
                unknowable.is_none_or(|u| objs.clone().all(|o| self.oracle.last_store(o) < u));
            let eligible = present
                && !doubtful
                && !restored
                && known
                && ((info.tenant == 0 && resync)
                    || objs.clone().all(|o| self.oracle.last_store(o) > p_loss));
            if !eligible {
                continue;
            }
            if how == "idle" {
                self.stats.idle_liveness_pages += 1;
            } else {
                self.stats.liveness_pages += 1;
            }
            if !hit {
                let mut held_text = String::new();
                let detail = format!(
                    "{how}: page {} of tenant {:?} model {:?} is present at the master and was \
                     stored after the last loss (position {p_loss}; last stores {:?}), but is a \
                     miss",
                    info.hash,
                    TENANTS[info.tenant as usize],
                    self.models[info.model as usize].name,
                    objs.clone()
                        .map(|o| self.oracle.last_store(o))
                        .collect::<Vec<_>>(),
                );
                let mut held = Vec::new();
                for o in objs {
                    let holds = self
                        .sut
                        .holds_object(TENANTS[info.tenant as usize], self.master.key(o));
                    held.push(holds);
                    if holds == Some(false) {
                        held_detail(&mut held_text, o, &self.oracle);
                    }
                }
                let detail = format!("{detail}; the index holds {held:?}{held_text}");
                self.fail(FailureKind::Liveness, detail);
                if self.stopped() {
                    break;
                }
            }
        }
        (stale_left, first_stale)
    }
}

/// Stale pages of the default tenant a sweep found still hit.
#[derive(Copy, Clone, Debug, Default)]
pub(super) struct StaleLeft {
    /// All of them.
    all: u64,
    /// Those with an object absent since a change that moved the master's signals.
    signalled: u64,
}

fn held_detail(out: &mut String, obj: ObjId, oracle: &Oracle) {
    let _ = write!(out, "; missing object {obj}: {}", oracle.describe(obj));
}

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum QueryForm {
    Hashes,
    Tokens,
    Map,
}
