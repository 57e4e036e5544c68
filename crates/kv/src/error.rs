//! An error and its causes as one line of text, for the places that hand an error to a client
//! (a RESP error reply) or to a status field rather than to a caller that walks `source()`.

/// `e`'s text followed by each cause's, joined by `": "`, a text that repeats one already shown
/// skipped (an error that prints its cause and also returns it from `source()` shows it once), as
/// the CLI's `chain` prints an `anyhow` chain.
pub fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut next = Some(e);
    // Bounded: a cycle of causes is a bug elsewhere, not a reason to hang a reply.
    for _ in 0..32 {
        let Some(cause) = next else { break };
        let text = cause.to_string();
        if !text.is_empty() && !parts.iter().any(|p| p.contains(&text)) {
            match parts.last_mut() {
                // "coordination store", then "coordination store 127.0.0.1:7000: refused".
                Some(last) if text.contains(last.as_str()) => *last = text,
                _ => parts.push(text),
            }
        }
        next = cause.source();
    }
    parts.join(": ")
}

#[cfg(test)]
mod tests {
    use super::chain;

    #[derive(Debug, thiserror::Error)]
    enum Outer {
        #[error("balancer b")]
        Typed(#[source] std::io::Error),
        #[error("store: {0}")]
        Printed(#[source] std::io::Error),
    }

    #[test]
    fn a_typed_cause_reaches_the_text_once() {
        let io = || std::io::Error::other("disk gone");
        assert_eq!(chain(&Outer::Typed(io())), "balancer b: disk gone");
        assert_eq!(chain(&Outer::Printed(io())), "store: disk gone");
        let coord = Outer::Typed(std::io::Error::other("balancer b at 10.0.0.1 refused"));
        assert_eq!(chain(&coord), "balancer b at 10.0.0.1 refused");
    }
}
