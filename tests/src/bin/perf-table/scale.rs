//! Rows 10 and 11: how cost grows with what the index holds (`scale.json`: ingest and two hash
//! queries at 1M, 8M and 32M pages in one run), and a clear's cost against what the index holds
//! (criterion's `clear` group: 1K, 8K, 64K and 1M pages held by an index sized for 1M).

use super::*;

/// A query form's figures in `scale.json`: "p50 .., p99 .., mean .." and its p50.
fn query(q: &Value) -> (String, f64) {
    let p50 = num(&q["p50_ns"]);
    let text = format!(
        "p50 {}, p99 {}, mean {}",
        time(p50),
        time(num(&q["p99_ns"])),
        time(num(&q["mean_ns"]))
    );
    (text, p50)
}

/// Row 10, from `scale.json` (`cargo bench -p hicache-index-bench --bench scale`): one line a
/// size, each larger one against the smallest.
pub(super) fn scale_rows() {
    let label = "10. how cost grows";
    let had_runs = matches!(figures("scale.json"), Some(Value::Array(_)));
    let all = runs("scale.json", label);
    // Runs of this form only (a file from an older bench has other fields).
    let runs: Vec<&Value> = all
        .iter()
        .filter(|r| r["pages"].is_u64() && r["at_random"].is_object())
        .collect();
    let Some(&base) = runs.iter().min_by_key(|r| r["pages"].as_u64()) else {
        // `runs` said "not run" already unless the file held runs, none of them of this form.
        if had_runs {
            not_run(label);
        }
        return;
    };
    let ingest = |r: &Value| num(&r["ingest_events_per_second"]);
    let (_, base_order) = query(&base["in_order"]);
    let (_, base_random) = query(&base["at_random"]);
    for &r in &runs {
        let (in_order, order_p50) = query(&r["in_order"]);
        let (at_random, random_p50) = query(&r["at_random"]);
        let ratios = if r["pages"] == base["pages"] {
            "(the base of the other sizes' ratios)".to_owned()
        } else {
            format!(
                "against {} pages: ingest {:.2}x; p50 of pages stored in order {:.2}x, at random {:.2}x",
                count(&base["pages"]),
                ingest(r) / ingest(base),
                order_p50 / base_order,
                random_p50 / base_random,
            )
        };
        out!(
            "| {label}: {} pages at TP 8 (16 objects a page) | ingest of fresh pages {} events/s (median of {} rounds of {} batches); a {}-page hash query of pages stored one after another: {in_order}; of pages drawn at random among those held: {at_random} ({} queries of each) | | | {ratios} | (no goal: the figures say how cost grows) |",
            count(&r["pages"]),
            rate(ingest(r)),
            count(&r["ingest_rounds"]),
            count(&r["round_batches"]),
            count(&r["query_pages"]),
            count(&r["in_order"]["queries"]),
        );
    }
}

/// Row 11, from criterion's `clear` group (`cargo bench -p hicache-index-bench --bench clear`):
/// a clear of few pages must cost what they are, not the index's capacity.
pub(super) fn clear_row() {
    let label = "11. a clear of an index sized for 1,048,576 pages";
    // The bench's sizes (`benches/clear.rs`: the capacity shifted right by 10, 7, 4 and 0).
    let held = [1024u64, 8192, 65_536, 1_048_576];
    let times: Option<Vec<f64>> = held
        .iter()
        .map(|h| mean_ns("clear", &format!("held/{h}")))
        .collect();
    let Some(times) = times else {
        not_run(label);
        return;
    };
    let figures: Vec<String> = held
        .iter()
        .zip(&times)
        .map(|(h, t)| format!("{} held: {}", h.separate_with_commas(), time(*t)))
        .collect();
    let ratio = times[0] / times[3];
    out!(
        "| {label} | {} | | | 1,024 held: {ratio:.3}x all held | a clear costs its held pages or one sweep of the table, roughly whichever is cheaper, not always the sweep (1,024 held ≤ 0.1x all held): {} |",
        figures.join("; "),
        verdict(ratio <= 0.1),
    );
}
