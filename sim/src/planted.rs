//! Deliberately broken sessions, one per class of false hit the simulator must find by itself:
//! each wraps a real [`Session`] and undoes one of its defences by rewriting what it is fed.
//! The default sweep must catch every one of them (see `sim/tests/planted_bug.rs` and the CI
//! sweep); [`crate::GapBlindSession`] is the first of the kind.

use std::collections::BTreeMap;

use hicache_index::{
    decode, Config, ConfigError, Effects, EventKind, Input, Instant, Medium, Seq, Session,
    SnapshotRequest, Timestamp, Watermark,
};
use hicache_index_shortcuts::Shortcuts;
use hicache_index_wire::{encode_payload, MasterFlavor, OwnedBatch};

use crate::options::Options;
use crate::system::System;
use crate::world::Report;

/// The defence a [`PlantedBug`] undoes.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Bug {
    /// Blind to event ids: ids are stripped and sequences renumbered so that a restart (a
    /// sequence and an event id going back) looks like the next batch.
    RestartBlind,
    /// Snapshot lines are trimmed (spaces, `\r`) and blank ones skipped, so `"<key> "`,
    /// `"<key>\r"` and the second half of `"x\n<key>"` become keys.
    TrimmedSnapshotLines,
    /// A batch whose payload does not decode (topic and sequence intact) is dropped instead of
    /// fed, so its sequence is never seen as consumed.
    UndecodableDropped,
    /// Events of an unknown type without an object key are dropped (rewritten into events about
    /// a key no layout parses, so the event ids still run on).
    UnknownKeylessDropped,
    /// A late copy (a batch older than the newest seen, not a duplicate of it) is taken as the
    /// next batch, as a session that resets its tracker after a reconnect or a clear takes it as
    /// a baseline: its stores come back on top of newer state.
    LateCopyAsNext,
    /// The watermark's event count (`published_events`) is ignored.
    WatermarkEventsIgnored,
    /// A `removed` of one medium from an object the stream showed on the other medium too is
    /// read as keeping that medium, without proof (rewritten into an event about a key no layout
    /// parses, so the object stays): an older master's `removed` meant "no replica left".
    MediumKeptWithoutProof,
    /// Each layout keeps only its first pool: a hybrid model's side pools (Mamba and SWA states
    /// with trailing holes, indexers, drafts) are no longer demanded.
    SidePoolsIgnored,
}

impl Bug {
    /// Returns the name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Bug::RestartBlind => "restart-blind",
            Bug::TrimmedSnapshotLines => "trimmed-snapshot-lines",
            Bug::UndecodableDropped => "undecodable-dropped",
            Bug::UnknownKeylessDropped => "unknown-keyless-dropped",
            Bug::LateCopyAsNext => "late-copy-as-next",
            Bug::WatermarkEventsIgnored => "watermark-events-ignored",
            Bug::MediumKeptWithoutProof => "medium-kept-without-proof",
            Bug::SidePoolsIgnored => "side-pools-ignored",
        }
    }

    /// Parses a command-line name.
    pub fn from_name(name: &str) -> Option<Bug> {
        Bug::ALL.into_iter().find(|b| b.name() == name)
    }

    /// Runs one seed's options against the session with this bug, a panic becoming a failure.
    pub fn run(self, options: &Options) -> Report {
        let run = || {
            let sut = PlantedBug::new(options.session_config(), self).expect("a valid config");
            crate::world::run_with(options, sut)
        };
        std::panic::catch_unwind(run).unwrap_or_else(|_| Report {
            options: options.clone(),
            stats: crate::world::RunStats::default(),
            failures: vec![crate::world::Failure {
                at: Instant::ZERO,
                kind: crate::world::FailureKind::Panic,
                detail: "the planted session panicked".into(),
            }],
            transcript: 0,
        })
    }

    /// Every planted bug.
    pub const ALL: [Bug; 8] = [
        Bug::RestartBlind,
        Bug::TrimmedSnapshotLines,
        Bug::UndecodableDropped,
        Bug::UnknownKeylessDropped,
        Bug::LateCopyAsNext,
        Bug::WatermarkEventsIgnored,
        Bug::MediumKeptWithoutProof,
        Bug::SidePoolsIgnored,
    ];
}

/// A real session with one defence undone (see [`Bug`]).
#[derive(Debug)]
pub struct PlantedBug {
    inner: Session,
    bug: Bug,
    topic: Vec<u8>,
    /// Renumbering: out sequence = in sequence + `seq_offset`, out id = in id + `id_offset`.
    seq_offset: i128,
    id_offset: i128,
    newest_in: Option<u64>,
    last_out: u64,
    last_out_id: u64,
    last_in_id: u64,
    newest_stamp: Timestamp,
    /// The media the stream showed per `(tenant, key)` (bit 1 memory, bit 2 disk).
    media: BTreeMap<(String, String), u8>,
}

/// The bit of a medium in [`PlantedBug::media`] (`None` and other media count as memory).
fn medium_bit(medium: Option<Medium>) -> u8 {
    match medium {
        Some(Medium::Disk) => 2,
        _ => 1,
    }
}

impl PlantedBug {
    /// Wraps a real session made from `config`.
    pub fn new(mut config: Config, bug: Bug) -> Result<PlantedBug, ConfigError> {
        if bug == Bug::SidePoolsIgnored {
            for model in &mut config.layouts {
                model.layout.pools.truncate(1);
            }
        }
        let topic = config.topic.clone();
        Ok(PlantedBug {
            inner: Session::new(config)?,
            bug,
            topic,
            seq_offset: 0,
            id_offset: 0,
            newest_in: None,
            last_out: 0,
            last_out_id: 0,
            last_in_id: 0,
            newest_stamp: Timestamp::Nil,
            media: BTreeMap::new(),
        })
    }

    /// Drops the `removed` events that take one medium from an object also seen on the other.
    fn keep_other_medium(&mut self, now: Instant, frames: &[&[u8]]) -> Effects {
        let Ok(batch) = decode(frames) else {
            return self.inner.feed(now, frames);
        };
        let mut owned = OwnedBatch::from(&batch);
        let mut rewritten = false;
        for e in &mut owned.events {
            let tenant = e.tenant_id.clone().unwrap_or_else(|| "default".into());
            match (e.kind, e.object_key.clone()) {
                (EventKind::Stored, Some(key)) => {
                    *self.media.entry((tenant, key)).or_insert(0) |= medium_bit(e.medium);
                }
                (EventKind::Removed | EventKind::Unknown, Some(key)) => {
                    let id = (tenant, key);
                    let had = self.media.remove(&id).unwrap_or(0);
                    let left = match e.medium {
                        Some(m) if e.kind == EventKind::Removed => had & !medium_bit(Some(m)),
                        _ => 0,
                    };
                    if left != 0 {
                        self.media.insert(id, left);
                        e.kind = EventKind::Stored;
                        e.object_key = Some("planted: not a key".into());
                        rewritten = true;
                    }
                }
                (EventKind::Cleared, _) => match &e.tenant_id {
                    Some(t) => self.media.retain(|(tenant, _), _| tenant != t),
                    None => self.media.clear(),
                },
                _ => {}
            }
        }
        if rewritten {
            self.feed_owned(now, frames[0], &owned)
        } else {
            self.inner.feed(now, frames)
        }
    }

    fn ours(&self, frames: &[&[u8]]) -> bool {
        frames.len() == 3 && frames[0] == self.topic && frames[1].len() == 8
    }

    /// Feeds a rewritten batch.
    /// Feeds one message through the planted bug.
    fn feed(&mut self, now: Instant, frames: &[&[u8]]) -> Effects {
        if !self.ours(frames) {
            return self.inner.feed(now, frames);
        }
        match self.bug {
            Bug::RestartBlind | Bug::LateCopyAsNext => self.renumber(now, frames),
            Bug::UndecodableDropped if decode(frames).is_err() => Effects::new(),
            Bug::MediumKeptWithoutProof => self.keep_other_medium(now, frames),
            Bug::UnknownKeylessDropped => {
                let Ok(batch) = decode(frames) else {
                    return self.inner.feed(now, frames);
                };
                let unknown =
                    |k: EventKind, key: Option<&str>| k == EventKind::Unknown && key.is_none();
                if !batch.events.iter().any(|e| unknown(e.kind, e.object_key)) {
                    return self.inner.feed(now, frames);
                }
                let mut owned = OwnedBatch::from(&batch);
                for e in &mut owned.events {
                    if unknown(e.kind, e.object_key.as_deref()) {
                        e.kind = EventKind::Stored;
                        e.object_key = Some("planted: not a key".into());
                    }
                }
                self.feed_owned(now, frames[0], &owned)
            }
            _ => self.inner.feed(now, frames),
        }
    }
    /// Hands a snapshot over through the planted bug.
    fn snapshot(
        &mut self,
        now: Instant,
        request: SnapshotRequest,
        watermark: Option<Watermark>,
        lines: &[&[u8]],
    ) -> Effects {
        let trimmed: Vec<&[u8]>;
        let (watermark, lines) = match self.bug {
            Bug::TrimmedSnapshotLines => {
                trimmed = lines
                    .iter()
                    .map(|l| l.trim_ascii())
                    .filter(|l| !l.is_empty())
                    .collect();
                (watermark, &trimmed[..])
            }
            Bug::RestartBlind | Bug::LateCopyAsNext => {
                // The inner session counts renumbered sequences and ids.
                let watermark = watermark.map(|w| Watermark {
                    seq: Seq((i128::from(w.seq.0) + self.seq_offset).max(0) as u64),
                    events: w
                        .events
                        .map(|e| (i128::from(e) + self.id_offset).max(0) as u64),
                });
                (watermark, lines)
            }
            Bug::WatermarkEventsIgnored => {
                let watermark = watermark.map(|w| Watermark { events: None, ..w });
                (watermark, lines)
            }
            _ => (watermark, lines),
        };
        self.inner.handle(
            now,
            Input::Snapshot {
                request,
                watermark,
                lines,
            },
        )
    }

    fn feed_owned(&mut self, now: Instant, topic: &[u8], batch: &OwnedBatch) -> Effects {
        let payload = encode_payload(batch, MasterFlavor::Release0314);
        let seq = batch.seq.0.to_be_bytes();
        self.inner.feed(now, &[topic, &seq, &payload])
    }

    fn renumber(&mut self, now: Instant, frames: &[&[u8]]) -> Effects {
        let Ok(batch) = decode(frames) else {
            return self.inner.feed(now, frames);
        };
        let mut owned = OwnedBatch::from(&batch);
        let seq = batch.seq.0;
        let first_id = batch.events.iter().find_map(|e| e.event_id);
        let n = owned.events.len() as u64;
        let newest = self.newest_in.unwrap_or(0);
        let older = self.newest_in.is_some_and(|s| seq < s);
        let out = match self.bug {
            Bug::RestartBlind if older && first_id.is_some_and(|id| id <= self.last_in_id) => {
                // A restart: continue the numbering.
                self.seq_offset = i128::from(self.last_out) + 1 - i128::from(seq);
                self.newest_in = Some(seq);
                self.last_out + 1
            }
            Bug::LateCopyAsNext if older => {
                // Taken as the next batch, as fresh as the newest (a tracker reset forgets the
                // stream's clock too); the newer ones shift by one.
                let out = self.last_out + 1;
                owned.seq = Seq(out);
                owned.timestamp = self.newest_stamp;
                self.seq_offset += 1;
                for (e, id) in owned.events.iter_mut().zip(self.last_out_id + 1..) {
                    e.event_id = Some(id);
                }
                self.id_offset += n as i128;
                self.last_out = out;
                self.last_out_id += n;
                return self.feed_owned(now, frames[0], &owned);
            }
            _ => {
                if seq >= newest {
                    self.newest_in = Some(seq);
                }
                (i128::from(seq) + self.seq_offset).max(0) as u64
            }
        };
        if let Some(id) = owned.events.iter().filter_map(|e| e.event_id).max() {
            self.last_in_id = id;
        }
        if let Timestamp::Millis(new) = owned.timestamp {
            if !matches!(self.newest_stamp, Timestamp::Millis(old) if old >= new) {
                self.newest_stamp = owned.timestamp;
            }
        }
        for e in &mut owned.events {
            e.event_id = match self.bug {
                Bug::RestartBlind => None,
                _ => e
                    .event_id
                    .map(|id| (i128::from(id) + self.id_offset).max(0) as u64),
            };
        }
        if let Some(id) = owned.events.iter().filter_map(|e| e.event_id).max() {
            self.last_out_id = self.last_out_id.max(id);
        }
        self.last_out = self.last_out.max(out);
        owned.seq = Seq(out);
        self.feed_owned(now, frames[0], &owned)
    }
}

impl System for PlantedBug {
    fn handle(&mut self, now: Instant, input: Input<'_>) -> Effects {
        match input {
            Input::Message(frames) => self.feed(now, frames),
            Input::Snapshot {
                request,
                watermark,
                lines,
            } => self.snapshot(now, request, watermark, lines),
            other => self.inner.handle(now, other),
        }
    }
    fn session(&self) -> &Session {
        &self.inner
    }
}
