//! SGLang workers: taking their advertised layouts and the endpoint they vote for (their state
//! and the models' view: `parts/workers.rs`).

use super::*;

impl Session {
    pub(super) fn on_worker(
        &mut self,
        now: Instant,
        worker: &str,
        info: Option<WorkerInfo>,
    ) -> Effects {
        self.see(now);
        let mut fx = Effects::new();
        match info {
            Some(info) => {
                self.note_layout(worker, &info, &mut fx);
                self.workers.directory.insert(worker.into(), info);
            }
            None => {
                self.workers.directory.remove(worker);
                self.workers.votes.set(worker, None);
            }
        }
        self.reader
            .publish_layouts(&self.config.layouts, &self.workers.votes);
        self.choose_endpoint(now, &mut fx);
        self.update_health(&mut fx);
        fx
    }

    /// Returns the models the session knows and the layout each uses (a read, at any time).
    pub fn models(&self) -> Models<'_> {
        Models {
            configured: &self.config.layouts,
            workers: &self.workers,
        }
    }

    pub(super) fn note_layout(&mut self, worker: &str, info: &WorkerInfo, fx: &mut Effects) {
        let Some(model) = info.model.as_deref() else {
            self.workers.votes.set(worker, None);
            return;
        };
        if self
            .config
            .layouts
            .iter()
            .any(|ml| ml.model.as_deref() == Some(model))
        {
            self.workers.votes.set(worker, None);
            return;
        }
        let advertised = match (&info.layout_problem, &info.layout) {
            (Some(problem), _) => Advertised::Unusable(problem.clone()),
            (None, Some(layout)) => match layout.validate() {
                Ok(()) => Advertised::Layout(layout.clone()),
                Err(e) => Advertised::Unusable(alloc::format!("invalid layout: {e}")),
            },
            (None, None) => Advertised::Nothing(
                info.no_layout
                    .clone()
                    .unwrap_or_else(|| "advertises no layout".into()),
            ),
        };
        if !self.workers.votes.set(worker, Some((model, advertised))) {
            return;
        }
        match self.workers.votes.verdict(model) {
            Some(ModelVerdict::Conflict { .. }) => fx.push(Report::LayoutDisagreement {
                model: model.into(),
                worker: worker.into(),
            }),
            Some(ModelVerdict::Agreed(layout)) if self.config.page_deltas => {
                self.index.watch_layout(layout);
            }
            Some(ModelVerdict::Agreed(_) | ModelVerdict::NoLayout { .. }) | None => {}
        }
    }

    pub(super) fn choose_endpoint(&mut self, now: Instant, fx: &mut Effects) {
        if self.config.endpoint.is_some() || self.leader.is_some() {
            return;
        }
        let mut votes: BTreeMap<&str, usize> = BTreeMap::new();
        for info in self.workers.directory.values() {
            if let Some(e) = info.event_endpoint.as_deref() {
                *votes.entry(e).or_default() += 1;
            }
        }
        let current = self.link.endpoint.as_deref();
        let chosen = match current {
            Some(c) if votes.contains_key(c) => Some(c),
            _ => votes
                .iter()
                .max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(a.0)))
                .map(|(e, _)| *e),
        };
        let Some(chosen) = chosen.map(String::from) else {
            return;
        };
        if votes.len() > 1 {
            fx.push(Report::EndpointDisagreement {
                kept: chosen.clone(),
                distinct: votes.len(),
            });
        }
        if current == Some(chosen.as_str()) {
            return;
        }
        let had = self.link.endpoint.replace(chosen);
        if had.is_some() {
            fx.push(Command::Disconnect);
            self.stream.begin_anew();
            self.drop_index(now, ClearReason::EndpointChanged, fx);
            self.resync.state = ResyncState::Idle;
            self.verify.reset();
        }
        self.link.backoff.attempts = 0;
        self.connect(now, fx);
    }
}
