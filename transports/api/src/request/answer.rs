//! The answers: a query's ([`QueryAnswer`]), a refusal's ([`ErrorAnswer`]) and a batch's
//! ([`BatchAnswer`]).

use hicache_index::Hits;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// The answer: the fully present prefix, the per-page map, and the trust to put in it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct QueryAnswer {
    /// Leading pages fully present: the pages a router may count on (trailing-page pools are
    /// judged on this prefix).
    pub prefix_pages: usize,
    /// Whether each page has all its objects, from the first page: by default the pages
    /// checked until the first that misses, that one included (nothing after it was hashed);
    /// with `"page_map": true`, every full page of the request.
    pub pages: Vec<bool>,
    /// The index's health when it answered: `"live"`, `"reconciling"` (the master's signals
    /// showed objects hidden or dropped without an event a moment ago: a hit may be one of
    /// them until the reconcile under way is applied), `"recovering"`, `"connecting"`,
    /// `"disconnected"` or `"events_disabled"`; `"layout_conflict"` when the model's workers
    /// disagree on its layout, `"no_layout"` when none of them advertises one (nothing is
    /// claimed, see `reason`).
    pub trust: String,
    /// Full pages in the request.
    pub total_pages: usize,
    /// Of the prefix pages, how many were seen with a memory replica.
    pub memory_pages: usize,
    /// Of the prefix pages, how many were seen only on disk.
    pub disk_only_pages: usize,
    /// Why nothing could be claimed, when the model's layout is in doubt or unknown (`trust` is
    /// then `"layout_conflict"` or `"no_layout"`). Absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl QueryAnswer {
    /// Builds the answer from the index's hits and page map.
    pub fn new(hits: Hits, pages: Vec<bool>) -> QueryAnswer {
        QueryAnswer {
            prefix_pages: hits.prefix_pages,
            pages,
            trust: hits.trust.as_str().to_owned(),
            total_pages: hits.total_pages,
            memory_pages: hits.memory_pages,
            disk_only_pages: hits.disk_only_pages,
            reason: None,
        }
    }

    /// The answer for a model whose layout is in doubt: no page claimed, trust
    /// `"layout_conflict"`, and the reason. The page map is empty (the page size is in doubt too).
    pub fn layout_conflict(reason: String) -> QueryAnswer {
        QueryAnswer {
            prefix_pages: 0,
            pages: Vec::new(),
            trust: TRUST_LAYOUT_CONFLICT.to_owned(),
            total_pages: 0,
            memory_pages: 0,
            disk_only_pages: 0,
            reason: Some(reason),
        }
    }

    /// The answer for a model none of whose workers advertises a layout: no page claimed,
    /// trust `"no_layout"`, and the reason. The page map is empty (the page size is unknown).
    pub fn no_layout(reason: String) -> QueryAnswer {
        QueryAnswer {
            trust: TRUST_NO_LAYOUT.to_owned(),
            ..QueryAnswer::layout_conflict(reason)
        }
    }

    /// Encodes the answer as JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("an answer always serialises")
    }

    /// Encodes the answer as a msgpack map (field names as keys).
    pub fn to_msgpack(&self) -> Vec<u8> {
        rmp_serde::to_vec_named(self).expect("an answer always serialises")
    }
}

/// The `trust` of an answer for a model whose workers disagree on its layout.
pub const TRUST_LAYOUT_CONFLICT: &str = "layout_conflict";

/// The `trust` of an answer for a model none of whose workers advertises a layout.
pub const TRUST_NO_LAYOUT: &str = "no_layout";

/// A refused request's body: `{"error": "..."}`, with the known models when the request named
/// an unknown one (or none among several), and, in a batch's answers, the HTTP status the
/// query alone would have had.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ErrorAnswer {
    /// What was wrong, in one line (at most a few hundred bytes of the input repeated).
    pub error: String,
    /// The models the index knows, when the request named an unknown one or none among
    /// several.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub models: Option<Vec<String>>,
    /// In a batch's answers only: the status (400, 413) the query alone would have had.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
}

/// One answer of a batch: the query's answer, or why it was refused.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum BatchItem {
    /// The query's answer.
    Answer(QueryAnswer),
    /// Why the query was refused (the others are still answered).
    Error(ErrorAnswer),
}

/// The answers of a batch, one per query, in the order asked: `{"answers": [...]}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct BatchAnswer {
    /// Each query's answer or error.
    pub answers: Vec<BatchItem>,
}

impl BatchAnswer {
    /// Encodes the answers as JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("answers always serialise")
    }

    /// Encodes the answers as a msgpack map.
    pub fn to_msgpack(&self) -> Vec<u8> {
        rmp_serde::to_vec_named(self).expect("answers always serialise")
    }
}
