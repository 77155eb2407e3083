//! The checks: safety after every query, confirmation, and the final liveness and staleness
//! checks.

use super::*;

/// The pools of a model as suffix ranges with their policies.
#[derive(Copy, Clone, Debug)]
pub(super) struct PoolPlan {
    pub(super) start: usize,
    pub(super) end: usize,
    pub(super) policy: HitPolicy,
}

pub(super) fn pool_plans(spec: &ModelSpec) -> Vec<PoolPlan> {
    let mut at = 0;
    spec.layout
        .pools
        .iter()
        .map(|p| {
            let (start, end) = (at, at + p.suffixes.len());
            at = end;
            PoolPlan {
                start,
                end,
                policy: p.hit_policy,
            }
        })
        .collect()
}

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
                    self.sut.last_applied_seq(),
                    self.sut.health(),
                    self.oracle.describe(obj),
                );
                self.fail(FailureKind::FalseHit, detail);
                return;
            }
            excused |= !self.oracle.p_now(obj);
            stale |= !self.oracle.t_now(obj);
            self.check_confirmed(obj);
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
        let age = self.sut.counters_at(self.now).unconfirmed_ms;
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

    // ---- the end ----

    pub(super) fn final_checks(&mut self) {
        let health = self.sut.health();
        if health == Health::Recovering
            && self.recovering == Some(hicache_index::Recovering::NoStatus)
            && !self.http_opts.watermark
        {
            // A master that gives no status counters: a reordering stream can never be placed,
            // and a snapshot asked before any batch came cannot be anchored (an idle master).
            // No safe rule makes it live: an expected, visible stall (issue 26), neither a pass
            // of the liveness check nor a failure.
            self.stats.expected_stall = true;
            self.stats.liveness_skipped = true;
            return;
        }
        if health != Health::Live {
            self.fail(
                FailureKind::NotLive,
                format!("health {health:?} after the quiet period"),
            );
            return;
        }
        let evictions = self.sut.counters().evictions;
        self.stats.liveness_skipped = evictions > 0;
        self.judge_now();
        let p_loss = self.p_loss.max(self.net.lost_upto());
        let resync = self.opts.session.resync;
        let verify = self.opts.session.verify;
        let mut stale_left = 0u64;
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
                    return;
                }
            };
            if hit {
                // The safety sweep: every object of a complete page is justified.
                self.check_page(page, 0..info.objs as usize, "final");
                if info.tenant == 0 && objs.clone().any(|o| !self.oracle.t_now(o)) {
                    stale_left += 1;
                    first_stale.get_or_insert(page);
                }
            }
            if evictions > 0 {
                continue;
            }
            let present = objs
                .clone()
                .all(|o| self.oracle.t_now(o) && self.oracle.e_now(o));
            let shadowed = objs
                .clone()
                .any(|o| self.shadowed.contains(o) || self.oracle.medium_doubt(o));
            let eligible = present
                && !shadowed
                && ((info.tenant == 0 && resync)
                    || objs.clone().all(|o| self.oracle.last_store(o) > p_loss));
            if !eligible {
                continue;
            }
            self.stats.liveness_pages += 1;
            if !hit {
                let mut held_text = String::new();
                let detail = format!(
                    "page {} of tenant {:?} model {:?} is present at the master and was stored \
                     after the last loss (position {p_loss}; last stores {:?}), but is a miss",
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
                    return;
                }
            }
        }
        if verify && stale_left > 0 {
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
