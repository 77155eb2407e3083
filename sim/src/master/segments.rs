//! Store clients and their segments ([`crate::options::WorldKind::Segments`], spec section 10):
//! each client mounts one segment, a put lands on one segment of a client that heartbeats, and
//! a client that goes away takes its segment's memory-only objects out of the listing without
//! any event:
//! - **close**: at once, for good (`master_unmount_segment_requests_total` +1);
//! - **crash**: hidden at the active TTL (`..._suspected_transitions_total` +1, the
//!   `..._suspected_clients` gauge +1), unmounted after the suspicion TTL (offline transitions
//!   +1, the gauge back, unmount +1);
//! - **stall**: hidden at the active TTL as for a crash, and back on resume
//!   (`..._recoveries_total` +1, the gauge back) without any `stored` event; a stall that
//!   outlasts the suspicion TTL goes offline as a crash does, and the client mounts its segment
//!   again (empty) when it resumes (`master_remount_segment_requests_total` +1).
//!
//! An object with a disk replica stays listed (only its memory replica was on the segment).
//! A hidden object is still the master's: a put of its key is refused (it exists), no eviction
//! picks it, and a tenant-wide removal or a restart drops it for good. A new client mounts a
//! segment where one went away after [`ClientOptions::mount_after`]. A master restart forgets
//! the clients' state: every client mounts its segment again on the new run, and the counters
//! start from zero (`/metrics` of a new process), the remount counter at the clients mounted.

use hicache_index::Instant;

use super::clients::{ClientSignals, ClientStats, Clients, State};
use super::history::{Change, MasterOutput};
use super::pages::ObjId;
use super::state::{Master, DISK, HIDDEN, MEM};
#[cfg(doc)]
use crate::options::ClientOptions;

impl Master {
    /// Does what the clients have due at `now`.
    pub(super) fn step_clients(&mut self, now: Instant, out: &mut MasterOutput) {
        let Some(c) = self.clients.as_mut() else {
            return;
        };
        if self.faults && c.next_fault.is_some_and(|t| t <= now) {
            c.next_fault = c.fault_after(now);
            self.client_fault(now, out);
        }
        let Some(c) = self.clients.as_ref() else {
            return;
        };
        for slot in 0..c.slots.len() {
            let c = self.clients.as_mut().expect("clients");
            match c.slots[slot] {
                State::Active => {}
                State::Silent { resume, .. } if resume.is_some_and(|r| r <= now) => {
                    c.slots[slot] = State::Active;
                }
                State::Silent { hide_at, resume } if hide_at <= now => {
                    c.slots[slot] = State::Suspected {
                        offline_at: hide_at + c.opts.suspicion_ttl,
                        resume,
                    };
                    c.signals.suspected += 1;
                    c.signals.suspected_now += 1;
                    self.hide_segment(slot as u8, out);
                }
                State::Suspected { offline_at, resume }
                    if resume.is_some_and(|r| r <= now && r < offline_at) =>
                {
                    c.slots[slot] = State::Active;
                    c.signals.recoveries += 1;
                    c.signals.suspected_now -= 1;
                    self.restore_segment(slot as u8, out);
                }
                State::Suspected { offline_at, resume } if offline_at <= now => {
                    let mount_at = match resume {
                        Some(r) => r.max(now),
                        None => now + c.rng.duration(c.opts.mount_after.0, c.opts.mount_after.1),
                    };
                    c.slots[slot] = State::Gone {
                        mount_at,
                        remount: resume.is_some(),
                    };
                    c.signals.offline += 1;
                    c.signals.suspected_now -= 1;
                    c.signals.unmounts += 1;
                    self.drop_hidden(|m, o| m.segment[o as usize] == slot as u8);
                }
                State::Gone { mount_at, remount } if mount_at <= now => {
                    c.slots[slot] = State::Active;
                    c.signals.remounts += u64::from(remount);
                }
                _ => {}
            }
        }
    }

    /// A client closes, crashes or stalls (a third each); one heartbeating client stays.
    fn client_fault(&mut self, now: Instant, out: &mut MasterOutput) {
        let c = self.clients.as_mut().expect("clients");
        let active: Vec<usize> = (0..c.slots.len())
            .filter(|&i| c.slots[i] == State::Active)
            .collect();
        if active.len() < 2 {
            return;
        }
        let slot = active[c.rng.index(active.len())];
        let hide_at = now + c.opts.active_ttl;
        match c.rng.below(3) {
            0 => {
                c.stats.closes += 1;
                c.signals.unmounts += 1;
                let mount_at = now + c.rng.duration(c.opts.mount_after.0, c.opts.mount_after.1);
                c.slots[slot] = State::Gone {
                    mount_at,
                    remount: false,
                };
                self.close_segment(slot as u8, out);
            }
            1 => {
                c.stats.crashes += 1;
                c.slots[slot] = State::Silent {
                    hide_at,
                    resume: None,
                };
            }
            _ => {
                c.stats.stalls += 1;
                let (lo, hi) = c.opts.stall_len;
                let resume = Some(now + c.rng.duration(lo, hi));
                c.slots[slot] = State::Silent { hide_at, resume };
            }
        }
    }

    /// The listed objects whose memory-only replica is on segment `slot`.
    fn on_segment(&self, slot: u8) -> Vec<ObjId> {
        let mut objs = Vec::new();
        for set in &self.present {
            for &obj in set.as_slice() {
                if self.segment[obj as usize] == slot && self.flags[obj as usize] & MEM != 0 {
                    objs.push(obj);
                }
            }
        }
        objs
    }

    /// The segment closes: its memory replicas go at once; objects with a disk replica stay.
    fn close_segment(&mut self, slot: u8, out: &mut MasterOutput) {
        for obj in self.on_segment(slot) {
            if self.flags[obj as usize] & DISK != 0 {
                self.flags[obj as usize] = DISK;
                continue;
            }
            self.take_away(obj);
            self.stats.silent_removals += 1;
            if let Some(c) = self.clients.as_mut() {
                c.stats.unmounted += 1;
            }
            self.record(Change::Unmounted { obj }, out);
        }
    }

    /// The client was silent for the active TTL: its segment's memory-only objects are hidden.
    fn hide_segment(&mut self, slot: u8, out: &mut MasterOutput) {
        let mut hidden = Vec::new();
        for obj in self.on_segment(slot) {
            if self.flags[obj as usize] != MEM {
                continue;
            }
            let tenant = self.tenant_of(obj) as usize;
            self.present[tenant].remove(obj);
            self.flags[obj as usize] = MEM | HIDDEN;
            hidden.push(obj);
            self.record(Change::Hidden { obj }, out);
        }
        let c = self.clients.as_mut().expect("clients");
        c.stats.hidden += hidden.len() as u64;
        c.hidden[slot as usize] = hidden;
    }

    /// The stalled client resumes: its hidden objects are listed again, without an event.
    fn restore_segment(&mut self, slot: u8, out: &mut MasterOutput) {
        let c = self.clients.as_mut().expect("clients");
        let hidden = core::mem::take(&mut c.hidden[slot as usize]);
        for obj in hidden {
            if self.flags[obj as usize] != MEM | HIDDEN {
                continue;
            }
            self.flags[obj as usize] = MEM;
            let tenant = self.tenant_of(obj) as usize;
            self.present[tenant].insert(obj);
            if let Some(c) = self.clients.as_mut() {
                c.stats.restored += 1;
            }
            self.record(Change::Restored { obj }, out);
        }
    }

    /// Drops the hidden objects that `which` selects, for good (they are absent already).
    pub(super) fn drop_hidden(&mut self, which: impl Fn(&Master, ObjId) -> bool) {
        let Some(c) = self.clients.as_mut() else {
            return;
        };
        let mut lists = core::mem::take(&mut c.hidden);
        let mut dropped = Vec::new();
        for list in &mut lists {
            list.retain(|&obj| {
                let drop = which(self, obj);
                if drop {
                    dropped.push(obj);
                }
                !drop
            });
        }
        for obj in dropped {
            self.flags[obj as usize] = 0;
        }
        if let Some(c) = self.clients.as_mut() {
            c.hidden = lists;
        }
    }

    /// A master restart: hidden objects are gone with everything else, every client mounts
    /// its segment again on the new run, and the counters start from zero.
    pub(super) fn clients_restart(&mut self) {
        self.drop_hidden(|_, _| true);
        if let Some(c) = self.clients.as_mut() {
            let n = c.slots.len();
            c.slots = vec![State::Active; n];
            c.signals = ClientSignals {
                remounts: n as u64,
                ..ClientSignals::default()
            };
        }
    }

    /// Returns the clients' `/metrics` counters, when the master has clients.
    pub fn client_signals(&self) -> Option<ClientSignals> {
        self.clients.as_ref().map(|c| c.signals)
    }

    /// Returns what the clients did.
    pub fn client_stats(&self) -> ClientStats {
        self.clients.as_ref().map(|c| c.stats).unwrap_or_default()
    }

    /// Reports whether some client is silent, suspected or without a segment (the master is
    /// not idle then: objects may still be hidden, dropped or come back).
    pub fn clients_busy(&self) -> bool {
        self.clients.as_ref().is_some_and(Clients::busy)
    }
}
