//! SGLang workers: their advertised layouts and the endpoint they vote for.

use super::*;

impl Session {
    /// Reports what a worker advertises (`None`: the worker is gone). A configured endpoint and
    /// configured layouts always win; disagreement among workers is reported, not resolved
    /// silently.
    pub fn handle_worker(
        &mut self,
        now: Instant,
        worker: &str,
        info: Option<WorkerInfo>,
    ) -> Effects {
        self.see(now);
        let mut fx = Effects::new();
        match info {
            Some(info) => {
                if let (Some(model), Some(layout)) = (&info.model, &info.layout) {
                    self.note_layout(worker, model, layout, &mut fx);
                }
                self.workers.insert(worker.into(), info);
            }
            None => {
                self.workers.remove(worker);
            }
        }
        self.choose_endpoint(now, &mut fx);
        self.update_health(&mut fx);
        fx
    }

    /// Returns the layout a lookup uses.
    pub fn layout_for(&self, model: Option<&str>) -> Result<&Layout, QueryError> {
        match model {
            Some(m) => self
                .config
                .layouts
                .iter()
                .find(|ml| ml.model.as_deref() == Some(m))
                .map(|ml| &ml.layout)
                .or_else(|| self.advertised_layouts.get(m))
                .ok_or(QueryError::UnknownModel),
            None => {
                if let Some(ml) = self.config.layouts.iter().find(|ml| ml.model.is_none()) {
                    return Ok(&ml.layout);
                }
                let mut all = self
                    .config
                    .layouts
                    .iter()
                    .map(|ml| &ml.layout)
                    .chain(self.advertised_layouts.values());
                match (all.next(), all.next()) {
                    (Some(only), None) => Ok(only),
                    _ => Err(QueryError::NoDefaultLayout),
                }
            }
        }
    }

    pub(super) fn note_layout(
        &mut self,
        worker: &str,
        model: &str,
        layout: &Layout,
        fx: &mut Effects,
    ) {
        if self
            .config
            .layouts
            .iter()
            .any(|ml| ml.model.as_deref() == Some(model))
            || layout.validate().is_err()
        {
            return;
        }
        match self.advertised_layouts.get(model) {
            Some(known) if known != layout => {
                fx.push(Effect::LayoutDisagreement {
                    model: model.into(),
                    worker: worker.into(),
                });
            }
            Some(_) => {}
            None => {
                self.advertised_layouts.insert(model.into(), layout.clone());
                if self.config.page_deltas {
                    self.index.watch_layout(layout);
                }
            }
        }
    }

    pub(super) fn choose_endpoint(&mut self, now: Instant, fx: &mut Effects) {
        if self.config.endpoint.is_some() || self.leader.is_some() {
            return;
        }
        let mut votes: BTreeMap<&str, usize> = BTreeMap::new();
        for info in self.workers.values() {
            if let Some(e) = info.event_endpoint.as_deref() {
                *votes.entry(e).or_default() += 1;
            }
        }
        let current = self.endpoint.as_deref();
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
            fx.push(Effect::EndpointDisagreement {
                kept: chosen.clone(),
                distinct: votes.len(),
            });
        }
        if current == Some(chosen.as_str()) {
            return;
        }
        let had = self.endpoint.replace(chosen);
        if had.is_some() {
            fx.push(Effect::Disconnect);
            self.reset_stream();
            self.forget(now, ClearReason::EndpointChanged, fx);
            self.resync = Resync::Idle;
            self.verify = Verify::idle();
        }
        self.attempts = 0;
        self.connect(now, fx);
    }
}
