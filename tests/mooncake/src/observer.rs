//! A bystander on the event stream: a plain ZeroMQ SUB socket on its own thread that counts what
//! the master published (sequence numbers, gaps, batch sizes, publisher-to-subscriber lag),
//! independently of any index, so that scenarios can hold an index's counters against it.
//!
//! It lets libzmq reconnect by itself (every 100 ms), so it follows a master that restarts on
//! the same port, and keeps a large receive queue, so that it does not drop on its side.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{SystemTime, UNIX_EPOCH};

use hicache_index::{decode, EventKind, Timestamp};

/// The receive high-water mark of the SUB socket, in messages: large, so that libzmq does not
/// drop on our side.
const RECEIVE_HWM: i32 = 1_000_000;

/// What the stream showed, counted from the raw frames.
#[derive(Clone, Debug, Default)]
pub struct StreamStats {
    /// Messages received (any shape).
    pub messages: u64,
    /// Events in messages that decoded.
    pub events: u64,
    /// `stored` events among them.
    pub stored: u64,
    /// `removed` events among them.
    pub removed: u64,
    /// The first sequence number received.
    pub first_seq: Option<u64>,
    /// The last sequence number received.
    pub last_seq: Option<u64>,
    /// Forward jumps of the sequence (`seq > last + 1`).
    pub gaps: u64,
    /// Sequence numbers skipped by those jumps.
    pub missing: u64,
    /// Sequences that went backwards or repeated (a new master, or a duplicate).
    pub backwards: u64,
    /// The most events in one batch.
    pub max_batch_events: usize,
    /// Sum of (arrival wall time − batch timestamp) over batches, in milliseconds.
    pub lag_ms_sum: i64,
    /// The largest such lag, in milliseconds.
    pub lag_ms_max: i64,
}

impl StreamStats {
    /// The mean publisher-to-subscriber lag per batch, in milliseconds.
    pub fn mean_lag_ms(&self) -> f64 {
        if self.messages == 0 {
            0.0
        } else {
            self.lag_ms_sum as f64 / self.messages as f64
        }
    }

    /// Counts one message.
    pub fn observe(&mut self, frames: &[&[u8]]) {
        self.messages += 1;
        if let Some(seq) = frames.get(1).and_then(|f| <[u8; 8]>::try_from(*f).ok()) {
            let seq = u64::from_be_bytes(seq);
            self.first_seq.get_or_insert(seq);
            match self.last_seq {
                Some(last) if seq > last + 1 => {
                    self.gaps += 1;
                    self.missing += seq - last - 1;
                }
                Some(last) if seq <= last => self.backwards += 1,
                _ => {}
            }
            self.last_seq = Some(seq);
        }
        if let Ok(batch) = decode(frames) {
            self.events += batch.events.len() as u64;
            for e in &batch.events {
                match e.kind {
                    EventKind::Stored => self.stored += 1,
                    EventKind::Removed => self.removed += 1,
                    _ => {}
                }
            }
            self.max_batch_events = self.max_batch_events.max(batch.events.len());
            if let Timestamp::Millis(ms) = batch.timestamp {
                let wall = SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map_or(0, |d| d.as_millis() as i64);
                let lag = wall - ms as i64;
                self.lag_ms_sum += lag;
                self.lag_ms_max = self.lag_ms_max.max(lag);
            }
        }
    }
}

/// A SUB socket counting the stream on its own thread until dropped.
#[derive(Debug)]
pub struct Observer {
    stats: Arc<Mutex<StreamStats>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Observer {
    /// Subscribes to every topic of `endpoint` (a connect that waits for a publisher is fine).
    pub fn start(endpoint: &str) -> Observer {
        let ctx = zmq::Context::new();
        let sub = ctx.socket(zmq::SUB).expect("a SUB socket");
        sub.set_linger(0).expect("linger");
        sub.set_rcvhwm(RECEIVE_HWM).expect("rcvhwm");
        sub.set_reconnect_ivl(100).expect("reconnect interval");
        sub.set_subscribe(b"").expect("subscribe");
        sub.connect(endpoint).expect("connect the observer");
        let stats = Arc::new(Mutex::new(StreamStats::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (stats, stop) = (Arc::clone(&stats), Arc::clone(&stop));
            std::thread::spawn(move || {
                let _ctx = ctx;
                while !stop.load(Ordering::Relaxed) {
                    match sub.poll(zmq::POLLIN, 10) {
                        Ok(n) if n > 0 => {}
                        _ => continue,
                    }
                    while let Ok(parts) = sub.recv_multipart(zmq::DONTWAIT) {
                        let frames: Vec<&[u8]> = parts.iter().map(Vec::as_slice).collect();
                        stats.lock().expect("stats").observe(&frames);
                    }
                }
            })
        };
        Observer {
            stats,
            stop,
            thread: Some(thread),
        }
    }

    /// What the stream showed so far.
    pub fn stats(&self) -> StreamStats {
        self.stats.lock().expect("stats").clone()
    }

    /// Messages received so far.
    pub fn messages(&self) -> u64 {
        self.stats.lock().expect("stats").messages
    }
}

impl Drop for Observer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
