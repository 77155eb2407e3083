//! Checking a candidate HA leader over its admin HTTP side, for [`Command::CheckLeader`]: what
//! `GET /health` and `GET /kv_events/status` say, read into a [`LeaderStatus`] (the core decides
//! what it means).
//!
//! [`Command::CheckLeader`]: hicache_index::Command::CheckLeader

use hicache_index::{EventsStatus, LeaderStatus};

use crate::http::{parse_events_status, MasterHttp};

/// Asks the master behind `http` (the candidate's host) whether it serves; call it off the event
/// loop. A request that fails reads as not serving, events unknown.
pub fn check_leader(http: &MasterHttp) -> LeaderStatus {
    let health = http.get("/health").ok();
    let events = http.get("/kv_events/status").ok();
    let mut status = parse_health(health.as_deref().unwrap_or_default());
    status.events = parse_events_status(events.as_deref());
    status
}

/// Reads `/health`: `{"status","role","ha_state","service_ready","leader_address","view_version"}`.
/// It serves when `ha_state` is `serving`, or, from a master without HA states, when its role is
/// `leader` and `service_ready` is true.
pub fn parse_health(body: &[u8]) -> LeaderStatus {
    let value: serde_json::Value = serde_json::from_slice(body).unwrap_or_default();
    let text = |name| value.get(name).and_then(serde_json::Value::as_str);
    let serving = match text("ha_state") {
        Some(state) => state == "serving",
        None => {
            text("role") == Some("leader")
                && value
                    .get("service_ready")
                    .and_then(serde_json::Value::as_bool)
                    == Some(true)
        }
    };
    LeaderStatus {
        serving,
        leader_address: text("leader_address").map(String::from),
        view_version: value
            .get("view_version")
            .and_then(serde_json::Value::as_u64),
        events: EventsStatus::Unknown,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn health_of_a_serving_leader_a_warming_one_and_a_standby() {
        let leader = br#"{"status":"ok","role":"leader","ha_state":"serving","service_ready":true,"leader_address":"127.0.0.2:50051","view_version":3}"#;
        let s = parse_health(leader);
        assert!(s.serving);
        assert_eq!(s.leader_address.as_deref(), Some("127.0.0.2:50051"));
        assert_eq!(s.view_version, Some(3));
        let warming = br#"{"status":"ok","role":"leader","ha_state":"leader_warmup","service_ready":false,"leader_address":"127.0.0.2:50051","view_version":3}"#;
        assert!(!parse_health(warming).serving);
        let standby = br#"{"status":"ok","role":"standby","ha_state":"standby","service_ready":false,"leader_address":null,"view_version":null}"#;
        assert!(!parse_health(standby).serving);
        assert!(!parse_health(b"not json").serving);
    }
}
