//! The two runtimes under test, as [`Runtime`]s usable from synchronous code.

use std::time::{Duration, Instant};

use hicache_index_driver::{Control, QueryHandle, SubscriberConfig};

use crate::Runtime;

/// The tokio transport, on a tokio runtime of its own (one worker), like an application's.
#[derive(Debug)]
pub struct Tokio;

/// A tokio subscriber task with the runtime it runs on.
#[derive(Debug)]
pub struct TokioRunning {
    task: Option<hicache_index_tokio::SubscriberTask>,
    runtime: tokio::runtime::Runtime,
}

impl Runtime for Tokio {
    type Running = TokioRunning;

    fn spawn(config: SubscriberConfig) -> (QueryHandle, Control, TokioRunning) {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("a tokio runtime");
        let (query, task) = runtime
            .block_on(async { hicache_index_tokio::Subscriber::spawn(config) })
            .expect("a valid configuration");
        let control = task.control();
        let running = TokioRunning {
            task: Some(task),
            runtime,
        };
        (query, control, running)
    }

    fn shutdown(mut running: TokioRunning) -> Duration {
        let task = running.task.take().expect("a running task");
        let start = Instant::now();
        running.runtime.block_on(task.shutdown());
        start.elapsed()
    }

    fn drop_task(running: &mut TokioRunning) {
        drop(running.task.take());
    }
}

/// The smol transport, on smol's global executor.
#[derive(Debug)]
pub struct Smol;

impl Runtime for Smol {
    type Running = Option<hicache_index_smol::SubscriberTask>;

    fn spawn(config: SubscriberConfig) -> (QueryHandle, Control, Self::Running) {
        let (query, task) =
            hicache_index_smol::Subscriber::spawn(config).expect("a valid configuration");
        let control = task.control();
        (query, control, Some(task))
    }

    fn shutdown(running: Self::Running) -> Duration {
        let task = running.expect("a running task");
        let start = Instant::now();
        smol::block_on(task.shutdown());
        start.elapsed()
    }

    fn drop_task(running: &mut Self::Running) {
        drop(running.take());
    }
}
