//! Encoders that produce the Mooncake master's exact bytes.
// PENDING (helper).
