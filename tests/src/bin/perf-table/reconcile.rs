//! Row 8: the reconcile of a key list against a full index (`reconcile.json`), one row per
//! layout and size, its goal that no single call holds the writer more than 50 ms.

use super::*;

/// The longest a single call may hold the writer (the row's goal).
const WRITER_HELD_NS: f64 = 50e6;

fn mib(bytes: &Value) -> String {
    format!("{:.1}", num(bytes) / f64::from(1 << 20))
}

/// Row 8, from `reconcile.json` (`cargo bench -p hicache-index-bench --bench reconcile`).
pub(super) fn reconcile_rows() {
    let label = "8. reconcile of a key list against a full index";
    let runs = runs("reconcile.json", label);
    for r in &runs {
        let layout = match r["layout"].as_str() {
            Some("reconcile/tp8") => "TP 8",
            Some("reconcile/mla") => "MLA",
            other => other.unwrap_or("?"),
        };
        let unclaimed = match r["pages_unclaimed"].as_u64() {
            Some(n) => format!(", {} pages unclaimed", n.separate_with_commas()),
            None => String::new(),
        };
        let cpu = match r["end_cpu_ns"].as_f64() {
            Some(ns) => format!(" (CPU {})", time(ns)),
            None => String::new(),
        };
        let longest = num(&r["longest_handle_ns"]);
        out!(
            "| 8. reconcile of {} objects, {layout} ({} pages; {} removed{unclaimed}) | handover {} in {} calls of lines; the longest call ({}) {}; applying (SnapshotEnd and its slices) {}{cpu}; peak +{} MiB (the session holds {} MiB) | | | | writer held ≤ 50 ms: {}; queries: {} during it, {} `Busy` |",
            count(&r["objects"]),
            count(&r["pages"]),
            count(&r["removed"]),
            time(num(&r["handover_ns"])),
            count(&r["chunks"]),
            r["longest_step"]
                .as_str()
                .map_or("?", |s| s.trim_end_matches(" (Timeout)")),
            time(longest),
            time(num(&r["end_ns"])),
            mib(&r["peak_extra_bytes"]),
            mib(&r["session_bytes"]),
            verdict(longest <= WRITER_HELD_NS),
            count(&r["queries"]),
            count(&r["busy"]),
        );
    }
}
