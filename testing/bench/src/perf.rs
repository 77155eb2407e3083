//! What the benchmarks of every crate share: their command line (quick mode, filters) and where
//! they leave their figures (JSON files under `<target>/perf/`, which the `perf-table` bin of
//! `hicache-index-tests` turns into the README's table).
//!
//! Nothing here reaches a simulation; it only reads the process's arguments, its path and the
//! environment, and writes files.

use std::path::PathBuf;

/// The command line of a `harness = false` bench, read tolerantly.
///
/// `cargo bench` passes `--bench`; `cargo bench -- --test` asks for the quick mode (run once,
/// small, check it worked, keep earlier results). Other flags are ignored; words are filters,
/// as criterion reads them: a measurement runs when its name contains one of them (or when
/// there is none).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BenchArgs {
    /// Run once in quick mode (`--test`): a tiny load, checked, with no figures written.
    pub quick: bool,
    /// Substrings selecting measurements by name; empty selects every one.
    pub filters: Vec<String>,
}

impl BenchArgs {
    /// Reads the process's arguments.
    pub fn from_env() -> BenchArgs {
        BenchArgs::parse(std::env::args().skip(1))
    }

    /// Reads `args` (without the program name).
    pub fn parse(args: impl IntoIterator<Item = String>) -> BenchArgs {
        let mut parsed = BenchArgs::default();
        for arg in args {
            if arg == "--test" {
                parsed.quick = true;
            } else if !arg.starts_with('-') {
                parsed.filters.push(arg);
            }
        }
        parsed
    }

    /// Reports whether the measurement called `name` is selected.
    pub fn is_selected(&self, name: &str) -> bool {
        self.filters.is_empty() || self.filters.iter().any(|f| name.contains(f.as_str()))
    }
}

/// Returns the workspace's target directory (where cargo keeps `CACHEDIR.TAG`).
///
/// Found from the running executable (benches and bins run from `<target>/<profile>/deps/` or
/// `<target>/<profile>/`), else `CARGO_TARGET_DIR`, else `target` in the working directory.
pub fn target_dir() -> PathBuf {
    let from_exe = std::env::current_exe().ok().and_then(|exe| {
        exe.ancestors()
            .skip(1)
            // Cargo writes both files in a target dir it creates; one made otherwise (a venv
            // under it first, say) has only the second.
            .find(|dir| {
                dir.join("CACHEDIR.TAG").is_file() || dir.join(".rustc_info.json").is_file()
            })
            .map(PathBuf::from)
    });
    from_exe
        .or_else(|| std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from("target"))
}

/// Returns the path of the figures file `name` (e.g. `memory.json`) under `<target>/perf/`.
pub fn result_path(name: &str) -> PathBuf {
    target_dir().join("perf").join(name)
}

/// Writes the figures file `name` under `<target>/perf/` and prints where it went.
///
/// # Panics
/// If the directory or the file cannot be written (a bench has nothing better to do).
pub fn write_result(name: &str, json: &str) {
    let path = result_path(name);
    let dir = path.parent().expect("a file under target/perf");
    std::fs::create_dir_all(dir).expect("create target/perf");
    std::fs::write(&path, json).expect("write the figures");
    println!("wrote {}", path.display());
}

/// The median over slices of `busy[i] / alone[i]`: two phases' figures (a query's p99 while
/// ingesting and alone, say) taken slice by slice, each pair in the same seconds of the
/// machine; a slice where either has no figure (`None`, or 0: no query) is left out; `None`
/// without any slice left.
pub fn median_ratio(busy: &[Option<u64>], alone: &[Option<u64>]) -> Option<f64> {
    let mut ratios: Vec<f64> = busy
        .iter()
        .zip(alone)
        .filter_map(|(b, a)| Some((b.filter(|&b| b > 0)?, a.filter(|&a| a > 0)?)))
        .map(|(b, a)| b as f64 / a as f64)
        .collect();
    median(&mut ratios)
}

/// The median of `values` (the mean of the middle two of an even count), sorting them; `None`
/// when there is none.
pub fn median(values: &mut [f64]) -> Option<f64> {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    (n > 0).then(|| (values[(n - 1) / 2] + values[n / 2]) / 2.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(words: &[&str]) -> BenchArgs {
        BenchArgs::parse(words.iter().map(|w| w.to_string()))
    }

    #[test]
    fn cargo_flags_are_ignored_and_words_filter() {
        let a = args(&["--bench"]);
        assert!(!a.quick);
        assert!(a.is_selected("e2e/tokio"));
        let a = args(&["--bench", "--test", "smol"]);
        assert!(a.quick);
        assert!(a.is_selected("e2e/smol"));
        assert!(!a.is_selected("e2e/tokio"));
    }

    #[test]
    fn median_ratio_pairs_slices_and_takes_the_middle() {
        let s = |v: &[u64]| -> Vec<Option<u64>> { v.iter().map(|&n| Some(n)).collect() };
        assert_eq!(
            median_ratio(&s(&[30, 10, 20]), &s(&[10, 10, 10])),
            Some(2.0)
        );
        assert_eq!(median_ratio(&s(&[10, 40]), &s(&[10, 10])), Some(2.5));
        assert_eq!(median_ratio(&s(&[10, 40]), &s(&[0, 0])), None);
        // A slice without a figure on either side leaves the others paired by position.
        assert_eq!(
            median_ratio(&[None, Some(30), Some(0)], &[Some(10), Some(10), Some(10)]),
            Some(3.0)
        );
    }
}
