//! `demo`: the whole system on one machine, with nothing external.
//!
//! An emulated Mooncake master (real ZeroMQ PUB socket, real HTTP admin side) on loopback; a
//! subscriber on tokio following it over real ZeroMQ, with resync and verification on; router
//! threads asking the index about a synthetic workload with prefix sharing (a few hundred
//! shared system prompts, multi-turn conversations with random continuations, TP 8); a
//! "workers" thread storing the pages of served requests into the master and removing the
//! oldest beyond a cap; and two injected faults: events lost in the master's queue (a gap) and
//! a master restart. A live progress line on stderr, a report at the end.
//!
//! Every hit page's objects are checked against the master's own key set. A removal is known to
//! the index once it has applied the batch that carried it (its last applied sequence reached
//! that batch's, within the same run of the master; a removal of an earlier run, once the index
//! follows the new run). A page claimed by a query that began before that point raced its
//! removal and is counted apart; any other page claimed but absent is a false hit, and the demo
//! fails. The removal lag (the master removing, to the index applying the batch) is measured.

mod args;
mod report;
mod workers;
mod workload;
mod world;

pub(crate) use args::DemoArgs;

use std::collections::HashMap;
use std::io::IsTerminal;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use hicache_index::{
    Config, Health, Layout, ModelLayout, PageHash, ResyncConfig, SglangParams, VerifyConfig,
};
use hicache_index_emulator::{Emulator, EmulatorConfig};
use hicache_index_tokio::{Subscriber, SubscriberConfig};
use report::{progress, report};
use workers::{workers, Plan};
use workload::{router, system_prompts};
use world::{lock, page_hashes, prefix, Faults, World, MODEL, PAGE, TP};

use crate::latency::Latency;
use crate::outcome::{say, Failure, Outcome};

/// Runs the demo and prints the report; fails on a false hit or a fault not recovered.
pub(crate) fn run(args: DemoArgs) -> Outcome {
    if args.routers == 0 || args.rate == 0 || args.store_pages < 100 {
        return Err(Failure::Usage(
            "--routers and --rate must be positive, --store-pages at least 100".into(),
        ));
    }
    let layout = Layout::from_sglang(&SglangParams {
        model: Some(MODEL.into()),
        ..SglangParams::new(PAGE, TP)
    })
    .map_err(|e| format!("invalid demo layout: {e}"))?;
    let emulator = Emulator::start(EmulatorConfig {
        // Unlimited: the faults are the injected ones, not the PUB socket's drops.
        send_hwm: 0,
        ..EmulatorConfig::default()
    })
    .map_err(|e| format!("cannot start the emulated master: {e}"))?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))?;
    let config = SubscriberConfig::new(Config {
        endpoint: Some(emulator.event_endpoint()),
        layouts: vec![ModelLayout {
            model: None,
            layout: layout.clone(),
        }],
        resync: Some(ResyncConfig::default()),
        verify: Some(VerifyConfig {
            interval: Duration::from_secs(2),
            ..VerifyConfig::default()
        }),
        ..Config::default()
    })
    .with_master_http(emulator.http_base());
    let (index, task) = runtime
        .block_on(async { Subscriber::spawn(config) })
        .map_err(|e| format!("cannot start the subscriber: {e}"))?;
    let world = Arc::new(World {
        emulator,
        layout,
        index,
        start: Instant::now(),
        in_flight: Mutex::new(HashMap::new()),
        index_run: AtomicU64::new(0),
        asking: (0..args.routers)
            .map(|_| AtomicU64::new(u64::MAX))
            .collect(),
        stop: AtomicBool::new(false),
        latency: Latency::new(),
        removal_lag: Latency::new(),
        queries: AtomicU64::new(0),
        pages_asked: AtomicU64::new(0),
        pages_hit: AtomicU64::new(0),
        false_hits: AtomicU64::new(0),
        in_flight_claims: AtomicU64::new(0),
        first_false_hit: Mutex::new(None),
        faults: Mutex::new(Faults::default()),
    });
    eprintln!(
        "hicache-index demo: emulated Mooncake master at {} (events) and {} (HTTP); {} router threads, {} requests/s, {:?}",
        world.emulator.event_endpoint(),
        world.emulator.http_base(),
        args.routers,
        args.rate,
        args.duration
    );
    wait_subscribed(&world)?;

    let start = Instant::now();
    let (tx, rx) = mpsc::sync_channel::<Vec<PageHash>>(1024);
    let prompts = Arc::new(system_prompts(args.seed));
    let mut threads = Vec::new();
    for id in 0..args.routers {
        let (world, prompts, tx) = (world.clone(), prompts.clone(), tx.clone());
        let interval = Duration::from_secs_f64(args.routers as f64 / f64::from(args.rate));
        let seed = args.seed.wrapping_mul(1000).wrapping_add(id as u64);
        threads.push(spawn(&format!("router-{id}"), move || {
            router(&world, id, &prompts, &tx, seed, interval)
        })?);
    }
    drop(tx);
    let workers = {
        let world = world.clone();
        let plan = Plan {
            start,
            gap_at: args.duration.mul_f64(0.3),
            restart_at: args.duration.mul_f64(0.6),
            cap: args.store_pages,
        };
        spawn("workers", move || workers(&world, &rx, &plan))?
    };

    let tty = std::io::stderr().is_terminal();
    let mut last_line = Instant::now();
    // The workload runs for the duration, then on while a fault is still to be injected or
    // recovered from (a loaded machine slows recovery; the verdict waits for it, up to a bound).
    let until = |t: Duration| {
        t < args.duration || (faults_pending(&world) && t < args.duration + FAULT_GRACE)
    };
    while until(start.elapsed()) {
        std::thread::sleep(
            Duration::from_millis(250).min(
                args.duration
                    .saturating_sub(start.elapsed())
                    .max(Duration::from_millis(20)),
            ),
        );
        if tty {
            eprint!("\r{}\x1b[K", progress(&world, start.elapsed()));
        } else if last_line.elapsed() >= Duration::from_secs(5) {
            eprintln!("{}", progress(&world, start.elapsed()));
            last_line = Instant::now();
        }
    }
    world.stop.store(true, Ordering::Release);
    for t in threads {
        let _ = t.join();
    }
    let _ = workers.join();
    let elapsed = start.elapsed();
    if tty {
        eprintln!("\r{}\x1b[K", progress(&world, elapsed));
    }
    let counters = world.index.counters();
    let health = world.index.health();
    runtime.block_on(task.shutdown());
    let report = report(&world, &counters, health, elapsed, &args);
    say(&report.text);
    if let Some(failure) = report.failure {
        return Err(failure.into());
    }
    Ok(ExitCode::SUCCESS)
}

/// How long the workload may run past its duration while a fault is still pending.
const FAULT_GRACE: Duration = Duration::from_secs(30);

/// Whether an injected fault (or one still to be injected) has not been recovered from yet.
fn faults_pending(world: &World) -> bool {
    let f = lock(world);
    f.gap_at.is_none()
        || (f.gap_pages > 0 && f.gap_recovered.is_none())
        || f.restart_at.is_none()
        || f.restart_recovered.is_none()
}

fn spawn(
    name: &str,
    f: impl FnOnce() + Send + 'static,
) -> Result<std::thread::JoinHandle<()>, String> {
    std::thread::Builder::new()
        .name(name.into())
        .spawn(f)
        .map_err(|e| format!("cannot start a thread: {e}"))
}

/// Waits until the index is live and follows the stream (ZeroMQ drops what is published before
/// a subscription arrives): probe pages are stored until one is a hit.
fn wait_subscribed(world: &World) -> Result<(), String> {
    let start = Instant::now();
    let mut n = 0u32;
    while start.elapsed() < Duration::from_secs(15) {
        if world.index.health() == Health::Live {
            let probe = page_hashes(&world.layout, &[u32::MAX - n; PAGE as usize]);
            world.emulator.store_pages(&world.layout, &probe);
            let probing = Instant::now();
            while probing.elapsed() < Duration::from_millis(200) {
                if prefix(&world.index, &probe) == probe.len() {
                    return Ok(());
                }
                std::thread::sleep(Duration::from_millis(2));
            }
            n += 1;
        } else {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    Err(format!(
        "the subscriber did not follow the emulated master within 15 s (health {})",
        world.index.health().as_str()
    ))
}

#[cfg(test)]
mod tests;
