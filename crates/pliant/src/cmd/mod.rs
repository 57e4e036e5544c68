//! One module per subcommand.

pub mod admin;
pub mod args;
pub mod bench;
pub mod cluster;
pub mod demo;
pub mod docs;
pub mod fs;
pub mod input;
pub mod parsplice;
pub mod policy;
pub mod policy_demo;
pub mod regimes;
pub mod replay;
pub mod rescale;
pub mod scale;
pub mod serve;
pub mod sim;
pub mod trace;

/// An error and its causes on one line, each text once (see [`pliant_proto::error::chain`]).
pub fn chain(e: &anyhow::Error) -> String {
    pliant_proto::error::chain(e.as_ref())
}

#[cfg(test)]
mod tests {
    use super::chain;

    #[derive(Debug)]
    struct Shown(&'static str, Option<std::io::Error>);
    impl std::fmt::Display for Shown {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(self.0)
        }
    }
    impl std::error::Error for Shown {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            self.1.as_ref().map(|e| e as _)
        }
    }

    #[derive(Debug)]
    struct Outer(Shown);
    impl std::fmt::Display for Outer {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "store ./data: {}", self.0)
        }
    }
    impl std::error::Error for Outer {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn an_error_chain_prints_each_text_once() {
        let io = || std::io::Error::from(std::io::ErrorKind::AddrInUse);
        let e = anyhow::Error::new(io()).context(io().to_string());
        assert_eq!(chain(&e), io().to_string());

        let e =
            anyhow::Error::new(Shown("store ./data: in use", Some(io()))).context("store ./data");
        assert_eq!(
            chain(&e),
            format!("store ./data: in use: {}", io()),
            "the context the cause repeats is dropped, the new cause kept"
        );

        let e = anyhow::Error::new(Shown("invalid gzip header", None)).context("t.csv.gz");
        assert_eq!(chain(&e), "t.csv.gz: invalid gzip header");

        // A library error that shows its source and returns it too, around one that does.
        let inner = Shown("store ./data: in use", None);
        let e = anyhow::Error::new(Outer(inner)).context("starting");
        assert_eq!(chain(&e), "starting: store ./data: in use");
    }
}
