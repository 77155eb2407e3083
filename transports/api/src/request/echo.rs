//! How much of a client's input an error repeats: at most [`MAX_ECHO_BYTES`], cut by [`clip`].

/// The most bytes of a client's input an error message repeats (a model name, a field name,
/// the decoder's message); longer ones are cut, and end in `...`.
pub const MAX_ECHO_BYTES: usize = 200;

/// Returns `text` cut to at most [`MAX_ECHO_BYTES`] bytes on a character boundary, marked with
/// `...` when it was cut.
pub fn clip(text: &str) -> String {
    if text.len() <= MAX_ECHO_BYTES {
        return text.to_owned();
    }
    let mut end = MAX_ECHO_BYTES - 3;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &text[..end])
}
