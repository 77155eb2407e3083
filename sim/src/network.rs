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

use hicache_index::{decode, Instant};

use crate::master::Published;
use crate::options::NetworkOptions;
use crate::rng::Rng;

/// What the receiver knows about where a message came from (never shown to the session).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Origin {
    /// The master's publisher.
    Master(MasterMeta),
    /// Another publisher on the same socket, with another topic.
    Stray,
    /// Messages with a wrong number of frames.
    Junk,
}

/// A master message's identity and fate.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct MasterMeta {
    /// The message's number over the whole run ([`Published::id`]).
    pub id: u64,
    /// The master's restart count.
    pub epoch: u32,
    /// The sequence sent.
    pub seq: u64,
    /// History position of the first event.
    pub first_pos: u64,
    /// History position of the last event.
    pub last_pos: u64,
    /// The event id of its first event.
    pub first_event_id: u64,
    /// How many events it holds.
    pub events: usize,
    /// The message still decodes to the batch that was sent.
    pub intact: bool,
    /// A late copy: delivered long after the message, across reconnects and clears.
    pub late: bool,
}

/// One multipart message in flight.
#[derive(Clone, Debug)]
pub struct Message {
    /// The frames.
    pub frames: Vec<Vec<u8>>,
    /// Where it came from.
    pub origin: Origin,
}

/// What the network reports to the driver.
#[derive(Clone, Debug)]
pub enum NetEvent {
    /// A message arrives.
    Deliver(Message),
    /// The connect asked for succeeded.
    Connected,
    /// The connect asked for failed.
    ConnectFailed,
    /// The connection broke.
    Disconnected,
}

/// Counts of what the network did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NetStats {
    /// Master messages handed to the network.
    pub sent: u64,
    /// Messages delivered (all origins, copies included).
    pub delivered: u64,
    /// Master messages dropped by the drop rule.
    pub dropped: u64,
    /// Extra copies delivered.
    pub duplicated: u64,
    /// Payloads truncated.
    pub truncated: u64,
    /// Messages corrupted.
    pub corrupted: u64,
    /// Corruptions that decoded to the same batch (harmless).
    pub harmless_corruptions: u64,
    /// Topics damaged.
    pub bad_topic: u64,
    /// Frame counts damaged.
    pub bad_frame_count: u64,
    /// Connections broken.
    pub disconnects: u64,
    /// Partitions.
    pub partitions: u64,
    /// Master messages lost with the connection, or sent while not connected or in a
    /// slow-joiner or reconnect window.
    pub lost_unconnected: u64,
    /// Messages from the stray publisher and junk.
    pub stray: u64,
    /// Connects that failed.
    pub connect_fails: u64,
    /// Connects that never answered.
    pub connect_hangs: u64,
    /// Payloads replaced by undecodable ones (topic and sequence intact).
    pub garbled: u64,
    /// Late copies delivered.
    pub late_copies: u64,
    /// Late copies delivered on a later connection than the one their message was sent on.
    pub late_after_reconnect: u64,
    /// Master restarts the transport saw (the connection broke at them).
    pub seen_restarts: u64,
    /// Master messages lost at the tail of a burst ([`Network::lose_published`]).
    pub lost_at_tail: u64,
}

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
        self.lose(Origin::Master(meta_of(published)));
    }

    /// Sends a master message through the rules.
    pub fn send(&mut self, now: Instant, published: Published) {
        self.stats.sent += 1;
        let meta = meta_of(&published);
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

/// What the receiver will know of a message the master published.
fn meta_of(published: &Published) -> MasterMeta {
    MasterMeta {
        id: published.id,
        epoch: published.epoch,
        seq: published.seq,
        first_pos: published.first_pos,
        last_pos: published.last_pos,
        first_event_id: published.first_event_id,
        events: published.events,
        intact: true,
        late: false,
    }
}

/// Cuts the payload short (always rejected: msgpack containers announce their length).
fn truncate(frames: &mut [Vec<u8>], rng: &mut Rng) {
    if let Some(payload) = frames.get_mut(2) {
        let keep = rng.index(payload.len());
        payload.truncate(keep);
    }
}

/// Replaces the payload by one that does not decode (valid msgpack of the wrong shape, or bytes
/// that are not msgpack), keeping the topic and the sequence frame: a batch whose sequence was
/// consumed and whose events are unknown.
fn garble(frames: &mut [Vec<u8>], rng: &mut Rng) {
    if frames.len() < 3 {
        return;
    }
    let candidates: [&[u8]; 5] = [
        // [ts, "events", 0]: the events are a string.
        &[0x93, 0x01, 0xa6, b'e', b'v', b'e', b'n', b't', b's', 0x00],
        // [ts, [1, 2], 0]: events that are not maps.
        &[0x93, 0x01, 0x92, 0x01, 0x02, 0x00],
        // A map, not an array.
        &[0x81, 0xa1, b'k', 0x01],
        // Reserved marker bytes.
        &[0xc1, 0xc1, 0xc1],
        // Nothing at all.
        &[],
    ];
    let pick = candidates[rng.index(candidates.len())];
    if decode(&[&frames[0], &frames[1], pick]).is_err() {
        frames[2] = pick.to_vec();
    } else {
        truncate(frames, rng);
    }
}

/// Damages a message; returns whether it still decodes to the same batch. A damage that decodes
/// to a different batch is replaced by a truncation (see the module docs).
fn corrupt(frames: &mut [Vec<u8>], rng: &mut Rng) -> bool {
    if rng.chance(0.2) {
        // A sequence frame of the wrong length.
        let len = [0usize, 1, 4, 7, 9, 16][rng.index(6)];
        frames[1] = vec![0x5a; len];
        return false;
    }
    let original = frames[2].clone();
    let flips = rng.range(1, 3);
    for _ in 0..flips {
        if frames[2].is_empty() {
            break;
        }
        let i = rng.index(frames[2].len());
        frames[2][i] ^= 1 << rng.below(8);
    }
    let verdict = {
        let before = decode(&[&frames[0], &frames[1], &original]);
        let after = decode(&[&frames[0], &frames[1], &frames[2]]);
        match (before, after) {
            (_, Err(_)) => Some(false),
            (Ok(a), Ok(b)) if a == b => Some(true),
            _ => None,
        }
    };
    match verdict {
        Some(same) => same,
        None => {
            frames[2] = original;
            truncate(frames, rng);
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::master::{Action, Master, MasterOutput};
    use crate::options::{Options, Preset};

    fn published(n: usize) -> Vec<Published> {
        let o = Options::for_seed(9, Some(Preset::Calm), 100);
        let mut m = Master::new(o.master.clone(), o.model_specs(), Rng::new(9));
        let mut out = MasterOutput::default();
        let mut now = Instant::ZERO;
        while out.published.len() < n {
            m.act(now, Action::Put, &mut out);
            now = now + Duration::from_millis(5);
            m.step(now, &mut out);
        }
        out.published
    }

    #[test]
    fn corruption_never_delivers_a_different_valid_batch() {
        let mut rng = Rng::new(1);
        for p in published(20) {
            for _ in 0..50 {
                let mut frames: Vec<Vec<u8>> = p.frames.to_vec();
                let same = corrupt(&mut frames, &mut rng);
                let got = decode(&[&frames[0], &frames[1], &frames[2]]);
                let want = decode(&[&p.frames[0], &p.frames[1], &p.frames[2]]).unwrap();
                match got {
                    Ok(b) => assert!(same && b == want),
                    Err(_) => assert!(!same),
                }
            }
        }
    }

    #[test]
    fn only_a_restart_the_transport_sees_breaks_the_connection() {
        let o = Options::for_seed(3, Some(Preset::Calm), 100);
        let mut net = Network::new(o.network.clone(), Rng::new(3));
        net.set_faults(Instant::ZERO, false);
        net.connect(Instant::ZERO);
        let mut now = Instant::ZERO;
        while !matches!(net.poll(now), Some(NetEvent::Connected)) {
            now = net.next_at().unwrap();
        }
        let up = now + Duration::from_millis(10);
        net.master_restarted(now, up, false);
        assert!(
            net.poll(now).is_none() && net.is_up(),
            "ZeroMQ reconnects underneath"
        );
        net.master_restarted(now, up, true);
        assert!(matches!(net.poll(now), Some(NetEvent::Disconnected)));
        assert!(!net.is_up());
        assert_eq!(net.stats().seen_restarts, 1);
    }

    #[test]
    fn without_reorder_delivery_is_first_in_first_out() {
        let o = Options::for_seed(3, Some(Preset::Calm), 100);
        let mut net = Network::new(o.network.clone(), Rng::new(3));
        net.connect(Instant::ZERO);
        let mut now = Instant::ZERO;
        while !matches!(net.poll(now), Some(NetEvent::Connected)) {
            now = net.next_at().unwrap();
        }
        for p in published(30) {
            net.send(now, p);
            now = now + Duration::from_micros(10);
        }
        let mut seqs = Vec::new();
        while let Some(at) = net.next_at() {
            now = now.max(at);
            if let Some(NetEvent::Deliver(m)) = net.poll(now) {
                if let Origin::Master(meta) = m.origin {
                    seqs.push(meta.seq);
                }
            }
        }
        assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");
        assert_eq!(seqs.len(), 30);
    }
}
