//! The replay's correctness on a slice of each trace: with an in-order, loss-free stream every
//! answer of ours equals the store page by page, and the yardsticks' answers equal it too; a
//! lost message is seen by the same check (so it can fail).

use hicache_index_traces::{replay, Model, NoMeter, ReplayConfig, Trace, TraceName};

/// Requests of each trace replayed here: the first that reuse pages (the synthetic trace's first
/// 40 share none), few enough for a debug build.
fn slice(name: TraceName) -> usize {
    match name {
        TraceName::Conversation => 40,
        TraceName::Synthetic => 60,
    }
}

#[test]
fn every_answer_equals_the_store_on_a_slice_of_both_traces() {
    for name in TraceName::ALL {
        let trace = Trace::load(name).slice(slice(name));
        for model in Model::ALL {
            let replayed = replay(&trace, &ReplayConfig::new(model, 0.25), &NoMeter);
            println!("{replayed}");
            assert_eq!(replayed.requests, slice(name) as u64);
            assert!(replayed.removed > 0, "the store evicts: {replayed}");
            assert!(replayed.hit_pages > 0, "pages are reused: {replayed}");
            assert!(
                replayed.hit_pages <= replayed.ideal_pages,
                "no store beats an unbounded one: {replayed}"
            );
            assert_eq!(replayed.followers.len(), 3);
            assert_eq!(replayed.wrong_answers(), 0, "{replayed}");
            assert_eq!(
                (replayed.not_live, replayed.ours_gaps, replayed.ours_clears),
                (0, 0, 0),
                "{replayed}"
            );
            assert_eq!(replayed.ours_index_evictions, 0, "{replayed}");
        }
    }
}

#[test]
fn a_lost_message_shows_as_missed_pages_never_as_claimed_ones() {
    let trace = Trace::load(TraceName::Conversation).slice(60);
    let mut config = ReplayConfig::new(Model::Tp8, 0.25);
    config.yardsticks = false;
    config.lose_message = Some(40);
    let replayed = replay(&trace, &config, &NoMeter);
    assert_eq!(replayed.ours_gaps, 1, "{replayed}");
    assert_eq!(replayed.claimed_absent, 0, "{replayed}");
    assert!(replayed.present_missed > 0, "{replayed}");
    assert!(replayed.wrong_answers() > 0, "{replayed}");
}

#[test]
fn both_traces_load_whole() {
    let conversation = Trace::load(TraceName::Conversation);
    let synthetic = Trace::load(TraceName::Synthetic);
    assert_eq!(conversation.requests.len(), 12_031);
    assert_eq!(synthetic.requests.len(), 3_993);
    assert_eq!(conversation.distinct_blocks(), 182_790);
    assert_eq!(synthetic.distinct_blocks(), 43_924);
    assert_eq!(conversation.span_ms(), 3_536_999);
}

#[test]
fn the_two_thread_replay_applies_the_same_events() {
    let trace = Trace::load(TraceName::Conversation).slice(40);
    let config = ReplayConfig::new(Model::Mla, 0.25);
    let alone = replay(&trace, &config, &NoMeter);
    let beside = hicache_index_traces::replay_concurrent(&trace, &config);
    assert_eq!(beside.events, alone.events());
}
