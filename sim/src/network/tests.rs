//! Unit tests of the network: corruption, restarts and delivery order.

use hicache_index::decode;

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
