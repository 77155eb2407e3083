//! hicache-index: which leading pages of a request are fully present in a Mooncake store.
//!
//! SGLang HiCache keeps KV pages in a shared Mooncake store ("L3"), one logical page as several
//! physical objects. The Mooncake master publishes an event for every object stored or removed.
//! This crate turns that event stream into an index a router can ask, in microseconds and
//! without a network call: for these tokens, how many leading pages are fully present?
//!
//! The rule above all: **never claim a page that is not there.** Every lost event, gap,
//! restart, unknown input or doubt degrades to misses, visibly (counters, [`Health`]), never
//! to false hits.
//!
//! The crate is `no_std` + `alloc` and sans-IO: it reads no clock, opens no socket and starts
//! no thread. A driver (the `hicache-index-tokio` or `hicache-index-smol` transports, or your
//! own) feeds it messages and times and executes the [`Command`]s it returns.
//!
//! # The flow
//! ```text
//! ingest:  frames --decode--> Batch --sequence--> applied batches --index--> pages  (+ Effects out)
//! query:   tokens --page hashes (lazy)--> probe per page --> Hits (prefix, map, trust)
//! time:    poll_timeout() -> deadline; the driver sleeps until then; handle(now, Timeout)
//! ```
//!
//! # Glossary
//! - **Object**: one physical Mooncake key (`{P}_{H}{S}`); **page**: the objects of one page
//!   hash `H` that a layout expects; a page is *present* when all of them are.
//! - **Namespace**: one `(tenant, key prefix)` pair of the index ([`index`]).
//! - **Run**: one process of the master, numbering its **batches** (the sequence) and events
//!   (the event id) from 1; a **restart** is always the master's: it begins another run (the
//!   driver connecting again after a stop is [`Input::Resume`]).
//! - **Unawaited answer**: an answer to a request the session no longer waits for (counted,
//!   ignored).
//! - **Position**, **status point** ([`Watermark`]), **copy**, **twin**, **held**: the stream's
//!   terms, defined once with its numbered rules R1-R11 in [`sequence`].
//! - **Forget**: the index drops what the stream taught it ([`ClearReason`]); **resync**: a key
//!   list read to fill it again (misses meanwhile, [`Health::Recovering`]).
//! - **Reconcile**: a key list read while the index keeps answering, then brought into it
//!   exactly ([`Health::Reconciling`]); asked for by the master's **signals**
//!   ([`signals`]) or by verification.
//! - **Verification**: rounds asking the master about a sample of the index's objects; a
//!   **stale** object is one the index holds that the master no longer has (no event said so).
//! - **Suspect**: an object one medium's removal made absent until the master confirms it.
//! - **Trust**: the health every answer carries ([`Health`]).
//! - HA: the **leader** is the master that serves, named in etcd ([`leader`]).

//! # Residency per medium
//! The master publishes `stored` once per medium an object lands on (`cpu`, `disk`) and
//! `removed` when a medium loses it. What a `removed` means depends on the publisher: current
//! ones (PR 2876 on) take away **that medium only**; older ones (PR 2214) sent it only when no
//! replica was left, naming `cpu` even when the last replica was on disk. The event says
//! neither which publisher sent it nor what the master still holds. The rule:
//! - The index keeps, per object, the media the stream showed; a `stored`
//!   without a medium marks an absent object present in memory and adds nothing to a present
//!   one.
//! - **A removal never leaves its object present**. When the stream
//!   had shown the object on the other medium too, it becomes a *suspect*: it misses, and the
//!   next verification round ([`VerifyConfig`]) asks the master about it first. A suspect comes
//!   back (on the medium that may hold it: a disk-only hit) only when the answer was read after
//!   the removal (keys sampled at a later write stamp) and no event touched the object since; a
//!   later `stored` brings it back at once, a later `removed` or a `cleared` of its tenant ends
//!   it, an answer "absent" ends it without counting it stale.
//! - `cleared` forgets its tenant's objects on every medium, suspects included.
//!
//! Why this never claims a page that is not there: an object is present in the index only on
//! positive evidence later than anything that removed it — a `stored` event, a key in a
//! snapshot, or a verification answer read after the removal. Under an older publisher a
//! suspect is truly gone and its answer says so; under a current one it is on disk and its
//! answer brings it back. Any event about the object after the answer was read reaches the
//! session after the answer's point and still applies. The cost: a page whose memory copy goes
//! misses until one verification round (`interval` plus the answer) confirms it; without
//! verification it misses until it is stored again or a resync lists it. The suspect table is
//! bounded (one suspect page per 64 pages of capacity); a suspect it cannot hold stays absent
//! and is counted ([`index::IndexCounters::suspects_dropped`]).
//!
//! # The driving contract
//! Everything that happens reaches the session as an [`Input`], through one method,
//! [`Session::handle`]`(now, input)`, which returns the [`Effects`] of that input: each is a
//! [`Command`] the driver MUST execute, or a [`Report`] it may log or count.
//! 1. Make a [`Session`] from a [`Config`]. With an endpoint configured, [`Session::poll_timeout`]
//!    is due at once and [`Input::Timeout`] returns [`Command::Connect`].
//! 2. Execute every command in order: connect or disconnect the SUB socket, fetch a snapshot
//!    or verify keys over the master's HTTP side, and hand the outcome back:
//!    [`Input::Connected`], [`Input::Disconnected`], [`Input::Snapshot`] (or in chunks),
//!    [`Input::SnapshotFailed`], [`Input::VerifyResult`] or [`Input::VerifyFailed`]. Following
//!    an HA leader ([`Config::leader`]), also hand every value of the master view key over as
//!    [`Input::LeaderView`], check the leader on [`Command::CheckLeader`]
//!    ([`Input::LeaderStatus`]) and point the HTTP side at it on [`Command::UseMaster`].
//! 3. Hand every received multipart message over as [`Input::Message`] with the current time.
//! 4. Sleep until the next message or until [`Session::poll_timeout`], then hand over
//!    [`Input::Timeout`]; an early one is a no-op.
//! 5. Ask [`Session::query`] (`&self`) at any time in between, or hand [`Session::reader`] to
//!    query threads; [`Session::status`] says where the session is (health, counters) and
//!    [`Session::models`] which layout each model uses. A driver handing a key list over in
//!    chunks SHOULD drop it once [`SessionStatus::snapshot`] no longer names it.
//!
//! # Features
//! - `internals`: makes the index's writer side (`Index::standalone`, `store_object`,
//!   `remove_object`) for the benches and tests that measure the index alone. It switches
//!   visibility only, never behaviour; a driver or a router needs none of it (the core's own
//!   benches get it through their dev-dependency on the simulator).
//!
//! # Example
//! A master stored both objects of one page (TP 1, page size 4); the router asks about ten
//! tokens, two full pages, of which the first is present. The loop below is a whole driver,
//! with the socket and the clock played by a list of what happens:
//! ```
//! use hicache_index::{
//!     Command, Config, Effect, Health, Input, Instant, Layout, Lookup, ModelLayout, Session,
//!     SglangParams,
//! };
//!
//! let layout = Layout::from_sglang(&SglangParams::new(4, 1)).unwrap();
//! let mut session = Session::new(Config {
//!     endpoint: Some("tcp://127.0.0.1:5557".into()),
//!     layouts: vec![ModelLayout { model: None, layout }],
//!     ..Config::default()
//! })
//! .unwrap();
//!
//! // What happens, in order: time starts; the socket connects; one message from the master,
//! // [topic, seq, payload].
//! let payload = include_bytes!("../tests/fixtures/stored_k_v_seq1.msgpack");
//! let seq = 1u64.to_be_bytes();
//! let message: [&[u8]; 3] = [b"", &seq, payload];
//! let mut connected = None;
//! assert_eq!(session.poll_timeout(), Some(Instant::ZERO));
//! let happenings = [
//!     (Instant::ZERO, Input::Timeout),
//!     (Instant::ZERO, Input::Connected),
//!     (Instant::from_millis(1), Input::Message(&message)),
//! ];
//! for (now, input) in happenings {
//!     for effect in session.handle(now, input) {
//!         match effect {
//!             Effect::Command(Command::Connect { endpoint }) => connected = Some(endpoint),
//!             Effect::Command(other) => panic!("no HTTP side in this example: {other:?}"),
//!             Effect::Report(report) => println!("{report:?}"),
//!         }
//!     }
//! }
//! assert_eq!(connected.as_deref(), Some("tcp://127.0.0.1:5557"));
//! assert_eq!(session.status(Instant::from_millis(1)).health, Health::Live);
//!
//! let tokens: Vec<u32> = (1..=10).collect();
//! let hits = session.query(&Lookup::tokens(&tokens)).unwrap();
//! assert_eq!((hits.prefix_pages, hits.total_pages, hits.trust), (1, 2, Health::Live));
//! ```
#![no_std]
#![forbid(unsafe_code)]

extern crate alloc;
#[cfg(test)]
extern crate std;

pub mod effect;
pub mod error;
pub mod frame;
pub mod hash;
pub mod index;
pub mod input;
pub mod layout;
pub mod leader;
pub mod metrics;
pub mod query;
pub mod reader;
pub mod sequence;
pub mod session;
pub mod signals;
pub mod snapshot;
pub mod time;

pub use effect::{
    ClearReason, Command, Effect, Effects, Health, Recovering, Report, ResyncFailure, StrayReason,
};
pub use error::{ConfigError, QueryError};
pub use frame::{
    decode, Batch, Event, EventKind, FrameError, Medium, PayloadError, Seq, Timestamp,
};
pub use hash::{DigestMemo, Namespace, NoMemo, PageHash, PageHashes, Token};
pub use index::{Index, IndexConfig, DEFAULT_TENANT};
pub use input::{
    Input, LeaderRequest, SignalsRequest, SnapshotRequest, StatusRequest, VerifyRequest,
};
pub use layout::{parse_object_key, HitPolicy, Layout, LayoutError, ObjectKey, Pool, SglangParams};
pub use leader::{EventsStatus, LeaderConfig, LeaderInfo, LeaderStatus, LeaderView};
pub use metrics::{Counters, Kind};
pub use query::{Hits, Lookup, MapCover, Pages, Tokens};
pub use reader::{Query, Reader};
pub use sequence::ReorderConfig;
pub use session::{
    BackoffConfig, Config, ModelLayout, Models, ResyncConfig, Session, SessionStatus,
    SnapshotProgress, VerifyConfig, Watermark, WorkerInfo,
};
pub use signals::StoreSignals;
pub use snapshot::snapshot_lines;
pub use time::Instant;
