//! Rows 10 and 11: how cost grows with what the index holds (`scale.json`: ingest and a hash
//! query at 1M, 8M and 32M pages in one run), and a clear's cost against what the index holds
//! (criterion's `clear` group: 1K, 8K, 64K and 1M pages held by an index sized for 1M).

use super::*;

/// Row 10, from `scale.json` (`cargo bench -p hicache-index-bench --bench scale`): one line a
/// size, each against the smallest.
pub(super) fn scale_rows() {
    let label = "10. how cost grows";
    let runs = runs("scale.json", label);
    let Some(first) = runs.first() else {
        return;
    };
    let (base_ingest, base_p50) = (
        num(&first["ingest_events_per_second"]),
        num(&first["query_p50_ns"]),
    );
    for r in &runs {
        let (ingest, p50) = (num(&r["ingest_events_per_second"]), num(&r["query_p50_ns"]));
        out!(
            "| {label}: {} pages at TP 8 (16 objects a page) | ingest {} events/s (median of {} rounds of 256 batches); a {}-page hash query, pages drawn at random among those held: p50 {}, p99 {}, mean {} ({} queries) | | | against {} pages: ingest {:.2}x, the query's p50 {:.2}x | (no goal: the figures say how cost grows) |",
            count(&r["pages"]),
            rate(ingest),
            count(&r["ingest_rounds"]),
            count(&r["query_pages"]),
            time(p50),
            time(num(&r["query_p99_ns"])),
            time(num(&r["query_mean_ns"])),
            count(&r["queries"]),
            count(&first["pages"]),
            ingest / base_ingest,
            p50 / base_p50,
        );
    }
}

/// Row 11, from criterion's `clear` group (`cargo bench -p hicache-index-bench --bench clear`):
/// a clear of few pages must cost what they are, not the index's capacity.
pub(super) fn clear_row() {
    let label = "11. a clear of an index sized for 1,048,576 pages";
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
        "| {label}, holding some of them | {} | | | 1,024 held: {ratio:.3}x all held | a clear costs what the index holds, not its capacity (1,024 held ≤ 0.1x all held): {} |",
        figures.join("; "),
        verdict(ratio <= 0.1),
    );
}
