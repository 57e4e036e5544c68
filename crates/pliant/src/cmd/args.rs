//! Options several commands share, each defined once here and flattened into the commands'
//! arguments (`#[command(flatten)]`), so a flag has one name, type and default everywhere. Where
//! a command's flag means something more specific (what its JSON holds, what its chart shows),
//! the command words its help with `#[command(mut_arg(..))]`.

use std::path::PathBuf;

use pliant_policy::ParamValue;

/// `--json`.
#[derive(clap::Args, Clone, Copy, Debug)]
pub struct Json {
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// `--plot FILE`.
#[derive(clap::Args, Clone, Debug)]
pub struct Plot {
    /// Chart (.png or .svg).
    #[arg(long, value_name = "FILE")]
    pub plot: Option<PathBuf>,
}

/// `--seed N`.
#[derive(clap::Args, Clone, Copy, Debug)]
pub struct Seed {
    /// Seed.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

/// `--param KEY=VALUE`, repeatable: parameters of a Lua policy.
#[derive(clap::Args, Clone, Debug)]
pub struct PolicyParams {
    /// Policy parameter KEY=VALUE (repeatable).
    #[arg(long = "param", value_name = "KEY=VALUE", value_parser = parse_param)]
    pub params: Vec<(String, ParamValue)>,
}

/// A parameter's value as `--param` takes it.
pub(crate) fn param_text(v: &ParamValue) -> String {
    match v {
        ParamValue::Num(n) => n.to_string(),
        ParamValue::Str(s) => s.clone(),
    }
}

pub(crate) fn parse_param(s: &str) -> Result<(String, ParamValue), String> {
    let (k, v) = s
        .split_once('=')
        .ok_or_else(|| format!("expected KEY=VALUE, got {s:?}"))?;
    if k.is_empty() {
        return Err(format!("empty parameter name in {s:?}"));
    }
    Ok((k.to_string(), ParamValue::parse(v)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn params_split_at_the_first_equals_sign() {
        assert_eq!(
            parse_param("target=1000"),
            Ok(("target".into(), ParamValue::parse("1000")))
        );
        assert_eq!(
            parse_param("expr=a=b"),
            Ok(("expr".into(), ParamValue::parse("a=b")))
        );
        assert!(parse_param("target").is_err());
        assert!(parse_param("=5").is_err());
    }
}
