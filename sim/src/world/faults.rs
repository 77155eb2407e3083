//! Fault injection from outside the master: a stray publisher's batches (another topic, keys
//! of real pages) and junk messages (random frames), both sent through the network.

use hicache_index::Timestamp;
use hicache_index_wire::{encode_payload, OwnedBatch, OwnedEvent};

use crate::master::PageId;
use crate::models::TENANTS;
use crate::network::{Message, Origin};
use crate::system::System;

use super::state::World;

impl<S: System> World<S> {
    pub(super) fn send_stray(&mut self) {
        let pages = self.master.pages().len();
        if pages == 0 {
            return;
        }
        let mut events = Vec::new();
        for _ in 0..self.other_rng.range(1, 4) {
            let page = self.master.page(self.other_rng.index(pages) as PageId);
            let obj = page.first_obj + self.other_rng.below(u64::from(page.objs)) as u32;
            let mut ev = OwnedEvent::new(
                hicache_index::EventKind::Stored,
                self.master.key(obj).to_owned(),
            );
            ev.tenant_id = Some(TENANTS[page.tenant as usize].to_owned());
            events.push(ev);
        }
        let batch = OwnedBatch {
            seq: hicache_index::Seq(self.stray_seq),
            timestamp: Timestamp::Seconds(1.764e9),
            dp_rank: None,
            events,
        };
        self.stray_seq += 1;
        let topic = b"kv-events@vllm-worker".to_vec();
        let frames = vec![
            topic,
            batch.seq.0.to_be_bytes().to_vec(),
            encode_payload(&batch, self.opts.master.flavor),
        ];
        self.net.send_other(
            self.now,
            Message {
                frames,
                origin: Origin::Stray,
            },
        );
    }

    pub(super) fn send_junk(&mut self) {
        let n = [1usize, 2, 4][self.other_rng.index(3)];
        let frames = (0..n)
            .map(|_| {
                let len = self.other_rng.index(12);
                (0..len).map(|_| self.other_rng.next_u64() as u8).collect()
            })
            .collect();
        self.net.send_other(
            self.now,
            Message {
                frames,
                origin: Origin::Junk,
            },
        );
    }
}
