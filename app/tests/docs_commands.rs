//! Every command the README and the pages under `docs/` mark runnable, run as shown (issue 32).
//!
//! The marks, and what this test changes in a command (the binary's path, the examples' fixed
//! addresses, which become free ports on 127.0.0.1), are described once, at the top of
//! `docs/testing.md`. In short: a fenced block whose info string holds the word `runnable` is
//! run; ```` ```sh runnable ```` commands must exit 0, ```` ```console runnable ```` transcripts
//! must print exactly their shown output, and a `hicache-index serve` command (with
//! `world=NAME`) is started against an emulated master holding that world's keys and serves the
//! blocks after it in its file. Each file's groups (the blocks before its first `serve`, and each
//! `serve` with the blocks after it) run at once, on threads of their own. Every process is
//! killed when its group ends; nothing leaves 127.0.0.1.

use std::io::Read;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use hicache_index::layout::LayoutDocument;
use hicache_index::{Layout, Namespace, SglangParams};
use hicache_index_emulator::{Emulator, EmulatorConfig};
use hicache_index_testkit::process::{Running, PATIENCE};
use serde_json::json;

const BIN: &str = env!("CARGO_BIN_EXE_hicache-index");
const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");

/// The longest one command may run (the demo's 5 s, and its recoveries on a loaded machine).
const COMMAND_TIMEOUT: Duration = Duration::from_secs(60);

/// The whole run's budget: it is part of `cargo test` (about 6 s alone: the 5 s demo, with
/// every other group beside it).
const BUDGET: Duration = Duration::from_secs(90);

/// How a block is run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// Commands that must exit 0 (`sh runnable`).
    Commands,
    /// `$ ` commands, each followed by exactly what it prints (`console runnable`).
    Transcript,
}

/// A fenced block marked runnable.
#[derive(Clone, Debug)]
struct Block {
    /// `file:line` of its opening fence.
    at: String,
    kind: Kind,
    /// `world=NAME`, for a block that starts `serve`.
    world: Option<String>,
    lines: Vec<String>,
}

/// Finds the runnable blocks of a markdown text; `file` names it in messages.
fn runnable_blocks(file: &str, text: &str) -> Vec<Block> {
    let mut blocks = Vec::new();
    let mut lines = text.lines().enumerate();
    while let Some((n, line)) = lines.next() {
        let Some(info) = line.trim_start().strip_prefix("```") else {
            continue;
        };
        let words: Vec<&str> = info.split_whitespace().collect();
        let mut body = Vec::new();
        for (_, line) in lines.by_ref() {
            if line.trim_start().starts_with("```") {
                break;
            }
            body.push(line.to_owned());
        }
        if !words.contains(&"runnable") {
            assert!(
                !info.contains("run"),
                "{file}:{}: a mark that is not `runnable`: {info:?}",
                n + 1
            );
            continue;
        }
        let kind = match words.first() {
            Some(&"sh") => Kind::Commands,
            Some(&"console") => Kind::Transcript,
            other => panic!(
                "{file}:{}: runnable blocks are sh or console, not {other:?}",
                n + 1
            ),
        };
        let mut world = None;
        for word in &words[1..] {
            match word.strip_prefix("world=") {
                Some(name) => world = Some(name.to_owned()),
                None if *word == "runnable" => {}
                None => panic!("{file}:{}: unknown word {word:?} in {info:?}", n + 1),
            }
        }
        blocks.push(Block {
            at: format!("{file}:{}", n + 1),
            kind,
            world,
            lines: body,
        });
    }
    blocks
}

/// A block's commands: lines ending in `\` go on (kept as they are: `sh` reads them so).
fn commands(lines: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut open = false;
    for line in lines {
        if open {
            let last = out.last_mut().expect("a command goes on");
            last.push('\n');
            last.push_str(line);
        } else if !line.trim().is_empty() {
            out.push(line.clone());
        }
        open = line.ends_with('\\');
    }
    out
}

/// A transcript's commands, each with the output shown after it.
fn transcript(lines: &[String]) -> Vec<(String, String)> {
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    let mut open = false;
    for line in lines {
        if open {
            let (command, _) = out.last_mut().expect("a command goes on");
            command.push('\n');
            command.push_str(line);
            open = line.ends_with('\\');
        } else if let Some(command) = line.strip_prefix("$ ") {
            out.push((command.to_owned(), Vec::new()));
            open = line.ends_with('\\');
        } else {
            let (_, shown) = out.last_mut().expect("output follows a `$ ` command");
            shown.push(line.clone());
        }
    }
    out.into_iter()
        .map(|(command, shown)| (command, shown.join("\n")))
        .collect()
}

/// Replaces each `(from, to)` in one pass (a replacement is never replaced again).
fn substitute(text: &str, pairs: &[(String, String)]) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    'outer: while !rest.is_empty() {
        for (from, to) in pairs {
            if let Some(after) = rest.strip_prefix(from.as_str()) {
                out.push_str(to);
                rest = after;
                continue 'outer;
            }
        }
        let c = rest.chars().next().expect("not empty");
        out.push(c);
        rest = &rest[c.len_utf8()..];
    }
    out
}

/// A folder of this test, removed with it.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("hicache-docs-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("a temporary folder");
        TempDir(dir)
    }

    fn file(&self, name: &str, text: &str) {
        std::fs::write(self.0.join(name), text).expect("a file of the world");
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `PATH` with the binary's folder first, so that `hicache-index` is the one `cargo test` built.
fn path() -> String {
    let dir = Path::new(BIN).parent().expect("the binary's folder");
    match std::env::var("PATH") {
        Ok(path) => format!("{}:{path}", dir.display()),
        Err(_) => dir.display().to_string(),
    }
}

/// What a command did.
struct Ran {
    ok: bool,
    stdout: String,
    stderr: String,
}

/// Runs `command` with `sh` in `dir`; kills it after [`COMMAND_TIMEOUT`].
fn sh(command: &str, dir: &Path) -> Ran {
    let mut child = Command::new("sh")
        .args(["-c", command])
        .current_dir(dir)
        .env("PATH", path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("sh starts");
    let read = |child: &mut Child, out: bool| {
        let mut pipe: Box<dyn Read + Send> = if out {
            Box::new(child.stdout.take().expect("piped stdout"))
        } else {
            Box::new(child.stderr.take().expect("piped stderr"))
        };
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            let _ = pipe.read_to_end(&mut buf);
            String::from_utf8_lossy(&buf).into_owned()
        })
    };
    let (stdout, stderr) = (read(&mut child, true), read(&mut child, false));
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("waitable") {
            break Some(status);
        }
        if start.elapsed() > COMMAND_TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let stderr = stderr.join().unwrap_or_default();
    Ran {
        ok: status.is_some_and(|s| s.success()),
        stdout: stdout.join().unwrap_or_default(),
        stderr: match status {
            Some(_) => stderr,
            None => format!("{stderr}\n(killed after {COMMAND_TIMEOUT:?})"),
        },
    }
}

/// An SGLang worker played on `listener`: `GET /v1/models` names `model`, `GET
/// /get_hicache_l3_cache_layout` answers `layout`; it serves until the test's process ends.
fn fake_worker(listener: TcpListener, model: &str, layout: &str) {
    let models = json!({"object": "list", "data": [
        {"id": model, "object": "model", "owned_by": "sglang", "root": model, "max_model_len": 4096}
    ]})
    .to_string();
    let layout = layout.to_owned();
    std::thread::spawn(move || {
        use std::io::Write;
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut head = Vec::new();
            let mut buf = [0u8; 1024];
            while !head.ends_with(b"\r\n\r\n") {
                match stream.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => head.extend_from_slice(&buf[..n]),
                }
            }
            let head = String::from_utf8_lossy(&head);
            let (status, body) = match head.split_whitespace().nth(1) {
                Some("/v1/models") => ("200 OK", models.as_str()),
                Some("/get_hicache_l3_cache_layout") => ("200 OK", layout.as_str()),
                _ => ("404 Not Found", "{}"),
            };
            let _ = write!(
                stream,
                "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
                 Connection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
}

/// SGLang 0.5.23's answer for an MHA model: no layout (see `serve_models.rs`).
const MHA_DISABLED: &str = r#"{"enabled": false, "backend": "mooncake", "page_size": 4,
  "hicache_object_layout": {"pools": [], "key_prefix": "Qwen-Qwen3-8B", "is_mla_backend": false,
                            "pp_rank": 0, "pp_size": 1},
  "reason": "External L3 lookup requires rank-replicated/MLA pools"}"#;

/// SGLang 0.5.23's answer for DeepSeek-V3 at PP 2 (both stages merged, `"pp_rank": null`).
const MLA_PP2: &str = r#"{"enabled": true, "backend": "mooncake", "page_size": 4,
  "hicache_object_layout": {
    "pools": [{"pool": "kv", "suffixes": ["_0_k"], "hit_policy": "all_pages"},
              {"pool": "kv", "suffixes": ["_1_k"], "hit_policy": "all_pages"}],
    "key_prefix": "deepseek-ai-DeepSeek-V3", "is_mla_backend": true, "pp_rank": null,
    "pp_size": 2}}"#;

/// A layout document for Qwen/Qwen3-8B at TP 2 (MHA: each rank's K and V).
const QWEN_DOCUMENT: &str = r#"{"enabled": true, "backend": "mooncake", "page_size": 4,
  "hicache_object_layout": {
    "pools": [{"pool": "kv", "suffixes": ["_0_k", "_0_v", "_1_k", "_1_v"],
               "hit_policy": "all_pages"}],
    "key_prefix": "Qwen-Qwen3-8B", "is_mla_backend": false, "pp_rank": 0, "pp_size": 1}}"#;

/// SGLang 0.5.23's answer for DeepSeek-V3 (MLA: one replicated K object).
const DEEPSEEK_DOCUMENT: &str = r#"{"enabled": true, "backend": "mooncake", "page_size": 4,
  "hicache_object_layout": {
    "pools": [{"pool": "kv", "suffixes": ["__k"], "hit_policy": "all_pages"}],
    "key_prefix": "deepseek-ai-DeepSeek-V3", "is_mla_backend": true, "pp_rank": 0,
    "pp_size": 1}}"#;

/// Qwen/Qwen3-8B as the layout flags give it: page size 4, TP 2.
fn qwen() -> Layout {
    let mut params = SglangParams::new(4, 2);
    params.model = Some("Qwen/Qwen3-8B".into());
    Layout::from_sglang(&params).expect("a layout")
}

fn from_document(document: &str) -> Layout {
    let document: LayoutDocument = serde_json::from_str(document).expect("a document");
    Layout::from_document(&document).expect("a layout")
}

/// The object keys of the first `pages` pages of the examples' tokens, 1..13, under `layout`.
fn pages(layout: &Layout, pages: usize) -> Vec<String> {
    let tokens: Vec<u32> = (1..=13).collect();
    layout
        .page_hashes(&tokens, Namespace::NONE)
        .take(pages)
        .flat_map(|hash| layout.object_keys(&hash).collect::<Vec<_>>())
        .collect()
}

/// What a `serve` block runs against: the emulated master (with the world's keys), the
/// folder its commands run in (with the world's files), and the addresses that stand for the
/// examples' fixed ones.
struct World {
    _emulator: Emulator,
    dir: TempDir,
    pairs: Vec<(String, String)>,
}

impl World {
    /// Makes the world `name`; `None` for a name no world has.
    fn make(name: &str, group: &str) -> Option<World> {
        let emulator = Emulator::start(EmulatorConfig::default()).expect("the emulator starts");
        let dir = TempDir::new(group);
        let mut pairs = vec![
            ("tcp://127.0.0.1:5557".to_owned(), emulator.event_endpoint()),
            ("http://127.0.0.1:9003".to_owned(), emulator.http_base()),
        ];
        match name {
            // The first two pages of tokens 1..13 (page size 4, TP 2).
            "one-model" => {
                emulator.store(pages(&qwen(), 2));
            }
            // All three pages for Qwen/Qwen3-8B (TP 2), the first two for DeepSeek-V3 (MLA),
            // and both models' layout documents.
            "two-layouts" => {
                dir.file("qwen.json", QWEN_DOCUMENT);
                dir.file("deepseek.json", DEEPSEEK_DOCUMENT);
                emulator.store(pages(&from_document(QWEN_DOCUMENT), 3));
                emulator.store(pages(&from_document(DEEPSEEK_DOCUMENT), 2));
            }
            // The same pages (DeepSeek-V3 at PP 2), and two workers answering SGLang 0.5.23's
            // documents: Qwen/Qwen3-8B's (MHA: none) on the first, DeepSeek-V3's on the second.
            "workers" => {
                emulator.store(pages(&qwen(), 3));
                emulator.store(pages(&from_document(MLA_PP2), 2));
                // The first worker's URL sorts first, as the examples' do (answers list them
                // in that order).
                let mut listeners: Vec<(String, TcpListener)> = (0..2)
                    .map(|_| {
                        let listener = TcpListener::bind("127.0.0.1:0").expect("a free port");
                        let url = format!("http://{}", listener.local_addr().unwrap());
                        (url, listener)
                    })
                    .collect();
                listeners.sort_by(|a, b| a.0.cmp(&b.0));
                let (deepseek, qwen) = (listeners.pop().unwrap(), listeners.pop().unwrap());
                pairs.push(("http://127.0.0.1:30000".to_owned(), qwen.0));
                pairs.push(("http://127.0.0.1:30001".to_owned(), deepseek.0));
                fake_worker(qwen.1, "Qwen/Qwen3-8B", MHA_DISABLED);
                fake_worker(deepseek.1, "deepseek-ai/DeepSeek-V3", MLA_PP2);
            }
            _ => return None,
        }
        Some(World {
            _emulator: emulator,
            dir,
            pairs,
        })
    }
}

/// One group of blocks: those before a file's first `serve`, or a `serve` and the blocks after
/// it up to the next one. Returns what failed.
fn run_group(name: &str, blocks: &[Block]) -> Vec<String> {
    let mut failures = Vec::new();
    let plain = TempDir::new(name);
    let mut world: Option<World> = None;
    let mut service: Option<Running> = None;
    let mut pairs: Vec<(String, String)> = Vec::new();
    for block in blocks {
        match block.kind {
            Kind::Commands => {
                for command in commands(&block.lines) {
                    if command.starts_with("hicache-index serve") {
                        let Some(w) = block.world.as_deref().and_then(|n| World::make(n, name))
                        else {
                            failures.push(format!(
                                "{}: a serve block names a world this test has ({:?})",
                                block.at, block.world
                            ));
                            return failures;
                        };
                        let command = substitute(&command, &w.pairs).replacen(
                            "hicache-index serve",
                            "hicache-index serve --listen 127.0.0.1:0",
                            1,
                        );
                        let script = format!("cd '{}' && exec {command}", w.dir.0.display());
                        let path = path();
                        let mut running =
                            Running::start_with("sh", &["-c", &script], &[("PATH", &path)]);
                        let addr: SocketAddr = running.http_address();
                        pairs = w.pairs.clone();
                        pairs.push(("localhost:9100".to_owned(), addr.to_string()));
                        service = Some(running);
                        world = Some(w);
                        continue;
                    }
                    let dir = world.as_ref().map_or(&plain.0, |w| &w.dir.0);
                    let ran = sh(&substitute(&command, &pairs), dir);
                    if !ran.ok {
                        failures.push(format!(
                            "{}: `{command}` failed\n--- stdout\n{}\n--- stderr\n{}",
                            block.at, ran.stdout, ran.stderr
                        ));
                    }
                }
            }
            Kind::Transcript => {
                for (command, shown) in transcript(&block.lines) {
                    let expected = substitute(&shown, &pairs);
                    let dir = world.as_ref().map_or(&plain.0, |w| &w.dir.0);
                    // Against a serve, the index catches up (its bootstrap, the workers' first
                    // poll): asked again until it matches.
                    let patience = if service.is_some() {
                        PATIENCE
                    } else {
                        Duration::ZERO
                    };
                    let start = Instant::now();
                    let ran = loop {
                        let ran = sh(&substitute(&command, &pairs), dir);
                        let printed = ran.stdout.strip_suffix('\n').unwrap_or(&ran.stdout);
                        if printed == expected || start.elapsed() >= patience {
                            break ran;
                        }
                        std::thread::sleep(Duration::from_millis(100));
                    };
                    let printed = ran.stdout.strip_suffix('\n').unwrap_or(&ran.stdout);
                    if printed != expected {
                        failures.push(format!(
                            "{}: `{command}` printed\n{printed}\n--- instead of\n{expected}\n--- \
                             stderr\n{}",
                            block.at, ran.stderr
                        ));
                    }
                }
            }
        }
    }
    drop(service);
    failures
}

/// The markdown files whose commands are run: the README and every page under `docs/`.
fn markdown_files() -> Vec<(String, String)> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).expect("docs/ is readable") {
            let path = entry.expect("an entry").path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "md") {
                out.push(path);
            }
        }
    }
    let root = Path::new(ROOT);
    let mut paths = vec![root.join("README.md")];
    walk(&root.join("docs"), &mut paths);
    paths.sort();
    paths
        .into_iter()
        .map(|path| {
            let name = path
                .strip_prefix(root)
                .expect("under the root")
                .display()
                .to_string();
            (name, std::fs::read_to_string(&path).expect("readable"))
        })
        .collect()
}

/// Splits a file's blocks into groups (see [`run_group`]).
fn groups(blocks: Vec<Block>) -> Vec<Vec<Block>> {
    let mut out: Vec<Vec<Block>> = vec![Vec::new()];
    for block in blocks {
        let starts_serve = block.kind == Kind::Commands
            && commands(&block.lines)
                .iter()
                .any(|c| c.starts_with("hicache-index serve"));
        if starts_serve {
            out.push(Vec::new());
        }
        out.last_mut().expect("a group").push(block);
    }
    out.retain(|g| !g.is_empty());
    out
}

/// Runs every group of `files` at once; returns the failures and how many blocks ran.
fn run_all(files: &[(String, String)]) -> (Vec<String>, usize) {
    let mut all = Vec::new();
    for (name, text) in files {
        for (i, group) in groups(runnable_blocks(name, text)).into_iter().enumerate() {
            let label = format!("{}-{i}", name.replace(['/', '.'], "-"));
            all.push((label, group));
        }
    }
    let blocks = all.iter().map(|(_, g)| g.len()).sum();
    let failures = std::thread::scope(|s| {
        let handles: Vec<_> = all
            .iter()
            .map(|(label, group)| s.spawn(move || run_group(label, group)))
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap_or_else(|_| vec!["a group panicked".into()]))
            .collect()
    });
    (failures, blocks)
}

#[test]
fn every_runnable_command_in_the_readme_and_docs_runs_as_shown() {
    let start = Instant::now();
    let files = markdown_files();
    let marked = |name: &str| {
        files
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(n, t)| runnable_blocks(n, t).len())
            .sum::<usize>()
    };
    // The marks are there (a mark spelled otherwise would run nothing).
    assert!(marked("README.md") >= 2, "the README's sidecar example");
    assert!(marked("docs/cli.md") >= 9, "the manual's examples");
    let (failures, blocks) = run_all(&files);
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    let took = start.elapsed();
    eprintln!("{blocks} runnable blocks ran as shown in {took:?}");
    assert!(took < BUDGET, "{took:?} is over the budget of {BUDGET:?}");
}

#[test]
fn a_command_that_fails_or_prints_otherwise_is_reported() {
    let text = "```sh runnable\nhicache-index hash --page-size 4 1 2 3 4\nfalse\n```\n\
                ```console runnable\n$ hicache-index hash --page-size 4 1 2 3 4\n\
                cf97adeedb59e05bfd73a2b4c2a8885708c4f4f70c84c64b27120e72ab733b72\n\
                $ hicache-index hash --page-size 4 1 2 3 5\n\
                cf97adeedb59e05bfd73a2b4c2a8885708c4f4f70c84c64b27120e72ab733b72\n```\n\
                ```sh runnable world=nowhere\nhicache-index serve --events tcp://127.0.0.1:5557\n```\n";
    let (failures, blocks) = run_all(&[("example.md".into(), text.into())]);
    assert_eq!(blocks, 3);
    assert_eq!(failures.len(), 3, "{failures:#?}");
    assert!(
        failures[0].contains("example.md:1: `false` failed"),
        "{failures:#?}"
    );
    assert!(
        failures[1].contains("example.md:5: `hicache-index hash --page-size 4 1 2 3 5` printed"),
        "{failures:#?}"
    );
    assert!(failures[2].contains("names a world"), "{failures:#?}");
}

#[test]
fn the_readmes_rust_example_is_the_tokio_crates_compiled_example() {
    let readme = std::fs::read_to_string(Path::new(ROOT).join("README.md")).unwrap();
    let start = readme
        .find("```rust\n")
        .expect("a Rust example in the README")
        + 8;
    let end = start + readme[start..].find("```").expect("its end");
    let shown = readme[start..end].trim_end();
    let docs =
        std::fs::read_to_string(Path::new(ROOT).join("transports/tokio/src/lib.rs")).unwrap();
    let example: Vec<&str> = docs
        .lines()
        .filter_map(|l| l.strip_prefix("//!"))
        .map(|l| l.strip_prefix(' ').unwrap_or(l))
        .skip_while(|l| *l != "```no_run")
        .skip(1)
        .take_while(|l| *l != "```")
        // Lines rustdoc hides.
        .filter(|l| *l != "#" && !l.starts_with("# "))
        .collect();
    assert_eq!(
        shown,
        example.join("\n").trim_end(),
        "the README's Rust example and hicache-index-tokio's crate example differ"
    );
}
