//! The master's HTTP admin side: request bytes, an HTTP/1.1 response reader (sans IO, on
//! `httparse`), a blocking `GET`, and the three jobs the core asks for. URLs are parsed by `url`,
//! keys percent-encoded by `percent-encoding`.
//!
//! Every job runs on a thread of its own ([`HttpJob::run`], started by the [`crate::Driver`]),
//! never on the runtime's workers: reading a key list of tens of megabytes takes a CPU for a
//! while, and the loop must keep taking events meanwhile.
//! ```text
//! Effect::FetchSnapshot -> GET {base}/kv_events/status             -> watermark
//!                          GET {base}/get_all_keys                 -> lines  -> snapshot chunks
//! Effect::VerifyKeys    -> GET {base}/batch_query_keys?keys=k1,k2  -> {"success":true,
//!                          (split so every target stays short)         "data":{"k1":{"ok":true}}}
//!                                                                     -> handle_verify_result
//! Effect::ReadStatus    -> GET {base}/kv_events/status             -> Input::Status
//! Effect::ReadSignals   -> GET {base}/metrics                      -> Input::Signals
//! ```

mod error;
mod job;
mod master;
mod response;

pub use error::HttpError;
pub use job::{
    parse_batch_query, parse_events_status, parse_signals, parse_watermark, HttpJob, HttpOutcome,
};
pub use master::MasterHttp;
pub use response::ResponseReader;

#[cfg(test)]
mod tests;
