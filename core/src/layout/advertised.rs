//! Layouts as a session knows them: configured for a model, or advertised by a worker.

use alloc::string::String;

use super::objects::Layout;

/// A layout for one model (or the default layout, with no model).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelLayout {
    /// The served model name; `None` for the default layout.
    pub model: Option<String>,
    /// The layout.
    pub layout: Layout,
}

/// What one worker advertises about itself.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WorkerInfo {
    /// The KV event endpoint it was told about, if any.
    pub event_endpoint: Option<String>,
    /// The model it serves.
    pub model: Option<String>,
    /// Its object layout, if it advertises one.
    pub layout: Option<Layout>,
    /// Why its layout could not be read, when it advertises one that cannot be used (its
    /// ranks disagree, a PP rank is missing): its model then answers misses.
    pub layout_problem: Option<String>,
    /// Why it advertises no layout, when it serves a model but neither a layout nor a problem
    /// is known (SGLang's reason for a disabled document, no layout endpoint); `None` reads as
    /// "advertises no layout". A model none of whose workers advertises a layout has none.
    pub no_layout: Option<String>,
}
