//! Row 9: Mooncake's FAST'25 traces replayed (`traces.json`), one row per trace and layout.

use super::*;

/// Row 9: Mooncake's FAST'25 traces replayed (`traces.json`): ours beside the reference and a
/// plain set of exact keys, every arrival's answer checked against the store model.
pub(super) fn traces_rows() {
    let label = "9. trace replay";
    let runs = runs("traces.json", label);
    for run in &runs {
        let followers = run["followers"].as_array().map_or(&[][..], Vec::as_slice);
        let by_name = |name: &str| followers.iter().find(|f| f["name"] == name);
        let (Some(ours), Some(reference), Some(set)) = (
            by_name("ours"),
            by_name("reference"),
            by_name("exact-key set"),
        ) else {
            not_run(label);
            continue;
        };
        let pages = num(&run["peak_pages_held"]).max(1.0);
        let figures = |f: &Value| {
            format!(
                "{:.0}x real time; {} events/s; by hashes {}/s (p99 {}); by tokens {}/s (p99 {}); peak {:.1} MiB",
                num(&f["times_real_time"]),
                rate(num(&f["events_per_second"])),
                count(&Value::from(num(&f["by_hashes"]["per_second"]).round() as u64)),
                time(num(&f["by_hashes"]["p99_ns"])),
                count(&Value::from(num(&f["by_tokens"]["per_second"]).round() as u64)),
                time(num(&f["by_tokens"]["p99_ns"])),
                num(&f["peak_bytes"]) / 1048576.0
            )
        };
        let vs = |f: &Value, what: &[&str]| {
            fn pick<'v>(v: &'v Value, what: &[&str]) -> &'v Value {
                what.iter().fold(v, |v, k| &v[*k])
            }
            num(pick(ours, what)) / num(pick(f, what))
        };
        let ratios = |f: &Value| {
            format!(
                "ingest {:.1}x, by hashes {:.1}x, by tokens {:.1}x, memory {:.1}x less",
                vs(f, &["events_per_second"]),
                vs(f, &["by_hashes", "per_second"]),
                vs(f, &["by_tokens", "per_second"]),
                num(&f["peak_bytes"]) / num(&ours["peak_bytes"])
            )
        };
        let wrong = num(&run["wrong_answers"]);
        out!(
            "| 9. {} trace, {} ({} objects a page), a store of {} objects ({:.0} % of the distinct blocks, LRU) | {}; {:.1} B a page held | {} | the exact-key set: {} | against the reference: {}; against the set: {} | 0 wrong answers: {} ({} claimed absent, {} present missed); hit rate {:.1} % (ideal prefix reuse {:.1} %) |",
            run["trace"].as_str().unwrap_or("?"),
            run["model"].as_str().unwrap_or("?"),
            count(&run["objects_per_page"]),
            count(&run["capacity_objects"]),
            100.0 * num(&run["capacity_fraction"]),
            figures(ours),
            num(&ours["peak_bytes"]) / pages,
            figures(reference),
            figures(set),
            ratios(reference),
            ratios(set),
            verdict(wrong == 0.0),
            count(&run["claimed_absent"]),
            count(&run["present_missed"]),
            100.0 * num(&run["hit_rate"]),
            100.0 * num(&run["ideal_rate"])
        );
    }
}
