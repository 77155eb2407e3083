//! The fault classes a hunt can turn off one at a time ([`Options::without`]), to tell which one
//! a failure needs.

use core::time::Duration;

use super::worlds::WorldKind;
use super::Options;

impl Options {
    /// The fault classes [`Options::without`] can turn off, to tell which one a failure needs
    /// (the named worlds' names among them).
    pub const CLASSES: [&'static str; 18] = [
        "stalls",
        "heavy-http",
        "undecodable",
        "late-copies",
        "cross-restart-reorder",
        "odd-keys",
        "unknown-keyless",
        "idle",
        "extra-queries",
        "restarts",
        "stale-key-list",
        "unseen-restarts",
        "foreign-flood",
        "tail-loss-idle",
        "clock-jump",
        "segments",
        "clears-after-keys",
        "query-keys-down",
    ];

    /// Turns one fault class of [`Options::CLASSES`] off; returns `false` for an unknown name.
    pub fn without(&mut self, class: &str) -> bool {
        let (m, n, h, d) = (
            &mut self.master,
            &mut self.network,
            &mut self.http,
            &mut self.driver,
        );
        match class {
            "stalls" => {
                d.stalls_per_sec = 0.0;
                d.snapshot_stall = 0.0;
                d.timer_lag = Duration::ZERO;
            }
            "heavy-http" => h.calm_down(),
            "undecodable" => {
                n.garble = 0.0;
                n.truncate = 0.0;
            }
            "late-copies" => n.late_copy = 0.0,
            "clears-after-keys" => h.clear_after_keys = 0.0,
            "cross-restart-reorder" => n.cross_epoch_reorder = false,
            "odd-keys" => m.mix.foreign_put = 0.0,
            "unknown-keyless" => m.mix.unknown_keyless = 0.0,
            "idle" => m.idle = 0.0,
            "extra-queries" => d.queries_per_sec = 0.0,
            "restarts" => {
                m.mix.restart = 0.0;
                h.restart_after_keys = 0.0;
                h.restart_after_status = 0.0;
            }
            other => match WorldKind::from_name(other) {
                Some(kind) => self.without_world(kind),
                None => return false,
            },
        }
        true
    }
}
