//! Style rule 3: after `handle_timeout` fires at the deadline, the next deadline lies strictly
//! later (or nothing is pending), whatever happened before; a driver never spins.

use std::time::Duration;

use hicache_index::{Command, Config, Effect, ReorderConfig, ResyncConfig, VerifyConfig};
use hicache_index_shortcuts::Shortcuts;
use hicache_index_tests::{config, mha, stored, Harness};
use quickcheck_macros::quickcheck;

#[quickcheck]
fn the_deadline_moves_forward_after_it_fires(ops: Vec<(u8, u8)>) -> bool {
    let cfg = Config {
        reorder: ReorderConfig {
            max_held: 4,
            max_delay: Some(Duration::from_millis(3)),
        },
        resync: Some(ResyncConfig {
            fetch_timeout: Duration::from_millis(7),
            ..ResyncConfig::default()
        }),
        verify: Some(VerifyConfig {
            interval: Duration::from_millis(5),
            timeout: Duration::from_millis(2),
            ..VerifyConfig::default()
        }),
        ..config(mha(1))
    };
    let mut h = Harness::new(cfg);
    let mut seq = 1u64;
    for (op, arg) in ops.into_iter().take(200) {
        h.advance(u64::from(arg % 4));
        match op % 6 {
            0 | 1 => {
                seq += u64::from(arg % 3);
                let _ = h.batch_at(seq, vec![stored(format!("{}_0_k", "ab".repeat(32)))]);
            }
            2 => {
                let fx = h.session.handle_connected(h.now);
                let _ = h.record(fx);
            }
            3 => {
                let fx = h.session.handle_disconnected(h.now);
                let _ = h.record(fx);
            }
            4 => {
                let snapshot = h.log.iter().rev().find_map(|e| match e {
                    Effect::Command(Command::FetchSnapshot { request }) => Some(*request),
                    _ => None,
                });
                if let Some(request) = snapshot {
                    let fx =
                        h.session
                            .handle_snapshot(h.now, request, None, std::iter::empty::<&str>());
                    let _ = h.record(fx);
                }
            }
            _ => {
                let Some(deadline) = h.session.poll_timeout() else {
                    continue;
                };
                let fired_at = h.now.max(deadline);
                let _ = h.fire_timeout();
                if h.session
                    .poll_timeout()
                    .is_some_and(|next| next <= fired_at)
                {
                    eprintln!(
                        "deadline {deadline:?} fired at {fired_at:?}, next {:?}",
                        h.session.poll_timeout()
                    );
                    return false;
                }
            }
        }
    }
    true
}
