//! The readable trace: letters, inputs and watermarks as words.

use hicache_index::{Input, Watermark};

use crate::model::{page_name, Catalog, Model};

use super::letters::{Fate, Letter};

/// Describes a letter readably, as it applies to `model`.
pub fn describe(letter: Letter, model: &Model) -> String {
    let m = &model.master;
    match letter {
        Letter::Toggle { page, fate } => {
            let p = usize::from(page);
            let verb = if m.holds(p) { "removes" } else { "stores" };
            let events = 1 + u64::from(m.filler);
            let batch = match fate {
                Fate::Dropped => format!(
                    "its batch dropped by the queue (sequences {}..={} skipped)",
                    m.next_seq,
                    m.next_seq + events - 1
                ),
                _ => format!(
                    "batch seq {}, event ids {}..={}{}",
                    m.next_seq,
                    m.next_id,
                    m.next_id + events - 1,
                    match fate {
                        Fate::Delivered => "",
                        Fate::Undecodable => ", undecodable",
                        Fate::Delayed => ", delayed by the network",
                        Fate::Dropped => unreachable!(),
                    }
                ),
            };
            format!("run {} {verb} page {}: {batch}", m.run, page_name(p))
        }
        Letter::Restart { same_sizes } => format!(
            "the master restarts unseen (run {}, batches {} the old run's sizes)",
            m.run + 1,
            if same_sizes { "of" } else { "unlike" }
        ),
        Letter::Reconnect => "the transport reconnects".into(),
        Letter::Copy => "the network hands the last message again".into(),
        Letter::Release => "the delayed batch arrives, past the window".into(),
        Letter::ReadStatus => format!(
            "the driver reads /kv_events/status now (run {}: {:?})",
            m.run,
            m.watermark()
        ),
        Letter::ReadKeys => format!("the driver reads /get_all_keys now (run {})", m.run),
        Letter::Deliver => "the driver begins handing the snapshot over".into(),
        Letter::EndSnapshot => "the driver hands over the rest of the snapshot".into(),
        Letter::Answer => format!(
            "the driver reads status and key list now (run {}) and hands them over",
            m.run
        ),
        Letter::Tick => "time passes to the next deadline".into(),
        Letter::Idle => "the master goes idle".into(),
    }
}

/// Shows an input briefly.
pub(super) fn show_input(input: &Input<'_>) -> String {
    match input {
        Input::Message(frames) if frames.len() == 3 && frames[1].len() == 8 => {
            let seq = u64::from_be_bytes(frames[1].try_into().expect("eight bytes"));
            match hicache_index::decode(frames) {
                Ok(batch) => format!(
                    "Message seq {seq}, {} events, ids {:?}..={:?}",
                    batch.events.len(),
                    batch.events.first().and_then(|e| e.event_id),
                    batch.events.last().and_then(|e| e.event_id)
                ),
                Err(_) => format!("Message seq {seq}, undecodable"),
            }
        }
        Input::Snapshot {
            request,
            watermark,
            lines,
        } => format!(
            "Snapshot {{ request: {request}, watermark: {}, {} lines }}",
            show_watermark(*watermark),
            lines.len()
        ),
        Input::SnapshotBegin { request, watermark } => format!(
            "SnapshotBegin {{ request: {request}, watermark: {} }}",
            show_watermark(*watermark)
        ),
        Input::SnapshotLines { request, lines } => format!(
            "SnapshotLines {{ request: {request}, {} lines }}",
            lines.len()
        ),
        Input::VerifyResult { request, results } => {
            let mut shown: Vec<String> = results
                .iter()
                .map(|(k, ok)| format!("{}: {ok}", short(k)))
                .collect();
            shown.sort();
            format!(
                "VerifyResult {{ request: {request}, {} }}",
                shown.join(", ")
            )
        }
        other => format!("{other:?}"),
    }
}

pub(super) fn show_watermark(watermark: Option<Watermark>) -> String {
    match watermark {
        Some(w) => format!("seq {}, events {:?}", w.seq.0, w.events),
        None => "none".into(),
    }
}

/// A page key by its page's name, any other key as it is.
pub(super) fn short(key: &str) -> String {
    let catalog = Catalog::get();
    match catalog.keys.iter().position(|k| k == key) {
        Some(p) => format!("page {}", page_name(p)),
        None => key.into(),
    }
}
