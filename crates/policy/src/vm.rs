//! One policy in its own sandboxed Lua state: the environment, the limits, and the conversion of
//! callback results into typed decisions.
//!
//! Each installed policy version gets a fresh VM, so a policy that leaks memory or corrupts its
//! globals cannot affect the next one, and the memory cap is per policy.

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use mlua::{Function, HookTriggers, Lua, LuaOptions, StdLib, Table, Value, Variadic, VmState};

use crate::decision::{HowMuch, Targets};
use crate::env::{Metrics, ParamValue, Params, ServerId, TimeSeries};
use crate::error::{Location, split_location};
use crate::source::{Callback, Chunk, PolicySource, Style};
use crate::state::{StateStore, StateValue};
use crate::{Limits, PolicyError};

/// How many VM instructions pass between two budget checks. Instruction counts are reported in
/// multiples of this; lower values cost a hook call more often (a hook call is ~50 ns).
pub(crate) const HOOK_STEP: u32 = 1000;

/// Installs the sandbox around the globals: wraps `pcall`/`xpcall` so that a budget or memory
/// error cannot be swallowed, guards the engine-provided names against replacement (also through
/// `rawset`), and routes `print` to the log.
const PRELUDE: &str = r#"
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

/// Clears the computed `load` of every server table, at VM speed rather than one Rust→Lua call
/// per server.
const CLEAR_LOAD: &str = "local seq = ... for i = 1, #seq do seq[i].load = nil end";

/// Instruction accounting shared with the hook.
#[derive(Debug, Default)]
struct Budget {
    used: Cell<u64>,
    limit: Cell<u64>,
    exhausted: Cell<bool>,
    at: RefCell<Option<Location>>,
}

/// The policy's persisted state as the VM sees it.
struct StateCell {
    policy: String,
    store: Rc<dyn StateStore>,
    value: RefCell<Option<StateValue>>,
    /// During a dry run, `WRstate` changes only the in-memory value.
    dry_run: Cell<bool>,
}

/// A compiled policy with its environment.
pub(crate) struct Vm {
    lua: Lua,
    name: String,
    limits: Limits,
    style: Compiled,
    protected: Table,
    servers: Table,
    server_tables: Vec<Table>,
    /// The same tables as a Lua sequence, for [`CLEAR_LOAD`].
    server_seq: Table,
    clear_load: Function,
    metric_keys: Vec<mlua::LuaString>,
    load_col: Option<usize>,
    layout: Option<u64>,
    /// The values last written into the Lua tables, row-major like [`Metrics`]; only values
    /// that differ are written again.
    pushed: Vec<f64>,
    budget: Rc<Budget>,
    state: Rc<StateCell>,
}

enum Compiled {
    Functions([Option<Function>; 4]),
    Chunks([Option<Function>; 4]),
}

impl Compiled {
    fn get(&self, cb: Callback) -> Option<&Function> {
        let i = cb as usize;
        match self {
            Self::Functions(f) | Self::Chunks(f) => f[i].as_ref(),
        }
    }
}

fn vm_err(e: mlua::Error) -> PolicyError {
    PolicyError::Vm(e.to_string())
}

impl Vm {
    /// Compiles `source` in a fresh sandbox. Function-style sources run their top level here (to
    /// define the functions), under the same limits as a callback.
    pub(crate) fn new(
        source: &PolicySource,
        limits: Limits,
        store: Rc<dyn StateStore>,
        series: &TimeSeries,
        params: &Params,
    ) -> Result<Self, PolicyError> {
        let lua = Lua::new_with(
            StdLib::STRING | StdLib::TABLE | StdLib::MATH | StdLib::UTF8,
            LuaOptions::default(),
        )
        .map_err(vm_err)?;
        let budget = Rc::new(Budget::default());
        let state = Rc::new(StateCell {
            value: RefCell::new(store.load(&source.name)?),
            policy: source.name.clone(),
            store,
            dry_run: Cell::new(false),
        });
        let protected = lua.create_table().map_err(vm_err)?;
        let servers = lua.create_table().map_err(vm_err)?;
        install_env(
            &lua,
            &protected,
            &servers,
            &state,
            series,
            params,
            &source.name,
        )
        .map_err(vm_err)?;

        let exhausted = {
            let b = budget.clone();
            lua.create_function(move |_, ()| Ok(b.exhausted.get()))
                .map_err(vm_err)?
        };
        let log = bal_log(&lua, &source.name).map_err(vm_err)?;
        lua.load(PRELUDE)
            .set_name("=prelude")
            .call::<()>((exhausted, protected.clone(), log))
            .map_err(vm_err)?;

        let hook_budget = budget.clone();
        lua.set_hook(
            HookTriggers::new().every_nth_instruction(HOOK_STEP),
            move |_, debug| {
                let used = hook_budget.used.get() + u64::from(HOOK_STEP);
                hook_budget.used.set(used);
                if used > hook_budget.limit.get() || hook_budget.exhausted.get() {
                    if !hook_budget.exhausted.replace(true) {
                        let src = debug.source();
                        *hook_budget.at.borrow_mut() = match (src.short_src, debug.current_line()) {
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
        .map_err(vm_err)?;
        lua.set_memory_limit(limits.memory_bytes).map_err(vm_err)?;

        let server_seq = lua.create_table().map_err(vm_err)?;
        let clear_load = lua
            .load(CLEAR_LOAD)
            .set_name("=refresh")
            .into_function()
            .map_err(vm_err)?;
        let mut vm = Self {
            lua,
            name: source.name.clone(),
            limits,
            style: Compiled::Chunks([None, None, None, None]),
            protected,
            servers,
            server_tables: Vec::new(),
            server_seq,
            clear_load,
            metric_keys: Vec::new(),
            load_col: None,
            layout: None,
            pushed: Vec::new(),
            budget,
            state,
        };
        vm.style = vm.compile(&source.style)?;
        Ok(vm)
    }

    fn compile(&self, style: &Style) -> Result<Compiled, PolicyError> {
        let load = |chunk: &Chunk| -> Result<Function, PolicyError> {
            self.lua
                .load(&chunk.code)
                .set_name(format!("={}", chunk.name))
                .into_function()
                .map_err(|e| syntax_error(&chunk.name, e))
        };
        match style {
            Style::Functions(chunk) => {
                let main = load(chunk)?;
                self.run(Callback::Load, || main.call::<()>(()))
                    .map_err(|e| match e {
                        // The top level is not a callback; say so rather than blame `load`.
                        PolicyError::Runtime {
                            location,
                            message,
                            traceback,
                            ..
                        } => PolicyError::Runtime {
                            callback: Callback::Load,
                            location,
                            message: format!("while defining the policy: {message}"),
                            traceback,
                        },
                        other => other,
                    })?;
                let globals = self.lua.globals();
                let mut fns: [Option<Function>; 4] = [None, None, None, None];
                for cb in Callback::ALL {
                    match globals.raw_get::<Value>(cb.name()).map_err(vm_err)? {
                        Value::Function(f) => fns[cb as usize] = Some(f),
                        Value::Nil => {}
                        other => {
                            return Err(PolicyError::Shape(format!(
                                "{}: global `{}` is a {}, expected a function",
                                chunk.name,
                                cb,
                                other.type_name()
                            )));
                        }
                    }
                }
                if fns.iter().all(Option::is_none) {
                    return Err(PolicyError::Shape(format!(
                        "{} defines none of the functions load, when, where, howmuch",
                        chunk.name
                    )));
                }
                Ok(Compiled::Functions(fns))
            }
            Style::Chunks(chunks) => {
                if chunks.is_empty() {
                    return Err(PolicyError::Shape(
                        "a policy needs at least one chunk".into(),
                    ));
                }
                let mut fns: [Option<Function>; 4] = [None, None, None, None];
                for (cb, chunk) in chunks {
                    fns[*cb as usize] = Some(load(chunk)?);
                }
                Ok(Compiled::Chunks(fns))
            }
        }
    }

    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    pub(crate) fn is_chunk_style(&self) -> bool {
        matches!(self.style, Compiled::Chunks(_))
    }

    pub(crate) fn has(&self, cb: Callback) -> bool {
        self.style.get(cb).is_some()
    }

    /// Runs `f` under the instruction budget, mapping failures to typed errors for `cb`.
    fn run<R>(&self, cb: Callback, f: impl FnOnce() -> mlua::Result<R>) -> Result<R, PolicyError> {
        self.budget.used.set(0);
        self.budget.limit.set(self.limits.instructions);
        self.budget.exhausted.set(false);
        let r = f();
        let exhausted = self.budget.exhausted.replace(false);
        r.map_err(|e| {
            if exhausted {
                return PolicyError::Budget {
                    callback: cb,
                    budget: self.limits.instructions,
                    location: self.budget.at.borrow_mut().take(),
                };
            }
            if is_memory_error(&e) {
                // Free what the failed callback allocated so the next one starts clean.
                let _ = self.lua.gc_collect();
                return PolicyError::Memory {
                    callback: cb,
                    limit: self.limits.memory_bytes,
                };
            }
            runtime_error(cb, &e)
        })
    }

    /// Instructions the last callback used, in multiples of [`HOOK_STEP`].
    pub(crate) fn instructions_used(&self) -> u64 {
        self.budget.used.get()
    }

    pub(crate) fn set_dry_run(&self, on: bool) -> Result<(), PolicyError> {
        self.state.dry_run.set(on);
        if !on {
            // Forget what the dry run wrote: the real run starts from the persisted value.
            *self.state.value.borrow_mut() = self.state.store.load(&self.state.policy)?;
        }
        Ok(())
    }

    /// Makes the Lua-side `servers` table match `metrics`.
    ///
    /// While the set of servers and metric names is unchanged the per-server tables are reused
    /// and only values that changed are written, which is what keeps refreshes of thousands of
    /// servers cheap. The memory cap is lifted for the refresh: what it allocates is bounded by
    /// the metrics, not by the policy, and with a cap mlua guards every write with a protected
    /// call, which costs more than the write.
    pub(crate) fn refresh(&mut self, metrics: &Metrics) -> Result<(), PolicyError> {
        self.lua.set_memory_limit(0).map_err(vm_err)?;
        let r = self.refresh_tables(metrics);
        self.lua
            .set_memory_limit(self.limits.memory_bytes)
            .map_err(vm_err)?;
        r.map_err(vm_err)
    }

    fn refresh_tables(&mut self, metrics: &Metrics) -> mlua::Result<()> {
        self.protected
            .raw_set("whoami", server_key(&self.lua, metrics.whoami())?)?;
        if self.layout != Some(metrics.layout()) {
            self.servers = self
                .lua
                .create_table_with_capacity(0, metrics.ids().len())?;
            for alias in ["servers", "server", "mds"] {
                self.protected.raw_set(alias, &self.servers)?;
            }
            self.metric_keys = metrics
                .names()
                .iter()
                .map(|n| self.lua.create_string(n))
                .collect::<mlua::Result<_>>()?;
            self.load_col = metrics.names().iter().position(|n| n == "load");
            self.server_tables.clear();
            self.server_seq = self
                .lua
                .create_table_with_capacity(metrics.ids().len(), 0)?;
            for id in metrics.ids() {
                let t = self
                    .lua
                    .create_table_with_capacity(0, self.metric_keys.len() + 1)?;
                self.servers.raw_set(server_key(&self.lua, id)?, &t)?;
                self.server_seq.raw_push(&t)?;
                self.server_tables.push(t);
            }
            // NaN never equals itself, so every value is written once.
            self.pushed = vec![f64::NAN; metrics.ids().len() * self.metric_keys.len()];
            self.layout = Some(metrics.layout());
        }
        let n = self.metric_keys.len();
        for (row, t) in self.server_tables.iter().enumerate() {
            let old = &mut self.pushed[row * n..(row + 1) * n];
            // Most rows are unchanged between decisions in the common case; one slice compare
            // skips them (rows with an absent metric, NaN, always take the slow path).
            if self.load_col.is_none() && *old == *metrics.row(row) {
                continue;
            }
            for (col, ((key, &v), last)) in self
                .metric_keys
                .iter()
                .zip(metrics.row(row))
                .zip(old)
                .enumerate()
            {
                // A supplied `load` is always rewritten: the policy may have overwritten it.
                if v.to_bits() == last.to_bits() && !v.is_nan() && Some(col) != self.load_col {
                    continue;
                }
                *last = v;
                if v.is_nan() {
                    t.raw_set(key, Value::Nil)?;
                } else {
                    t.raw_set(key, v)?;
                }
            }
        }
        if self.load_col.is_none() {
            // `load` is computed by the policy; last decision's value must not leak in.
            self.clear_load.call::<()>(&self.server_seq)?;
        }
        Ok(())
    }

    /// Evaluates `load`: a number sets `servers[whoami]["load"]`; `nil` leaves it as the policy
    /// set it. Returns the load value recorded for this server, if any.
    pub(crate) fn eval_load(&self, whoami: &ServerId) -> Result<Option<f64>, PolicyError> {
        let Some(f) = self.style.get(Callback::Load) else {
            return Ok(None);
        };
        let v: Value = self.run(Callback::Load, || f.call(()))?;
        let me: Option<Table> = self
            .servers
            .raw_get(server_key(&self.lua, whoami).map_err(vm_err)?)
            .map_err(vm_err)?;
        match v {
            Value::Nil => Ok(me.and_then(|t| t.raw_get::<Option<f64>>("load").ok().flatten())),
            Value::Integer(_) | Value::Number(_) => {
                let x = as_f64(&v).unwrap_or(f64::NAN);
                if let Some(t) = me {
                    t.raw_set("load", x).map_err(vm_err)?;
                }
                Ok(Some(x))
            }
            other => Err(malformed(Callback::Load, "a number or nothing", &other)),
        }
    }

    /// Evaluates `when` (default `false`).
    pub(crate) fn eval_when(&self) -> Result<bool, PolicyError> {
        let Some(f) = self.style.get(Callback::When) else {
            return Ok(false);
        };
        match self.run(Callback::When, || f.call::<Value>(()))? {
            Value::Boolean(b) => Ok(b),
            other => Err(malformed(Callback::When, "a boolean", &other)),
        }
    }

    /// Evaluates `where(targets)` (default: send nothing). `targets` starts as `0` for every
    /// server but this one; the result is the returned table, or `targets` as the policy left it.
    pub(crate) fn eval_where(&self, metrics: &Metrics) -> Result<Targets, PolicyError> {
        // Built with the cap lifted, like the refresh: its size is set by the cluster, not the
        // policy, and capped writes each cost a protected call.
        self.lua.set_memory_limit(0).map_err(vm_err)?;
        let targets = (|| {
            let t = self
                .lua
                .create_table_with_capacity(0, metrics.ids().len())?;
            for id in metrics.ids().iter().filter(|id| *id != metrics.whoami()) {
                t.raw_set(server_key(&self.lua, id)?, 0)?;
            }
            Ok(t)
        })();
        self.lua
            .set_memory_limit(self.limits.memory_bytes)
            .map_err(vm_err)?;
        let targets = targets.map_err(|e| self.map_alloc_error(Callback::Where, e))?;
        let Some(f) = self.style.get(Callback::Where) else {
            return Ok(Targets::new());
        };
        let ret: Value = if self.is_chunk_style() {
            self.protected
                .raw_set("targets", &targets)
                .map_err(vm_err)?;
            let r = self.run(Callback::Where, || f.call(()));
            self.protected
                .raw_set("targets", Value::Nil)
                .map_err(vm_err)?;
            r?
        } else {
            self.run(Callback::Where, || f.call(targets.clone()))?
        };
        let table = match ret {
            Value::Nil => targets,
            Value::Table(t) => t,
            other => {
                return Err(malformed(
                    Callback::Where,
                    "a targets table or nothing",
                    &other,
                ));
            }
        };
        let mut out = Targets::new();
        for pair in table.pairs::<Value, Value>() {
            let (k, v) = pair.map_err(vm_err)?;
            let id = match &k {
                Value::Integer(i) => ServerId::Num(*i),
                Value::Number(n) if n.fract() == 0.0 => ServerId::Num(*n as i64),
                Value::String(s) => ServerId::parse(&s.to_string_lossy()),
                other => {
                    return Err(malformed(Callback::Where, "server ids as keys", other));
                }
            };
            if !metrics.ids().contains(&id) {
                return Err(PolicyError::Malformed {
                    callback: Callback::Where,
                    expected: "targets that are known servers",
                    got: format!("a target for unknown server {id}"),
                });
            }
            let amount = match as_f64(&v) {
                Some(x) if x >= 0.0 && x.is_finite() => x,
                _ => {
                    return Err(PolicyError::Malformed {
                        callback: Callback::Where,
                        expected: "a non-negative amount per target",
                        got: format!("{} for server {id}", describe(&v)),
                    });
                }
            };
            if amount > 0.0 {
                out.insert(id, amount);
            }
        }
        Ok(out)
    }

    /// Evaluates `howmuch` (default: nothing).
    pub(crate) fn eval_howmuch(&self) -> Result<Option<HowMuch>, PolicyError> {
        let Some(f) = self.style.get(Callback::HowMuch) else {
            return Ok(None);
        };
        match self.run(Callback::HowMuch, || f.call::<Value>(()))? {
            Value::Nil => Ok(None),
            v @ (Value::Integer(_) | Value::Number(_)) => {
                Ok(Some(HowMuch::Amount(as_f64(&v).unwrap_or(f64::NAN))))
            }
            Value::Table(t) => table_to_json(&t, 0)
                .map(|j| Some(HowMuch::Table(j)))
                .map_err(|got| PolicyError::Malformed {
                    callback: Callback::HowMuch,
                    expected: "a number or a table of numbers, strings and booleans",
                    got,
                }),
            other => Err(malformed(Callback::HowMuch, "a number or a table", &other)),
        }
    }

    fn map_alloc_error(&self, cb: Callback, e: mlua::Error) -> PolicyError {
        if is_memory_error(&e) {
            PolicyError::Memory {
                callback: cb,
                limit: self.limits.memory_bytes,
            }
        } else {
            vm_err(e)
        }
    }

    /// Bytes the policy's Lua state holds now.
    pub(crate) fn used_memory(&self) -> usize {
        self.lua.used_memory()
    }
}

fn install_env(
    lua: &Lua,
    protected: &Table,
    servers: &Table,
    state: &Rc<StateCell>,
    series: &TimeSeries,
    params: &Params,
    policy: &str,
) -> mlua::Result<()> {
    for alias in ["servers", "server", "mds"] {
        protected.raw_set(alias, servers)?;
    }
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

fn bal_log(lua: &Lua, policy: &str) -> mlua::Result<Function> {
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

fn server_key(lua: &Lua, id: &ServerId) -> mlua::Result<Value> {
    Ok(match id {
        ServerId::Num(n) => Value::Integer(*n),
        ServerId::Name(s) => Value::String(lua.create_string(s)?),
    })
}

fn as_f64(v: &Value) -> Option<f64> {
    match v {
        Value::Integer(i) => Some(*i as f64),
        Value::Number(n) => Some(*n),
        _ => None,
    }
}

fn describe(v: &Value) -> String {
    match v {
        Value::String(s) => format!("the string {:?}", s.to_string_lossy()),
        Value::Integer(i) => format!("the number {i}"),
        Value::Number(n) => format!("the number {n}"),
        Value::Boolean(b) => format!("the boolean {b}"),
        Value::Nil => "nothing (nil)".into(),
        other => format!("a {}", other.type_name()),
    }
}

fn malformed(cb: Callback, expected: &'static str, got: &Value) -> PolicyError {
    PolicyError::Malformed {
        callback: cb,
        expected,
        got: describe(got),
    }
}

fn table_to_json(t: &Table, depth: usize) -> Result<serde_json::Value, String> {
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

fn is_memory_error(e: &mlua::Error) -> bool {
    match e {
        mlua::Error::MemoryError(_) => true,
        mlua::Error::CallbackError { cause, .. } => is_memory_error(cause),
        mlua::Error::RuntimeError(m) => m.starts_with("not enough memory"),
        _ => false,
    }
}

fn syntax_error(chunk: &str, e: mlua::Error) -> PolicyError {
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

fn runtime_error(cb: Callback, e: &mlua::Error) -> PolicyError {
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
