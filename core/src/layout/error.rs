//! Why a layout cannot be used: [`LayoutError`].

use alloc::string::String;
use core::fmt;

use super::limits::{MAX_OBJECTS_PER_PAGE, MAX_SUFFIX_LEN};

/// Why a layout cannot be used.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum LayoutError {
    /// The page size is 0.
    ZeroPageSize,
    /// No pool has [`HitPolicy::AllPages`](crate::layout::HitPolicy::AllPages): nothing would
    /// tie a hit to every page.
    NoAllPagesPool,
    /// A pool lists no suffix.
    EmptyPool {
        /// The pool's name.
        pool: String,
    },
    /// A [`HitPolicy::TrailingPages`](crate::layout::HitPolicy::TrailingPages) window of 0 pages.
    ZeroTrailingPages {
        /// The pool's name.
        pool: String,
    },
    /// A `trailing_pages` pool of a layout document gives no window size.
    MissingTrailingPages {
        /// The pool's name.
        pool: String,
    },
    /// A layout document names a hit policy this crate does not know.
    UnknownHitPolicy {
        /// The pool's name.
        pool: String,
        /// The policy as written.
        policy: String,
    },
    /// A suffix does not start with `_`.
    SuffixWithoutUnderscore {
        /// The suffix.
        suffix: String,
    },
    /// A suffix is longer than [`MAX_SUFFIX_LEN`] bytes.
    SuffixTooLong {
        /// The suffix.
        suffix: String,
    },
    /// A suffix holds a run of 64 lowercase hex characters, which could pass for a page hash.
    SuffixLooksLikeHash {
        /// The suffix.
        suffix: String,
    },
    /// The same suffix appears twice (in one pool or across pools).
    DuplicateSuffix {
        /// The suffix.
        suffix: String,
    },
    /// The key prefix holds a control character.
    ControlCharInPrefix,
    /// One page would have more than [`MAX_OBJECTS_PER_PAGE`] objects.
    TooManyObjects,
    /// A parallelism size (tp, pp, tp_lcm, dcp or cp) is 0.
    ZeroParallelism,
    /// SGLang parameters whose key scheme this crate does not know; use SGLang's advertised
    /// layout document instead.
    Unsupported(&'static str),
    /// A layout document says `"enabled": false`: the worker does not stand behind its pools
    /// (they may name one TP rank's objects only), so it is never used as a layout.
    Disabled {
        /// The document's `reason`, if it gave one.
        reason: Option<String>,
    },
}

impl fmt::Display for LayoutError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LayoutError::ZeroPageSize => f.write_str("page size must be at least 1"),
            LayoutError::NoAllPagesPool => f.write_str("no pool has the all_pages hit policy"),
            LayoutError::EmptyPool { pool } => write!(f, "pool {pool:?} has no suffix"),
            LayoutError::ZeroTrailingPages { pool } => {
                write!(f, "pool {pool:?} has a trailing window of 0 pages")
            }
            LayoutError::MissingTrailingPages { pool } => {
                write!(f, "trailing_pages pool {pool:?} gives no window size")
            }
            LayoutError::UnknownHitPolicy { pool, policy } => {
                write!(f, "pool {pool:?} has unknown hit policy {policy:?}")
            }
            LayoutError::SuffixWithoutUnderscore { suffix } => {
                write!(f, "suffix {suffix:?} does not start with '_'")
            }
            LayoutError::SuffixTooLong { suffix } => {
                write!(f, "suffix {suffix:?} is longer than {MAX_SUFFIX_LEN} bytes")
            }
            LayoutError::SuffixLooksLikeHash { suffix } => {
                write!(f, "suffix {suffix:?} holds 64 hex characters in a row")
            }
            LayoutError::DuplicateSuffix { suffix } => write!(f, "suffix {suffix:?} repeats"),
            LayoutError::ControlCharInPrefix => f.write_str("key prefix holds a control character"),
            LayoutError::TooManyObjects => {
                write!(f, "more than {MAX_OBJECTS_PER_PAGE} objects per page")
            }
            LayoutError::ZeroParallelism => f.write_str("a parallelism size is 0"),
            LayoutError::Unsupported(what) => write!(f, "unsupported SGLang parameters: {what}"),
            LayoutError::Disabled {
                reason: Some(reason),
            } => write!(
                f,
                "the layout document is disabled (\"enabled\": false: {reason}); give the layout \
                 flags or a document SGLang stands behind"
            ),
            LayoutError::Disabled { reason: None } => f.write_str(
                "the layout document is disabled (\"enabled\": false); give the layout flags or a \
                 document SGLang stands behind",
            ),
        }
    }
}

impl core::error::Error for LayoutError {}
