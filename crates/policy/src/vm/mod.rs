//! One policy in its own sandboxed Lua state: the environment, the limits, and the conversion of
//! callback results into typed decisions.
//!
//! Each installed policy version gets a fresh VM, so a policy that leaks memory or corrupts its
//! globals cannot affect the next one, and the memory cap is per policy.
//!
//! - [`sandbox`]: the prelude that guards the globals, the instruction budget, and the
//!   engine-provided names;
//! - [`servers`]: the `servers` table and how it is kept in step with the metrics;
//! - [`slots`]: direct stores into existing fields of those tables;
//! - [`convert`]: Lua values to decisions, mlua errors to [`PolicyError`]s.

mod convert;
mod sandbox;
mod servers;
mod slots;

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use mlua::{Function, Lua, LuaOptions, StdLib, Table, Value};

use self::convert::{
    as_f64, describe, is_memory_error, malformed, runtime_error, server_key, syntax_error,
    table_to_json, vm_err,
};
use self::sandbox::{Budget, CapLifted, PRELUDE, StateCell, bal_log, install_env, set_budget_hook};
use self::servers::Servers;
use crate::decision::{HowMuch, Targets};
use crate::env::{Metrics, Params, ServerId, TimeSeries};
use crate::source::{Callback, Chunk, PolicySource, Style};
use crate::state::StateStore;
use crate::{Limits, PolicyError};

/// A compiled policy with its environment.
pub(crate) struct Vm {
    lua: Lua,
    name: String,
    limits: Limits,
    style: Compiled,
    protected: Table,
    servers: Servers,
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
        // Before the prelude, so the row metatable captures the unguarded `rawset`.
        let servers = Servers::new(&lua, &protected).map_err(vm_err)?;
        install_env(&lua, &protected, &state, series, params, &source.name).map_err(vm_err)?;

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

        set_budget_hook(&lua, &budget).map_err(vm_err)?;
        lua.set_memory_limit(limits.memory_bytes).map_err(vm_err)?;

        let mut vm = Self {
            lua,
            name: source.name.clone(),
            limits,
            style: Compiled::Chunks([None, None, None, None]),
            protected,
            servers,
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

    /// Instructions the last callback used, in multiples of [`sandbox::HOOK_STEP`].
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

    /// Lends `metrics` to the `servers` table while the loan lives; see [`Servers::lend`].
    pub(crate) fn lend<'a>(&self, metrics: &'a Metrics) -> servers::Loan<'a> {
        self.servers.lend(metrics)
    }

    /// Makes the Lua-side `servers` table match `metrics` (see [`servers`]).
    pub(crate) fn refresh(&mut self, metrics: &Metrics) -> Result<(), PolicyError> {
        self.servers
            .refresh(&self.lua, &self.protected, metrics)
            .map_err(vm_err)
    }

    /// Evaluates `load`: a number sets `servers[whoami]["load"]`; `nil` leaves it as the policy
    /// set it. Returns the load value recorded for this server, if any.
    pub(crate) fn eval_load(&self, whoami: &ServerId) -> Result<Option<f64>, PolicyError> {
        let Some(f) = self.style.get(Callback::Load) else {
            return Ok(None);
        };
        let v: Value = self.run(Callback::Load, || f.call(()))?;
        let me = self.servers.me(&self.lua, whoami).map_err(vm_err)?;
        match v {
            Value::Nil => Ok(me.and_then(|t| t.raw_get::<Option<f64>>("load").ok().flatten())),
            Value::Integer(_) | Value::Number(_) => {
                let x = as_f64(&v).unwrap_or(f64::NAN);
                if let Some(t) = me {
                    t.raw_set("load", x).map_err(vm_err)?;
                    self.servers.engine_set_load();
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
        let targets = (|| {
            let _lifted = CapLifted::new(&self.lua)?;
            let t = self
                .lua
                .create_table_with_capacity(0, metrics.ids().len())?;
            for id in metrics.ids().iter().filter(|id| *id != metrics.whoami()) {
                t.raw_set(server_key(&self.lua, id)?, 0)?;
            }
            Ok(t)
        })();
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
