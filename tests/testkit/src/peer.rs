//! The publishers the scenarios run against: the in-process emulated master, and an independent
//! Python publisher (pyzmq + msgpack) in a child process.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::{Mutex, OnceLock};

use hicache_index_emulator::{Emulator, EmulatorConfig};

/// A Mooncake-like publisher with an HTTP admin side, under the scenarios' control.
pub trait Peer: Sized {
    /// The name in failure messages.
    const NAME: &'static str;
    /// Starts a publisher on loopback, on any free event port.
    fn start() -> Self {
        Self::start_on(0)
    }
    /// Starts a publisher on loopback with its events on `port` (0: any free port).
    fn start_on(port: u16) -> Self;
    /// Its event endpoint (`tcp://127.0.0.1:PORT`).
    fn event_endpoint(&self) -> String;
    /// Its HTTP base URL.
    fn http_base(&self) -> String;
    /// Stores `keys`, publishing `stored` events (at most 64 a batch).
    fn store(&self, keys: &[String]);
    /// Stores `keys` but loses their events (one sequence each, as the master does: a gap).
    fn store_unpublished(&self, keys: &[String]);
    /// Removes `keys`, publishing `removed` events.
    fn remove(&self, keys: &[String]);
    /// Removes `keys` without any event.
    fn remove_silently(&self, keys: &[String]);
    /// Restarts: the socket binds again, sequences start from 1, objects are lost.
    fn restart(&self);
    /// Sends raw frames as one message, without touching the stream's sequence.
    fn send_frames(&self, frames: &[Vec<u8>]);
}

/// The emulated master of `hicache-index-emulator`, in this process.
#[derive(Debug)]
pub struct EmulatorPeer(pub Emulator);

impl Peer for EmulatorPeer {
    const NAME: &'static str = "emulator";

    fn start_on(port: u16) -> Self {
        let config = EmulatorConfig {
            event_port: port,
            ..EmulatorConfig::default()
        };
        EmulatorPeer(Emulator::start(config).expect("the emulator starts"))
    }

    fn event_endpoint(&self) -> String {
        self.0.event_endpoint()
    }

    fn http_base(&self) -> String {
        self.0.http_base()
    }

    fn store(&self, keys: &[String]) {
        self.0.store(keys.iter().cloned());
    }

    fn store_unpublished(&self, keys: &[String]) {
        self.0.store_unpublished(keys.iter().cloned());
    }

    fn remove(&self, keys: &[String]) {
        self.0.remove(keys.iter().cloned());
    }

    fn remove_silently(&self, keys: &[String]) {
        self.0.remove_silently(keys.iter().cloned());
    }

    fn restart(&self) {
        self.0.restart().expect("the emulator binds again");
    }

    fn send_frames(&self, frames: &[Vec<u8>]) {
        let frames: Vec<&[u8]> = frames.iter().map(Vec::as_slice).collect();
        self.0.send_frames(&frames);
    }
}

/// The Python publisher `py/mooncake_publisher.py`, in a child process of the venv's Python.
#[derive(Debug)]
pub struct PythonPeer {
    child: Child,
    io: Mutex<(ChildStdin, BufReader<ChildStdout>)>,
    endpoint: String,
    http: String,
}

impl PythonPeer {
    fn command(&self, cmd: serde_json::Value) {
        let mut io = self
            .io
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let (stdin, stdout) = &mut *io;
        writeln!(stdin, "{cmd}").expect("the Python publisher reads commands");
        stdin.flush().expect("the Python publisher reads commands");
        let mut reply = String::new();
        stdout
            .read_line(&mut reply)
            .expect("the Python publisher answers");
        assert_eq!(reply.trim(), "OK", "the Python publisher refused {cmd}");
    }

    fn keys_command(&self, op: &str, keys: &[String]) {
        self.command(serde_json::json!({ "op": op, "keys": keys }));
    }
}

impl Peer for PythonPeer {
    const NAME: &'static str = "python";

    fn start_on(port: u16) -> Self {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("py/mooncake_publisher.py");
        let mut child = Command::new(python())
            .arg(&script)
            .arg(port.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("the venv's Python starts");
        let stdin = child.stdin.take().expect("piped stdin");
        let mut stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
        let mut ready = String::new();
        stdout
            .read_line(&mut ready)
            .expect("the Python publisher says READY");
        let mut words = ready.split_whitespace();
        assert_eq!(
            words.next(),
            Some("READY"),
            "unexpected first line {ready:?}"
        );
        let endpoint = words.next().expect("an event endpoint").to_owned();
        let http = words.next().expect("an HTTP base").to_owned();
        PythonPeer {
            child,
            io: Mutex::new((stdin, stdout)),
            endpoint,
            http,
        }
    }

    fn event_endpoint(&self) -> String {
        self.endpoint.clone()
    }

    fn http_base(&self) -> String {
        self.http.clone()
    }

    fn store(&self, keys: &[String]) {
        self.keys_command("store", keys);
    }

    fn store_unpublished(&self, keys: &[String]) {
        self.keys_command("store_unpublished", keys);
    }

    fn remove(&self, keys: &[String]) {
        self.keys_command("remove", keys);
    }

    fn remove_silently(&self, keys: &[String]) {
        self.keys_command("remove_silently", keys);
    }

    fn restart(&self) {
        self.command(serde_json::json!({ "op": "restart" }));
    }

    fn send_frames(&self, frames: &[Vec<u8>]) {
        let hex: Vec<String> = frames.iter().map(hex::encode).collect();
        self.command(serde_json::json!({ "op": "raw", "frames_hex": hex }));
    }
}

impl Drop for PythonPeer {
    fn drop(&mut self) {
        if let Ok(mut io) = self.io.lock() {
            let _ = writeln!(io.0, "{}", serde_json::json!({ "op": "quit" }));
            let _ = io.0.flush();
        }
        for _ in 0..100 {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The venv's Python with pyzmq and msgpack, made on first use.
///
/// The venv is `$HICACHE_INDEX_PY_VENV`, or `target/py-venv` of this workspace; an existing one
/// that imports both modules is reused. Otherwise it is built beside it and renamed into place
/// (so that concurrent test processes never see half a venv). If pip cannot install the modules
/// from PyPI this panics with pip's output: the Python tests fail, they never pass silently.
pub fn python() -> PathBuf {
    static PYTHON: OnceLock<PathBuf> = OnceLock::new();
    PYTHON
        .get_or_init(|| {
            let dir = match std::env::var_os("HICACHE_INDEX_PY_VENV") {
                Some(dir) => dir.into(),
                None => target_dir().join("py-venv"),
            };
            make_venv(&dir, &["pyzmq", "msgpack"], "import zmq, msgpack")
        })
        .clone()
}

/// The Python of the venv `target/{name}`, made on first use with `packages` from PyPI, and
/// reused while it runs `imports` (e.g. `"import pynng, msgpack"`). Built beside its place and
/// renamed into it, like [`python`]'s; panics with pip's output when PyPI cannot be reached.
pub fn venv_python(name: &str, packages: &[&str], imports: &str) -> PathBuf {
    make_venv(&target_dir().join(name), packages, imports)
}

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"))
}

fn works(python: &Path, imports: &str) -> bool {
    Command::new(python)
        .args(["-c", imports])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn make_venv(dir: &Path, packages: &[&str], imports: &str) -> PathBuf {
    // One at a time in a test binary: two threads of one process would share the tmp folder.
    static MAKING: Mutex<()> = Mutex::new(());
    let _one = MAKING
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let python = dir.join("bin/python");
    if works(&python, imports) {
        return python;
    }
    let name = dir
        .file_name()
        .map_or("py-venv".into(), |n| n.to_string_lossy());
    let tmp = dir.with_file_name(format!("{name}.tmp-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    let run = |cmd: &mut Command, what: &str| {
        let out = cmd.output();
        if !out.as_ref().is_ok_and(|o| o.status.success()) {
            let _ = std::fs::remove_dir_all(&tmp);
        }
        let out = out.unwrap_or_else(|e| panic!("{what}: {e}"));
        assert!(
            out.status.success(),
            "{what} failed (the Python tests need PyPI's {}):\n{}\n{}",
            packages.join(" and "),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    };
    std::fs::create_dir_all(dir.parent().expect("the venv has a parent"))
        .expect("the target folder can be made");
    run(
        Command::new("python3").args(["-m", "venv"]).arg(&tmp),
        "python3 -m venv",
    );
    run(
        Command::new(tmp.join("bin/pip"))
            .args(["install", "--disable-pip-version-check", "--quiet"])
            .args(packages),
        &format!("pip install {}", packages.join(" ")),
    );
    // Scripts in a venv name its path: a renamed venv still works for `python -c`/scripts run
    // through its interpreter, which is all we use.
    if dir.exists() && !works(&python, imports) {
        let _ = std::fs::remove_dir_all(dir);
    }
    if std::fs::rename(&tmp, dir).is_err() {
        let _ = std::fs::remove_dir_all(&tmp);
    }
    assert!(
        works(&python, imports),
        "the venv at {} cannot run {imports:?}",
        dir.display()
    );
    python
}
