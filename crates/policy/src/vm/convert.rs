//! Between Lua values and the engine's typed results: server ids as Lua keys, numbers, decision
//! tables as JSON, and mlua's errors as [`PolicyError`]s with `file:line`.

use mlua::{Lua, Table, Value};

use crate::PolicyError;
use crate::env::ServerId;
use crate::error::split_location;
use crate::source::Callback;

pub(super) fn vm_err(e: mlua::Error) -> PolicyError {
    e.into()
}

pub(super) fn server_key(lua: &Lua, id: &ServerId) -> mlua::Result<Value> {
    Ok(match id {
        ServerId::Num(n) => Value::Integer(*n),
        ServerId::Name(s) => Value::String(lua.create_string(s)?),
    })
}

pub(super) fn as_f64(v: &Value) -> Option<f64> {
    match v {
        Value::Integer(i) => Some(*i as f64),
        Value::Number(n) => Some(*n),
        _ => None,
    }
}

pub(super) fn describe(v: &Value) -> String {
    match v {
        Value::String(s) => format!("the string {:?}", s.to_string_lossy()),
        Value::Integer(i) => format!("the number {i}"),
        Value::Number(n) => format!("the number {n}"),
        Value::Boolean(b) => format!("the boolean {b}"),
        Value::Nil => "nothing (nil)".into(),
        other => format!("a {}", other.type_name()),
    }
}

pub(super) fn malformed(cb: Callback, expected: &'static str, got: &Value) -> PolicyError {
    PolicyError::Malformed {
        callback: cb,
        expected,
        got: describe(got),
    }
}

pub(super) fn table_to_json(t: &Table, depth: usize) -> Result<serde_json::Value, String> {
    if depth > 16 {
        return Err("a table nested more than 16 deep".into());
    }
    let len = t.raw_len();
    let mut entries: Vec<(Option<i64>, String, serde_json::Value)> = Vec::new();
    for pair in t.pairs::<Value, Value>() {
        let (k, v) = pair.map_err(|e| e.to_string())?;
        let (index, key) = match &k {
            Value::Integer(i) => (Some(*i), i.to_string()),
            Value::String(s) => (None, s.to_string_lossy()),
            other => return Err(format!("a table with a {} key", other.type_name())),
        };
        let val = match &v {
            Value::Integer(i) => serde_json::Value::from(*i),
            Value::Number(n) => serde_json::Number::from_f64(*n)
                .map(serde_json::Value::Number)
                .ok_or_else(|| format!("a non-finite number at key {key}"))?,
            Value::String(s) => serde_json::Value::String(s.to_string_lossy()),
            Value::Boolean(b) => serde_json::Value::Bool(*b),
            Value::Table(inner) => table_to_json(inner, depth + 1)?,
            other => return Err(format!("a {} at key {key}", other.type_name())),
        };
        entries.push((index, key, val));
    }
    if len > 0 && entries.len() == len && entries.iter().all(|(i, _, _)| i.is_some()) {
        // A sequence: an array in Lua's order.
        entries.sort_by_key(|(i, _, _)| *i);
        Ok(serde_json::Value::Array(
            entries.into_iter().map(|(_, _, v)| v).collect(),
        ))
    } else {
        Ok(serde_json::Value::Object(
            entries.into_iter().map(|(_, k, v)| (k, v)).collect(),
        ))
    }
}

pub(super) fn is_memory_error(e: &mlua::Error) -> bool {
    match e {
        mlua::Error::MemoryError(_) => true,
        mlua::Error::CallbackError { cause, .. } => is_memory_error(cause),
        mlua::Error::RuntimeError(m) => m.starts_with("not enough memory"),
        _ => false,
    }
}

pub(super) fn syntax_error(chunk: &str, e: mlua::Error) -> PolicyError {
    let raw = match &e {
        mlua::Error::SyntaxError { message, .. } => message.clone(),
        other => other.to_string(),
    };
    let (location, message) = split_location(&raw);
    PolicyError::Syntax {
        chunk: chunk.to_string(),
        location,
        message,
    }
}

pub(super) fn runtime_error(cb: Callback, e: &mlua::Error) -> PolicyError {
    let (raw, traceback) = flatten(e);
    let (msg, tb) = match raw.split_once("\nstack traceback:") {
        Some((m, t)) => (m.to_string(), format!("stack traceback:{t}")),
        None => (raw, traceback),
    };
    let (location, message) = split_location(&msg);
    PolicyError::Runtime {
        callback: cb,
        location,
        message,
        traceback: tb,
    }
}

/// Lua's message and traceback out of mlua's wrapping.
fn flatten(e: &mlua::Error) -> (String, String) {
    match e {
        mlua::Error::CallbackError { traceback, cause } => {
            let (m, _) = flatten(cause);
            (m, traceback.clone())
        }
        mlua::Error::RuntimeError(m) => (m.clone(), String::new()),
        mlua::Error::WithContext { context, cause } => {
            let (m, t) = flatten(cause);
            (format!("{context}: {m}"), t)
        }
        other => (other.to_string(), String::new()),
    }
}
