//! An error and its causes as one line of text: what a client reads in a RESP error reply, a
//! status field, and what `pliant` prints on a terminal.

/// `e`'s text followed by each cause's, joined by `": "`, each text once.
///
/// An error may show its cause in its own text as well as return it from `source()` ("store
/// {dir}: {source}"), and a wrapper may repeat the cause it wraps; printing the chain as it stands
/// gave "store ./data: store ./data: in use … in use". So each error contributes its own words
/// (its text less its cause's, when it ends with them), a text already shown is skipped, and a
/// text that holds the one before it replaces it, and a text that starts by naming what the one
/// before it ended with ("parent 127.0.0.1:7000", "127.0.0.1:7000: refused") drops the name.
pub fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut next = Some(e);
    // Bounded: a cycle of causes is a bug elsewhere, not a reason to hang a reply.
    for _ in 0..32 {
        let Some(cause) = next else { break };
        next = cause.source();
        let mut text = cause.to_string();
        if let Some(source) = next.map(ToString::to_string)
            && let Some(own) = text.strip_suffix(source.as_str())
            && !own.is_empty()
        {
            text = own.trim_end_matches([':', ' ']).to_string();
        }
        // "parent 127.0.0.1:7000", then the client's "127.0.0.1:7000: WRONGPASS …": the name
        // the last text ended with is not said again; what follows it extends the last text
        // (not a part of its own, which a later cause containing it would replace).
        if let Some(last) = parts.last()
            && let Some((name, rest)) = text.split_once(": ")
            && !name.is_empty()
            && last
                .strip_suffix(name)
                .is_some_and(|l| l.is_empty() || l.ends_with(' '))
        {
            text = format!("{last}: {rest}");
        }
        if text.is_empty() || parts.iter().any(|p| p.contains(&text)) {
            continue;
        }
        match parts.last_mut() {
            // "coordination store", then "coordination store 127.0.0.1:7000: refused".
            Some(last) if text.contains(last.as_str()) => *last = text,
            _ => parts.push(text),
        }
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

    #[derive(Debug, thiserror::Error)]
    #[error("parent {0}")]
    struct Named(&'static str, #[source] Client);

    #[derive(Debug, thiserror::Error)]
    #[error("{0}: WRONGPASS invalid password")]
    struct Client(&'static str);

    /// A cause that names its subject first ("127.0.0.1:7000: …", as a client's errors do) after
    /// a text that ended with that name says it once.
    #[test]
    fn a_name_the_text_before_ended_with_is_not_repeated() {
        assert_eq!(
            chain(&Named("127.0.0.1:7000", Client("127.0.0.1:7000"))),
            "parent 127.0.0.1:7000: WRONGPASS invalid password"
        );
        // Only a whole name at the end: "7000" is not "127.0.0.1:7000".
        assert_eq!(
            chain(&Named("127.0.0.1:7000", Client("7000"))),
            "parent 127.0.0.1:7000: 7000: WRONGPASS invalid password"
        );
        assert_eq!(
            chain(&Named("127.0.0.1:7000", Client("[::1]:7000"))),
            "parent 127.0.0.1:7000: [::1]:7000: WRONGPASS invalid password"
        );
    }

    #[derive(Debug, thiserror::Error)]
    #[error("store ./data: {0}")]
    struct Shows(#[source] Inner);

    #[derive(Debug, thiserror::Error)]
    #[error("store ./data: in use")]
    struct Inner;

    #[test]
    fn an_error_that_shows_its_cause_and_returns_it_is_told_once() {
        assert_eq!(chain(&Shows(Inner)), "store ./data: in use");
        let io = std::io::Error::from(std::io::ErrorKind::AddrInUse);
        #[derive(Debug, thiserror::Error)]
        #[error("{0}")]
        struct Same(#[source] std::io::Error);
        assert_eq!(
            chain(&Same(io)),
            std::io::Error::from(std::io::ErrorKind::AddrInUse).to_string()
        );
    }
}
