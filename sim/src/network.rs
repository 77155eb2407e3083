//! The network between the master's PUB socket and the session's SUB socket: a seeded netem.
//!
//! Rules apply per message when it is sent: pass (with latency), drop, duplicate, delay (which
//! reorders when [`NetworkOptions::reorder_jitter`] is set; otherwise delivery is first in, first
//! out, as over one TCP connection), truncate, garble (a payload that does not decode, topic and
//! sequence intact), corrupt, damage the topic or the frame count, and keep a **late copy**
//! delivered much later, across disconnects, reconnects and clears.
//! Around the messages:
//! - **Connections** follow the session's effects: [`Network::connect`] answers later with
//!   [`NetEvent::Connected`] or [`NetEvent::ConnectFailed`], or never (a hang). While not
//!   connected, PUB drops what it sends; after a connect, the first messages are lost for a
//!   slow-joiner window.
//! - **Disconnects** (the driver is told: [`NetEvent::Disconnected`]) lose what is in flight.
//! - **Partitions** (the driver is not told) drop or hold what is sent during them.
//! - A **master restart** makes ZeroMQ reconnect underneath: the new master's first messages are
//!   lost for a window, and, unless [`NetworkOptions::cross_epoch_reorder`] is set, none of them
//!   overtakes a message of the old master.
//!
//! Corruption is only delivered when the decoder rejects it or when it decodes to the very same
//! batch: corruption that yields another valid batch cannot happen over TCP and ZeroMQ framing,
//! and no subscriber could detect it.
//!
//! The network tracks [`Network::lost_upto`]: the highest history position of a master event
//! whose message will never be delivered intact, for the liveness check.

use std::collections::BTreeMap;
use std::time::Duration;

use hicache_index::Instant;

use crate::master::Published;
use crate::options::NetworkOptions;
use crate::rng::Rng;

mod damage;
mod message;

use damage::{corrupt, garble, truncate};
pub use message::{MasterMeta, Message, NetEvent, NetStats, Origin};

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Link {
    Down,
    Connecting { at: Option<Instant>, ok: bool },
    Up,
}

/// The network (see the module docs).
#[derive(Debug)]
pub struct Network {
    opts: NetworkOptions,
    rng: Rng,
    faults: bool,
    link: Link,
    queue: BTreeMap<(Instant, u64), Message>,
    counter: u64,
    latest_scheduled: Instant,
    epoch_floor: Instant,
    blackout_until: Instant,
    partition: Option<(Instant, Instant, bool)>,
    next_disconnect: Option<Instant>,
    next_partition: Option<Instant>,
    lost_upto: u64,
    lost: Vec<(u64, u64)>,
    late: Vec<(Instant, u32, Message)>,
    connection: u32,
    stats: NetStats,
}

impl Network {
    /// Makes a network with no connection.
    pub fn new(opts: NetworkOptions, rng: Rng) -> Network {
        let mut n = Network {
            opts,
            rng,
            faults: true,
            link: Link::Down,
            queue: BTreeMap::new(),
            counter: 0,
            latest_scheduled: Instant::ZERO,
            epoch_floor: Instant::ZERO,
            blackout_until: Instant::ZERO,
            partition: None,
            next_disconnect: None,
            next_partition: None,
            lost_upto: 0,
            lost: Vec::new(),
            late: Vec::new(),
            connection: 0,
            stats: NetStats::default(),
        };
        n.next_partition = n.after(Instant::ZERO, n.opts.partitions_per_sec);
        n
    }

    fn after(&mut self, now: Instant, rate: f64) -> Option<Instant> {
        self.rng.exponential(rate).map(|d| now + d)
    }

    /// Returns what the network did.
    pub fn stats(&self) -> NetStats {
        self.stats
    }

    /// Returns the highest history position of a master event whose message will never be
    /// delivered intact (0: none).
    pub fn lost_upto(&self) -> u64 {
        self.lost_upto
    }

    /// Reports whether the subscriber is connected.
    pub fn is_up(&self) -> bool {
        self.link == Link::Up
    }

    /// Returns the number of messages in flight.
    pub fn in_flight(&self) -> usize {
        self.queue.len()
    }

    /// Turns the fault rules on or off; off, every message passes in order with latency.
    pub fn set_faults(&mut self, now: Instant, on: bool) {
        self.faults = on;
        if on {
            self.next_partition = self.after(now, self.opts.partitions_per_sec);
            if self.link == Link::Up {
                self.next_disconnect = self.after(now, self.opts.disconnects_per_sec);
            }
        } else {
            self.next_partition = None;
            self.next_disconnect = None;
            self.partition = None;
        }
    }

    fn lose(&mut self, origin: Origin) {
        if let Origin::Master(m) = origin {
            self.lost_upto = self.lost_upto.max(m.last_pos);
            if !m.late {
                self.lost.push((m.first_pos, m.id));
            }
        }
    }

    /// Moves the master messages lost since the last call to `out`, as `(first_pos, id)`.
    pub fn drain_lost(&mut self, out: &mut Vec<(u64, u64)>) {
        out.append(&mut self.lost);
    }

    /// Calls `f` with every master message in flight (late copies apart).
    pub fn for_each_in_flight(&self, mut f: impl FnMut(&MasterMeta)) {
        for msg in self.queue.values() {
            if let Origin::Master(m) = &msg.origin {
                if !m.late {
                    f(m);
                }
            }
        }
    }

    fn drop_in_flight(&mut self) {
        let queue = core::mem::take(&mut self.queue);
        for (_, msg) in queue {
            if matches!(msg.origin, Origin::Master(m) if m.intact) {
                self.stats.lost_unconnected += 1;
            }
            self.lose(msg.origin);
        }
    }

    /// The session asked to connect (closing any previous connection).
    pub fn connect(&mut self, now: Instant) {
        if self.link == Link::Up {
            self.drop_in_flight();
        }
        let (lo, hi) = self.opts.connect_latency;
        let at = now + self.rng.duration(lo, hi);
        let faults = self.faults;
        if faults && self.rng.chance(self.opts.connect_hang) {
            self.stats.connect_hangs += 1;
            self.link = Link::Connecting {
                at: None,
                ok: false,
            };
        } else {
            let ok = !(faults && self.rng.chance(self.opts.connect_fail));
            self.link = Link::Connecting { at: Some(at), ok };
        }
    }

    /// The session asked to close the connection.
    pub fn disconnect(&mut self, _now: Instant) {
        if self.link == Link::Up {
            self.drop_in_flight();
        }
        self.link = Link::Down;
        self.next_disconnect = None;
    }

    /// The master restarted at `now` and is up again at `up_at`: ZeroMQ reconnects underneath,
    /// or, when the transport `seen` the socket close, the connection breaks now and the
    /// driver is told.
    pub fn master_restarted(&mut self, now: Instant, up_at: Instant, seen: bool) {
        if seen && self.link == Link::Up {
            self.stats.seen_restarts += 1;
            self.next_disconnect = Some(now);
        }
        let (lo, hi) = self.opts.restart_reconnect;
        if self.faults {
            let window = self.rng.duration(lo, hi);
            self.blackout_until = self.blackout_until.max(up_at + window);
        }
        self.epoch_floor = self.latest_scheduled;
    }

    fn latency(&mut self) -> Duration {
        let (lo, hi) = self.opts.latency;
        self.rng.duration(lo, hi)
    }

    fn schedule(&mut self, base: Instant, msg: Message) {
        let mut at = base + self.latency();
        let reorders = self.faults && !self.opts.reorder_jitter.is_zero();
        if reorders {
            at = at + self.rng.duration(Duration::ZERO, self.opts.reorder_jitter);
        } else {
            at = at.max(self.latest_scheduled + Duration::from_nanos(1));
        }
        if let Origin::Master(_) = msg.origin {
            if !(self.faults && self.opts.cross_epoch_reorder) {
                at = at.max(self.epoch_floor + Duration::from_nanos(1));
            }
        }
        self.latest_scheduled = self.latest_scheduled.max(at);
        self.counter += 1;
        self.queue.insert((at, self.counter), msg);
    }

    /// Loses a master message after publishing, whatever the rules (a send failing, or
    /// libzmq's high-water mark at the tail of a burst): it never arrives.
    pub fn lose_published(&mut self, published: &Published) {
        self.stats.sent += 1;
        self.stats.lost_at_tail += 1;
        self.lose(Origin::Master(published.meta));
    }

    /// Sends a master message through the rules.
    pub fn send(&mut self, now: Instant, published: Published) {
        self.stats.sent += 1;
        let meta = published.meta;
        let mut msg = Message {
            frames: published.frames.into(),
            origin: Origin::Master(meta),
        };
        if self.link != Link::Up || now < self.blackout_until {
            self.stats.lost_unconnected += 1;
            self.lose(msg.origin);
            return;
        }
        let mut base = now;
        if let Some((start, end, drops)) = self.partition {
            if now >= start && now < end {
                if drops {
                    self.stats.dropped += 1;
                    self.lose(msg.origin);
                    return;
                }
                base = end;
            }
        }
        if !self.faults {
            self.schedule(base, msg);
            return;
        }
        let o = &self.opts;
        let (p_drop, p_trunc, p_corrupt, p_topic, p_frames, p_dup) = (
            o.drop,
            o.truncate,
            o.corrupt,
            o.bad_topic,
            o.bad_frame_count,
            o.duplicate,
        );
        let (p_garble, p_late, late_delay) = (o.garble, o.late_copy, o.late_delay);
        if self.rng.chance(p_late) {
            let mut copy = msg.clone();
            if let Origin::Master(m) = &mut copy.origin {
                m.late = true;
            }
            let at = now + self.rng.duration(late_delay.0, late_delay.1);
            self.late.push((at, self.connection, copy));
        }
        if self.rng.chance(p_drop) {
            self.stats.dropped += 1;
            self.lose(msg.origin);
            return;
        }
        let intact = if self.rng.chance(p_trunc) {
            self.stats.truncated += 1;
            truncate(&mut msg.frames, &mut self.rng);
            false
        } else if self.rng.chance(p_garble) {
            self.stats.garbled += 1;
            garble(&mut msg.frames, &mut self.rng);
            false
        } else if self.rng.chance(p_corrupt) {
            self.stats.corrupted += 1;
            let same = corrupt(&mut msg.frames, &mut self.rng);
            if same {
                self.stats.harmless_corruptions += 1;
            }
            same
        } else if self.rng.chance(p_topic) {
            self.stats.bad_topic += 1;
            let len = self.rng.range(1, 8) as usize;
            msg.frames[0] = (0..len).map(|_| self.rng.next_u64() as u8).collect();
            false
        } else if self.rng.chance(p_frames) {
            self.stats.bad_frame_count += 1;
            if self.rng.chance(0.5) {
                msg.frames.pop();
            } else {
                msg.frames.push(b"extra".to_vec());
            }
            false
        } else {
            true
        };
        if !intact {
            self.lose(msg.origin);
            if let Origin::Master(m) = &mut msg.origin {
                m.intact = false;
            }
        }
        if self.rng.chance(p_dup) {
            self.stats.duplicated += 1;
            self.schedule(base, msg.clone());
        }
        self.schedule(base, msg);
    }

    /// Sends a message of another origin (stray publisher, junk); it is subject to the
    /// connection and to latency only.
    pub fn send_other(&mut self, now: Instant, msg: Message) {
        if self.link != Link::Up {
            return;
        }
        self.stats.stray += 1;
        self.schedule(now, msg);
    }

    /// Returns when the network next has something to report.
    pub fn next_at(&self) -> Option<Instant> {
        let deliver = self.queue.keys().next().map(|&(at, _)| at);
        let connecting = match self.link {
            Link::Connecting { at, .. } => at,
            _ => None,
        };
        let disconnect = if self.link == Link::Up {
            self.next_disconnect
        } else {
            None
        };
        let late = if self.link == Link::Up {
            self.late.iter().map(|&(at, _, _)| at).min()
        } else {
            None
        };
        [deliver, connecting, disconnect, self.next_partition, late]
            .into_iter()
            .flatten()
            .min()
    }

    /// Reports the next thing due at `now`, if any (call until `None`).
    pub fn poll(&mut self, now: Instant) -> Option<NetEvent> {
        loop {
            if let Some(at) = self.next_partition.filter(|&at| at <= now) {
                let (lo, hi) = self.opts.partition_len;
                let end = at + self.rng.duration(lo, hi);
                let drops = self.rng.chance(self.opts.partition_drops);
                self.partition = Some((at, end, drops));
                self.stats.partitions += 1;
                self.next_partition = self.after(end, self.opts.partitions_per_sec);
                continue;
            }
            if let Link::Connecting { at: Some(at), ok } = self.link {
                if at <= now {
                    if ok {
                        self.link = Link::Up;
                        self.connection += 1;
                        let (lo, hi) = self.opts.slow_join;
                        if self.faults {
                            let window = self.rng.duration(lo, hi);
                            self.blackout_until = self.blackout_until.max(now + window);
                        }
                        self.next_disconnect = if self.faults {
                            self.after(now, self.opts.disconnects_per_sec)
                        } else {
                            None
                        };
                        return Some(NetEvent::Connected);
                    }
                    self.stats.connect_fails += 1;
                    self.link = Link::Down;
                    return Some(NetEvent::ConnectFailed);
                }
            }
            if self.link == Link::Up && self.next_disconnect.is_some_and(|at| at <= now) {
                self.stats.disconnects += 1;
                self.link = Link::Down;
                self.next_disconnect = None;
                self.drop_in_flight();
                return Some(NetEvent::Disconnected);
            }
            if self.link == Link::Up {
                let due = self.late.iter().position(|&(at, _, _)| at <= now);
                if let Some(i) = due {
                    let (_, connection, msg) = self.late.swap_remove(i);
                    self.stats.late_copies += 1;
                    if connection != self.connection {
                        self.stats.late_after_reconnect += 1;
                    }
                    self.stats.delivered += 1;
                    return Some(NetEvent::Deliver(msg));
                }
            }
            let (&key, _) = self.queue.iter().next()?;
            if key.0 > now {
                return None;
            }
            let msg = self.queue.remove(&key).expect("the first key is there");
            self.stats.delivered += 1;
            return Some(NetEvent::Deliver(msg));
        }
    }
}

#[cfg(test)]
mod tests;
