//! The master's own signals that objects stopped or started being listed without any event.
//!
//! A Mooncake store client that closes takes the objects with a replica on its segment out of
//! the master's listing at once; one that crashes or stalls has them hidden at the client's
//! active TTL, and a stalled one brings them back when it resumes. None of this sends an event
//! or leaves a gap (spec section 10). The master's `/metrics` moves in the same moment: the
//! families of [`STORE_SIGNAL_FAMILIES`]. The session reads them every
//! [`crate::ResyncConfig::store_watch`] ([`crate::Command::ReadSignals`]); any change of any of
//! them (a counter that moves, in either direction: a master restart or failover sets them back)
//! makes it reconcile the index with the master's key list (see [`crate::Health::Reconciling`]).

/// The watch interval drivers use when they turn the watch on with their defaults.
pub const DEFAULT_STORE_WATCH: core::time::Duration = core::time::Duration::from_millis(250);

/// The `/metrics` families whose movement means objects were hidden, dropped or brought back
/// without an event: a segment unmounted or mounted again, a client suspected, gone offline or
/// recovered, and the gauge of clients suspected now.
pub const STORE_SIGNAL_FAMILIES: [&str; 6] = [
    "master_unmount_segment_requests_total",
    "master_remount_segment_requests_total",
    "master_client_liveness_suspected_transitions_total",
    "master_client_liveness_offline_transitions_total",
    "master_client_liveness_recoveries_total",
    "master_client_liveness_suspected_clients",
];

/// What one read of the master's `/metrics` said of the families of [`STORE_SIGNAL_FAMILIES`]:
/// each family's value, summed over its series, or nothing for a family it did not list.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct StoreSignals {
    values: [Option<u64>; STORE_SIGNAL_FAMILIES.len()],
}

impl StoreSignals {
    /// Adds one sample of the family `name` (its value rounded down; a negative or non-number
    /// value reads as 0); returns whether `name` is one of [`STORE_SIGNAL_FAMILIES`] (other
    /// samples are ignored).
    pub fn add(&mut self, name: &str, value: f64) -> bool {
        let Some(i) = STORE_SIGNAL_FAMILIES.iter().position(|f| *f == name) else {
            return false;
        };
        // `as` saturates, and reads NaN as 0.
        let value = value as u64;
        let slot = &mut self.values[i];
        *slot = Some(slot.unwrap_or(0).saturating_add(value));
        true
    }

    /// Returns the value of the family `name`, if the master listed it.
    pub fn get(&self, name: &str) -> Option<u64> {
        let i = STORE_SIGNAL_FAMILIES.iter().position(|f| *f == name)?;
        self.values[i]
    }

    /// Reports whether the master listed none of the families (a master without them: nothing
    /// to watch).
    pub fn is_empty(&self) -> bool {
        self.values.iter().all(Option::is_none)
    }

    /// Returns the first family whose value differs from `earlier`'s (listed in one and not the
    /// other counts), or `None` when none does.
    pub fn changed_since(&self, earlier: &StoreSignals) -> Option<&'static str> {
        (0..STORE_SIGNAL_FAMILIES.len())
            .find(|&i| self.values[i] != earlier.values[i])
            .map(|i| STORE_SIGNAL_FAMILIES[i])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_of_one_family_add_up_and_others_are_ignored() {
        let mut s = StoreSignals::default();
        assert!(s.is_empty());
        assert!(s.add("master_unmount_segment_requests_total", 2.0));
        assert!(s.add("master_unmount_segment_requests_total", 1.0));
        assert!(!s.add("master_put_start_requests_total", 7.0));
        assert_eq!(s.get("master_unmount_segment_requests_total"), Some(3));
        assert_eq!(s.get("master_client_liveness_recoveries_total"), None);
        assert!(!s.is_empty());
    }

    #[test]
    fn any_family_moving_either_way_or_appearing_is_a_change() {
        let mut a = StoreSignals::default();
        a.add("master_client_liveness_suspected_clients", 1.0);
        let mut b = a;
        assert_eq!(b.changed_since(&a), None);
        b.add("master_client_liveness_recoveries_total", 0.0);
        assert_eq!(
            b.changed_since(&a),
            Some("master_client_liveness_recoveries_total")
        );
        let mut c = StoreSignals::default();
        c.add("master_client_liveness_suspected_clients", 0.0);
        assert_eq!(
            c.changed_since(&a),
            Some("master_client_liveness_suspected_clients")
        );
    }
}
