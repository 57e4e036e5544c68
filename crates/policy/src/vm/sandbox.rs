//! The sandbox around a policy: what the standard library keeps, the guarded globals, the
//! instruction budget, and the engine-provided names other than `servers` (`params`,
//! `timeseries()`, `RDstate`/`WRstate`, `BAL_LOG`).

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use mlua::{Function, HookTriggers, Lua, Table, Value, Variadic, VmState};

use super::convert::{as_f64, describe};
use crate::env::{ParamValue, Params, TimeSeries};
use crate::error::Location;
use crate::state::{StateStore, StateValue};

/// How many VM instructions pass between two budget checks. Instruction counts are reported in
/// multiples of this; lower values cost a hook call more often (a hook call is ~50 ns).
pub(super) const HOOK_STEP: u32 = 1000;

/// Installs the sandbox around the globals: wraps `pcall`/`xpcall` so that a budget or memory
/// error cannot be swallowed, guards the engine-provided names against replacement (also through
/// `rawset`), and routes `print` to the log.
pub(super) const PRELUDE: &str = r#"
local exhausted, protected, log = ...
local raw_pcall, raw_xpcall, raw_error, raw_rawset, tostring = pcall, xpcall, error, rawset, tostring
local G = _G
local function pass(ok, ...)
  if not ok then
    local e = ...
    if e == "not enough memory" or exhausted() then raw_error(e, 0) end
  end
  return ok, ...
end
pcall = function(f, ...) return pass(raw_pcall(f, ...)) end
xpcall = function(f, h, ...) return pass(raw_xpcall(f, h, ...)) end
rawset = function(t, k, v)
  if t == G and protected[k] ~= nil then
    raw_error("'" .. tostring(k) .. "' is provided by the engine and cannot be replaced", 2)
  end
  return raw_rawset(t, k, v)
end
print = function(...) log(2, ...) end
load, loadfile, dofile, require, collectgarbage = nil, nil, nil, nil, nil
setmetatable(G, {
  __index = protected,
  __newindex = function(t, k, v)
    if protected[k] ~= nil then
      raw_error("'" .. tostring(k) .. "' is provided by the engine and cannot be replaced", 2)
    end
    raw_rawset(t, k, v)
  end,
  __metatable = "protected",
})
"#;

/// Instruction accounting shared with the hook.
#[derive(Debug, Default)]
pub(super) struct Budget {
    pub(super) used: Cell<u64>,
    pub(super) limit: Cell<u64>,
    pub(super) exhausted: Cell<bool>,
    pub(super) at: RefCell<Option<Location>>,
}

/// The policy's persisted state as the VM sees it.
pub(super) struct StateCell {
    pub(super) policy: String,
    pub(super) store: Rc<dyn StateStore>,
    pub(super) value: RefCell<Option<StateValue>>,
    /// During a dry run, `WRstate` changes only the in-memory value.
    pub(super) dry_run: Cell<bool>,
}

/// Stops a callback once it has used its instruction budget.
///
/// Lua 5.4 pays for a count hook on every instruction whatever the count (with any count hook set,
/// each instruction goes through `luaG_traceexec`), so a larger [`HOOK_STEP`] would not make
/// policies faster: measured on the 2,048-server scan, a step of 1,000 and one of 1,000,000 cost
/// the same. The step stays small so that the budget is exact to within 1,000 instructions.
pub(super) fn set_budget_hook(lua: &Lua, budget: &Rc<Budget>) -> mlua::Result<()> {
    let budget = budget.clone();
    lua.set_hook(
        HookTriggers::new().every_nth_instruction(HOOK_STEP),
        move |_, debug| {
            let used = budget.used.get() + u64::from(HOOK_STEP);
            budget.used.set(used);
            if used > budget.limit.get() || budget.exhausted.get() {
                if !budget.exhausted.replace(true) {
                    let src = debug.source();
                    *budget.at.borrow_mut() = match (src.short_src, debug.current_line()) {
                        (Some(chunk), Some(line)) => Some(Location {
                            chunk: chunk.into_owned(),
                            line: line as u32,
                        }),
                        _ => None,
                    };
                }
                return Err(mlua::Error::RuntimeError(
                    "instruction budget exceeded".into(),
                ));
            }
            Ok(VmState::Continue)
        },
    )
}

pub(super) fn install_env(
    lua: &Lua,
    protected: &Table,
    state: &Rc<StateCell>,
    series: &TimeSeries,
    params: &Params,
    policy: &str,
) -> mlua::Result<()> {
    protected.raw_set("whoami", 0)?;

    let p = lua.create_table()?;
    for (k, v) in params {
        match v {
            ParamValue::Num(n) => p.raw_set(k.as_str(), *n)?,
            ParamValue::Str(s) => p.raw_set(k.as_str(), s.as_str())?,
        }
    }
    protected.raw_set("params", p)?;

    // The time series is read in place: `get` indexes the service's buffer, so a scan of
    // millions of points copies nothing. `self` is taken as a `bool` because mlua reads that
    // straight off the stack, where a table or userdata `self` costs a registry reference per
    // call: a third of the time of a `get`.
    let ts = lua.create_table()?;
    let buf = series.inner().clone();
    ts.raw_set(
        "size",
        lua.create_function(move |_, _this: bool| Ok(buf.borrow().len()))?,
    )?;
    let buf = series.inner().clone();
    ts.raw_set(
        "get",
        lua.create_function(move |_, (_this, i): (bool, i64)| {
            let p = usize::try_from(i - 1)
                .ok()
                .and_then(|i| buf.borrow().get(i).copied());
            Ok(p.map_or((None, None), |(t, v)| (Some(t), Some(v))))
        })?,
    )?;
    protected.raw_set(
        "timeseries",
        lua.create_function(move |_, ()| Ok(ts.clone()))?,
    )?;

    let st = state.clone();
    protected.raw_set(
        "RDstate",
        lua.create_function(move |lua, ()| {
            Ok(match &*st.value.borrow() {
                None => Value::Integer(0),
                Some(StateValue::Num(n)) => Value::Number(*n),
                Some(StateValue::Str(s)) => Value::String(lua.create_string(s)?),
            })
        })?,
    )?;
    let st = state.clone();
    protected.raw_set(
        "WRstate",
        lua.create_function(move |_, v: Value| {
            let value = match &v {
                Value::String(s) => StateValue::Str(s.to_str()?.to_string()),
                v => match as_f64(v) {
                    Some(n) => StateValue::Num(n),
                    None => {
                        return Err(mlua::Error::RuntimeError(format!(
                            "WRstate takes a number or a string, got {}",
                            describe(v)
                        )));
                    }
                },
            };
            if st.value.borrow().as_ref() == Some(&value) {
                return Ok(()); // unchanged: no write, no fsync
            }
            if !st.dry_run.get() {
                st.store
                    .save(&st.policy, &value)
                    .map_err(|e| mlua::Error::RuntimeError(e.to_string()))?;
            }
            *st.value.borrow_mut() = Some(value);
            Ok(())
        })?,
    )?;
    protected.raw_set("BAL_LOG", bal_log(lua, policy)?)?;
    Ok(())
}

pub(super) fn bal_log(lua: &Lua, policy: &str) -> mlua::Result<Function> {
    let policy = policy.to_string();
    lua.create_function(move |_, (level, parts): (i64, Variadic<Value>)| {
        let msg = parts
            .iter()
            .map(|v| match v {
                Value::String(s) => s.to_string_lossy(),
                Value::Integer(i) => i.to_string(),
                Value::Number(n) => n.to_string(),
                Value::Boolean(b) => b.to_string(),
                Value::Nil => "nil".into(),
                other => other.type_name().to_string(),
            })
            .collect::<Vec<_>>()
            .join(" ");
        // Mantle's levels follow Ceph's debug levels: 0 always shown, higher is chattier.
        match level {
            i64::MIN..=0 => {
                tracing::error!(target: "pliant_policy::lua", policy = %policy, "{msg}")
            }
            1 => tracing::warn!(target: "pliant_policy::lua", policy = %policy, "{msg}"),
            2..=5 => tracing::info!(target: "pliant_policy::lua", policy = %policy, "{msg}"),
            6..=10 => tracing::debug!(target: "pliant_policy::lua", policy = %policy, "{msg}"),
            _ => tracing::trace!(target: "pliant_policy::lua", policy = %policy, "{msg}"),
        }
        Ok(())
    })
}

/// The memory cap lifted for as long as this lives, for what the engine itself builds in a
/// policy's state (the `servers` tables, `targets`): its size is set by the cluster, not by the
/// policy, and with a cap mlua wraps every call in a protected call. Dropping it restores the cap,
/// on every path out, errors included.
pub(super) struct CapLifted<'a> {
    lua: &'a Lua,
    cap: usize,
}

impl<'a> CapLifted<'a> {
    pub(super) fn new(lua: &'a Lua) -> mlua::Result<Self> {
        let cap = lua.set_memory_limit(0)?;
        Ok(Self { lua, cap })
    }
}

impl Drop for CapLifted<'_> {
    fn drop(&mut self) {
        // Setting a limit fails only where memory control is unavailable, and lifting it just
        // succeeded on this same state.
        if let Err(e) = self.lua.set_memory_limit(self.cap) {
            tracing::error!("could not restore a policy's memory cap: {e}");
        }
    }
}
