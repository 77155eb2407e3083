//! The driver's observer (issue 16: `watch` runs on the one loop): it sees each call into the
//! session with what it returned, and its request to stop ends the loop with nothing fed after
//! it (against the emulated master on loopback).

use std::ops::ControlFlow;

use hicache_index::{Command, Config, Effect, Instant};
use hicache_index_driver::run::run;
use hicache_index_driver::{
    prepare_observed, LinkChange, Observed, Observer, Parts, SubscriberConfig,
};
use hicache_index_testkit::{wait_subscribed, EmulatorPeer, Peer, PATIENCE};
use hicache_index_tokio::Tokio;

/// What the recorder saw, in order.
#[derive(Debug, PartialEq, Eq)]
enum Seen {
    /// Effects with a `Command::Connect`.
    Connect,
    /// The link's handshake succeeded.
    Connected,
    /// A message: its frame count and whether it carries the key `stop-here`.
    Message { frames: usize, stop: bool },
}

/// Records what it sees and asks the loop to stop at the message that stores `stop-here`.
#[derive(Default)]
struct Recorder {
    seen: Vec<Seen>,
}

impl Observer for Recorder {
    fn observe(&mut self, _: Instant, seen: Observed<'_>) -> ControlFlow<()> {
        match seen {
            Observed::Message { frames, .. } => {
                let stop = frames
                    .last()
                    .is_some_and(|p| p.windows(9).any(|w| w == b"stop-here"));
                self.seen.push(Seen::Message {
                    frames: frames.len(),
                    stop,
                });
                if stop {
                    return ControlFlow::Break(());
                }
            }
            Observed::Link(LinkChange::Connected) => self.seen.push(Seen::Connected),
            Observed::Link(_) => {}
            Observed::Effects(effects) => {
                let connect = effects
                    .iter()
                    .any(|e| matches!(e, Effect::Command(Command::Connect { .. })));
                if connect {
                    self.seen.push(Seen::Connect);
                }
            }
        }
        ControlFlow::Continue(())
    }
}

#[test]
fn an_observer_sees_each_call_and_its_stop_ends_the_loop_with_nothing_fed_after() {
    let peer = EmulatorPeer::start();
    let config = SubscriberConfig::new(Config {
        endpoint: Some(peer.event_endpoint()),
        ..Config::default()
    });
    let mut recorder = Recorder::default();
    let Parts {
        driver,
        query,
        inbox,
        ..
    } = prepare_observed(config, &mut recorder).expect("a valid configuration");
    let q = query.clone();
    let publisher = std::thread::spawn(move || {
        wait_subscribed(&peer, &q);
        // The batch that stops the loop, then more that must not be fed.
        peer.store(&["stop-here".to_owned()]);
        for n in 0..20 {
            peer.store(&[format!("after-{n}")]);
        }
        peer
    });
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let ended = runtime
        .block_on(async { tokio::time::timeout(PATIENCE * 2, run::<Tokio>(driver, inbox)).await });
    let _peer = publisher.join().expect("the publisher thread");
    assert!(ended.is_ok(), "the loop did not end at the observer's stop");
    assert!(!query.is_running(), "the driver was dropped");

    let seen = &recorder.seen;
    assert_eq!(seen.first(), Some(&Seen::Connect), "{seen:?}");
    let connected = seen.iter().position(|s| *s == Seen::Connected);
    let first_message = seen.iter().position(|s| matches!(s, Seen::Message { .. }));
    assert!(
        connected.is_some() && connected < first_message,
        "connected before any message: {seen:?}"
    );
    assert_eq!(
        seen.last(),
        Some(&Seen::Message {
            frames: 3,
            stop: true
        }),
        "nothing observed after the stop: {seen:?}"
    );
    let messages = seen
        .iter()
        .filter(|s| matches!(s, Seen::Message { frames: 3, .. }))
        .count() as u64;
    let c = query.counters();
    assert_eq!(
        c.batches + c.duplicates,
        messages,
        "every message fed was observed, none fed after the stop"
    );
}
