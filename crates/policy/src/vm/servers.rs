//! The `servers` table policies read (also `server` and `mds`): one plain Lua table per server,
//! kept in step with the service's metric matrix.
//!
//! Plain tables, because a field of a plain table is the one read the Lua VM does without a call:
//! policies read `servers[id][metric]` thousands of times per decision, and on the 2,048-server
//! benchmark an `__index` proxy over a data table made that scan 22% slower and a userdata view
//! slower still. What a decision pays instead is keeping the tables current, and four things
//! keep that small:
//!
//! - a *holder* thread's stack keeps every server's table and every metric name, so a write
//!   needs no registry lookups: through the raw C API it is three calls (~10 ns, where mlua's
//!   safe `Table::raw_set` costs ~27 ns), and once the field exists [`slots`](super::slots)
//!   stores the number straight into the node that holds it (~1 ns);
//! - a metric is copied into the tables only once a policy reads it (a whole column at once,
//!   through the row metatable's `__index`, from the metrics the evaluation under way lent it:
//!   [`Servers::lend`]), after which every refresh keeps it current. A policy that reads 3 of 8
//!   metrics pays for 3;
//! - [`Metrics`] stamps every row and every column when it changes, so a refresh visits only the
//!   copied columns some update touched, and in them only the rows that changed; an update of a
//!   metric no policy reads costs nothing;
//! - of those values, only the ones that differ from the last refresh are written. The refresh
//!   goes column by column over a copy of the copied columns' last values, so what it reads is
//!   contiguous and it touches each server's table only to write: on 2,048 servers, one changed
//!   metric per server is ~5 ns a server, most of it the two cache misses (the table and its
//!   node array) of a write into a table no other server's data shares a line with.
//!
//! What a policy assigns: `load` (by `load()`'s return value or by assignment) lasts for the
//! decision and is cleared (or restored to the supplied `load` metric) before the next one. The
//! engine notices assignments only when they fill a `nil` field: the row metatable's
//! `__newindex` then marks the tables for a sweep and removes itself for the rest of the decision,
//! so a policy that sets `load` on every server pays one metamethod call, not 2,048. An
//! assignment to a reported metric is not noticed; the engine writes a metric field only when its
//! supplied value changes (or when it first copies the column in), so the policy's value stays
//! until then. Fields a policy adds under other names are its own and persist.
//!
//! The raw C API is why this module allows `unsafe`: every call goes through [`put`],
//! [`Columns::set`], [`Columns::refresh_column`] or the two builders below, which only address
//! stack slots they pushed themselves, on a holder thread that no Lua code can reach, while no
//! Lua code runs; and a lazy column reads the lent metrics through a pointer that a [`Loan`]
//! (which borrows them) keeps valid.
//!
//! Lazily copied columns are invisible to `next` and `rawget` until a policy reads the metric
//! (`pairs` copies every column first, through `__pairs`).

#![allow(unsafe_code)]

use std::cell::{Cell, RefCell};
use std::ffi::c_void;
use std::rc::Rc;

use mlua::{Function, Lua, Table, Thread, ffi};

use super::convert::server_key;
use super::sandbox::CapLifted;
use super::slots::{self, Layout};
use crate::env::{Metrics, ServerId};

/// The row metatable and its lazy-column bookkeeping. `materialize(c)` copies column `c`
/// (0-based) into every row; `note_write()` tells the engine a `nil` field was assigned.
const ROWS: &str = r#"
local materialize, materialize_all, note_write = ...
local rawget, rawset, next = rawget, rawset, next
local lazy = {}
local mt = { __metatable = "protected" }
local function track(t, k, v)
  note_write()
  mt.__newindex = nil
  local c = lazy[k]
  if c then materialize(c) end
  rawset(t, k, v)
end
mt.__newindex = track
function mt.__index(t, k)
  local c = lazy[k]
  if c then
    materialize(c)
    return rawget(t, k)
  end
end
function mt.__pairs(t)
  if next(lazy) ~= nil then materialize_all() end
  return next, t, nil
end
return mt, lazy, track
"#;

/// Stack slot of the first metric name on the holder thread; slot 1 is the thread's body.
const FIRST_KEY: i32 = 2;

/// What the refresh and the lazy-column callback share.
struct Columns {
    /// Keeps the Lua-side layout on its stack: metric names, then the `load` key, then one table
    /// per server, in [`Metrics::ids`] order. `None` until the first refresh.
    holder: Option<Thread>,
    /// Metric names (columns).
    names: usize,
    /// Servers (rows).
    rows: usize,
    /// Columns copied into the Lua tables, which every refresh keeps current, in the order they
    /// were copied in.
    eager_cols: Vec<usize>,
    /// For the eager columns, the supplied values as of the last refresh, one column of `rows`
    /// values after another: a refresh reads only the columns it keeps, contiguously, which on
    /// 2,048 servers is the difference between 48 KiB and 128 KiB of memory traffic.
    old: Vec<f64>,
    /// The metrics of the evaluation under way (see [`Servers::lend`]), from which a lazy column
    /// is copied in; null outside one.
    lent: *const Metrics,
    /// Each row's [`Metrics::stamps`] as of the last refresh that compared it: rows whose stamp
    /// is unchanged are skipped without looking at their values.
    seen: Vec<u64>,
    /// Each column's [`Metrics::col_stamps`] as of the last refresh.
    seen_cols: Vec<u64>,
    /// Scratch for the refresh: the copied columns it compares.
    dirty: Vec<(usize, usize)>,
    /// Maps the names of not-yet-copied columns to their index (the Lua `lazy` table).
    lazy: Table,
    /// The [`Metrics::layout`] the tables were built for.
    layout: Option<u64>,
    /// Set when the running Lua's table layout is the one [`slots`] mirrors.
    direct: Option<Layout>,
    /// Per row, the address of its table; per column, of its name ([`slots::key_address`]).
    tables: Vec<*const c_void>,
    keys: Vec<*const c_void>,
    /// Per value (column after column, like `old`), the hash node that held it last time.
    hints: Vec<u32>,
}

impl Columns {
    fn load_key_slot(&self) -> i32 {
        key_slot(self.names)
    }

    fn row_slot(&self, row: usize) -> i32 {
        row_slot(self.names, row)
    }

    /// Copies column `col` into every row, as the lent metrics have it, and takes it off the
    /// lazy list.
    fn materialize(&mut self, lua: &Lua, col: usize) -> mlua::Result<()> {
        let Some(holder) = self.holder.clone() else {
            return Ok(());
        };
        if col >= self.names || self.eager_cols.contains(&col) {
            return Ok(());
        }
        // SAFETY: `lent` is non-null only while a `Loan` borrows the metrics it points to (see
        // `Servers::lend`), so they are alive and unchanged.
        let metrics = match unsafe { self.lent.as_ref() } {
            Some(m) if Some(m.layout()) == self.layout => m,
            _ => {
                return Err(mlua::Error::RuntimeError(
                    "internal: a metric column was read outside an evaluation".into(),
                ));
            }
        };
        let th = holder.state();
        let key = key_slot(col);
        let lazy = self.lazy.clone();
        let at = self.eager_cols.len();
        self.old
            .extend((0..self.rows).map(|row| metrics.row(row)[col]));
        self.seen_cols[col] = metrics.col_stamps()[col];
        let _lifted = CapLifted::new(lua)?;
        unsafe {
            lua.exec_raw::<()>(&lazy, |l| {
                for row in 0..self.rows {
                    self.set(th, row, col, self.old[at * self.rows + row]);
                }
                ffi::lua_pushvalue(th, key);
                ffi::lua_xmove(th, l, 1);
                ffi::lua_pushnil(l);
                ffi::lua_rawset(l, 1);
            })?;
        }
        self.eager_cols.push(col);
        Ok(())
    }

    /// Brings the copied column `col` (the `e`-th in `eager_cols`) up to date in the rows from
    /// `from` whose stamp moved since the last refresh. Column by column, so that everything about
    /// the column is looked up once and the row loop does only what each row needs.
    ///
    /// # Safety
    /// As [`Columns::set`].
    unsafe fn refresh_column(
        &mut self,
        th: *mut ffi::lua_State,
        metrics: &Metrics,
        e: usize,
        col: usize,
        from: usize,
    ) {
        let (rows, n) = (self.rows, self.names);
        let values = metrics.values();
        let old = &mut self.old[e * rows..(e + 1) * rows];
        let hints = &mut self.hints[col * rows..(col + 1) * rows];
        let key = self.keys[col];
        let changed = metrics.stamps()[from..]
            .iter()
            .zip(&self.seen[from..])
            .enumerate()
            .filter(|(_, (now, seen))| now != seen)
            .map(|(i, _)| from + i);
        for row in changed {
            let v = values[row * n + col];
            if v.to_bits() == old[row].to_bits() {
                continue;
            }
            old[row] = v;
            let field = Field {
                table: self.tables[row],
                key,
                slots: (row_slot(n, row), key_slot(col)),
            };
            unsafe { store(self.direct, th, field, &mut hints[row], v) };
        }
    }

    /// Writes `v` (`nil` for NaN) into row `row` under column `col`'s name: straight into the
    /// field's node where [`slots::write`] can, else through [`put`].
    ///
    /// # Safety
    /// As [`put`], with `th` the holder thread; no Lua code may run.
    unsafe fn set(&mut self, th: *mut ffi::lua_State, row: usize, col: usize, v: f64) {
        let field = Field {
            table: self.tables[row],
            key: self.keys[col],
            slots: (self.row_slot(row), key_slot(col)),
        };
        let hint = &mut self.hints[col * self.rows + row];
        unsafe { store(self.direct, th, field, hint, v) }
    }
}

/// Stack slot of column `col`'s name on the holder thread (`col == names` is `load`'s).
fn key_slot(col: usize) -> i32 {
    FIRST_KEY + col as i32
}

/// Stack slot of row `row`'s table on the holder thread, with `names` metric columns.
fn row_slot(names: usize, row: usize) -> i32 {
    FIRST_KEY + names as i32 + 1 + row as i32
}

/// One field of one server's table: its addresses for [`slots::write`], its stack slots (row,
/// key) for [`put`].
struct Field {
    table: *const c_void,
    key: *const c_void,
    slots: (i32, i32),
}

/// Writes `v` into `field`: straight into the node that holds it where [`slots::write`] can
/// (`hint` is where it was last time), else through [`put`].
///
/// # Safety
/// As [`put`] for `field.slots` on `th`, the holder thread, and as [`slots::write`] for its
/// addresses; no Lua code may run.
unsafe fn store(
    direct: Option<Layout>,
    th: *mut ffi::lua_State,
    field: Field,
    hint: &mut u32,
    v: f64,
) {
    unsafe {
        if let Some(layout) = direct
            && slots::write(layout, field.table, field.key, hint, v)
        {
            return;
        }
        put(th, field.slots.0, field.slots.1, v);
    }
}

/// Writes `v` (`nil` for NaN, an absent metric) into the table at `row`, under the name at `key`.
///
/// # Safety
/// `row` must hold a table and `key` a string on `th`'s stack, and `th` must have two free slots.
unsafe fn put(th: *mut ffi::lua_State, row: i32, key: i32, v: f64) {
    unsafe {
        ffi::lua_pushvalue(th, key);
        if v.is_nan() {
            ffi::lua_pushnil(th);
        } else {
            ffi::lua_pushnumber(th, v);
        }
        ffi::lua_rawset(th, row);
    }
}

/// The `servers` table and what keeps it current.
pub(super) struct Servers {
    table: Table,
    columns: Rc<RefCell<Columns>>,
    row_mt: Table,
    track: Function,
    /// Set by the row metatable when a policy assigned a `nil` field: the next refresh clears
    /// `load` in every row and puts the tracker back.
    written: Rc<Cell<bool>>,
    /// The row whose `load` the engine set from `load()`'s return value.
    load_row: Cell<Option<usize>>,
    layout: Option<u64>,
    load_col: Option<usize>,
    whoami: Option<ServerId>,
    whoami_row: Option<usize>,
}

impl Servers {
    /// An empty `servers`, published under its three names in `protected`.
    pub(super) fn new(lua: &Lua, protected: &Table) -> mlua::Result<Self> {
        let written = Rc::new(Cell::new(false));
        let mut direct = None;
        // SAFETY: the probe uses three slots of the stack `exec_raw` hands it and leaves none.
        unsafe { lua.exec_raw::<()>((), |l| direct = Layout::probe(l))? };
        let columns = Rc::new(RefCell::new(Columns {
            holder: None,
            names: 0,
            rows: 0,
            eager_cols: Vec::new(),
            old: Vec::new(),
            seen_cols: Vec::new(),
            dirty: Vec::new(),
            lent: std::ptr::null(),
            layout: None,
            seen: Vec::new(),
            lazy: lua.create_table()?,
            direct,
            tables: Vec::new(),
            keys: Vec::new(),
            hints: Vec::new(),
        }));
        let materialize = {
            let columns = Rc::downgrade(&columns);
            lua.create_function(move |lua, col: usize| match columns.upgrade() {
                Some(c) => c.borrow_mut().materialize(lua, col),
                None => Ok(()),
            })?
        };
        let materialize_all = {
            let columns = Rc::downgrade(&columns);
            lua.create_function(move |lua, ()| {
                let Some(c) = columns.upgrade() else {
                    return Ok(());
                };
                let mut c = c.borrow_mut();
                (0..c.names).try_for_each(|col| c.materialize(lua, col))
            })?
        };
        let note_write = {
            let written = written.clone();
            lua.create_function(move |_, ()| {
                written.set(true);
                Ok(())
            })?
        };
        let (row_mt, lazy, track): (Table, Table, Function) =
            lua.load(ROWS)
                .set_name("=servers")
                .call((materialize, materialize_all, note_write))?;
        columns.borrow_mut().lazy = lazy;
        let table = lua.create_table()?;
        for alias in ["servers", "server", "mds"] {
            protected.raw_set(alias, &table)?;
        }
        Ok(Self {
            table,
            columns,
            row_mt,
            track,
            written,
            load_row: Cell::new(None),
            layout: None,
            load_col: None,
            whoami: None,
            whoami_row: None,
        })
    }

    /// Makes the Lua side match `metrics`: rebuilds the tables when the set of servers or metric
    /// names changed, clears what the last decision assigned, and writes the values that changed.
    pub(super) fn refresh(
        &mut self,
        lua: &Lua,
        protected: &Table,
        metrics: &Metrics,
    ) -> mlua::Result<()> {
        let _lifted = CapLifted::new(lua)?;
        let rebuilt = self.layout != Some(metrics.layout());
        if rebuilt {
            self.rebuild(lua, protected, metrics)?;
        }
        let moved = self.whoami.as_ref() != Some(metrics.whoami());
        if moved {
            protected.raw_set("whoami", server_key(lua, metrics.whoami())?)?;
            self.whoami = Some(metrics.whoami().clone());
        }
        if rebuilt || moved {
            self.whoami_row = metrics.row_of(metrics.whoami());
        }
        let sweep = self.written.replace(false);
        if sweep {
            self.row_mt.raw_set("__newindex", &self.track)?;
        }
        let r = self.write_changes(lua, metrics, sweep);
        if r.is_err() {
            // A Lua error resets the holder thread's stack; start over next time.
            self.layout = None;
            self.columns.borrow_mut().layout = None;
        }
        r
    }

    fn write_changes(&mut self, lua: &Lua, metrics: &Metrics, sweep: bool) -> mlua::Result<()> {
        let clear_row = self.load_row.take();
        let load_col = self.load_col;
        let mut columns = self.columns.borrow_mut();
        let cols = &mut *columns;
        let Some(holder) = cols.holder.clone() else {
            return Ok(());
        };
        let stamps = metrics.stamps();
        // The copied columns an update touched since the last refresh, with their place in `old`:
        // only these are compared, and with none, no row is visited.
        let mut dirty = std::mem::take(&mut cols.dirty);
        dirty.clear();
        for (e, &col) in cols.eager_cols.iter().enumerate() {
            let stamp = metrics.col_stamps()[col];
            if cols.seen_cols[col] != stamp {
                cols.seen_cols[col] = stamp;
                dirty.push((e, col));
            }
        }
        let first_change = if dirty.is_empty() {
            None
        } else {
            cols.seen.iter().zip(stamps).position(|(a, b)| a != b)
        };
        // A supplied `load` is rewritten every time: the policy may have assigned to it, and an
        // assignment to a field that is not `nil` goes unnoticed.
        let rewrite_load = load_col.filter(|_| cols.rows > 0);
        let clear_load = load_col.is_none() && (sweep || clear_row.is_some());
        if first_change.is_none() && rewrite_load.is_none() && !clear_load {
            cols.dirty = dirty;
            return Ok(());
        }
        let th = holder.state();
        let start_row = match (rewrite_load, first_change) {
            (Some(_), _) => 0,
            (None, Some(row)) => row,
            (None, None) => cols.rows,
        };
        unsafe {
            lua.exec_raw::<()>((), |_| {
                if clear_load {
                    let load = cols.load_key_slot();
                    let rows = if sweep {
                        0..cols.rows
                    } else {
                        clear_row.map_or(0..0, |r| r..r + 1)
                    };
                    for row in rows {
                        put(th, cols.row_slot(row), load, f64::NAN);
                    }
                }
                // Only the dirty columns can differ: no update touched the others.
                for &(e, col) in &dirty {
                    cols.refresh_column(th, metrics, e, col, start_row);
                }
                if !dirty.is_empty() {
                    cols.seen[start_row..].copy_from_slice(&stamps[start_row..]);
                }
                if let Some(col) = rewrite_load {
                    for row in 0..cols.rows {
                        cols.set(th, row, col, metrics.row(row)[col]);
                    }
                }
            })?;
        }
        cols.dirty = dirty;
        Ok(())
    }

    /// Builds one table per server and publishes the new `servers`.
    fn rebuild(&mut self, lua: &Lua, protected: &Table, metrics: &Metrics) -> mlua::Result<()> {
        let ids = metrics.ids();
        let names = metrics.names();
        // Integer ids 1..=n go to the array part, where `pairs` and `servers[i]` are cheapest.
        let in_array = ids
            .iter()
            .filter(|id| matches!(id, ServerId::Num(i) if (1..=ids.len() as i64).contains(i)))
            .count();
        let table = lua.create_table_with_capacity(in_array, ids.len() - in_array)?;
        let holder = lua.create_thread(self.track.clone())?;
        let th = holder.state();
        let slots = FIRST_KEY as usize + names.len() + 1 + ids.len() + 4;
        let mut fits = true;
        let (mut tables, mut keys) = (Vec::new(), Vec::new());
        unsafe {
            lua.exec_raw::<()>((&table, &self.row_mt), |l| {
                if slots > i32::MAX as usize || ffi::lua_checkstack(th, slots as i32) == 0 {
                    fits = false;
                    return;
                }
                for name in names.iter().map(String::as_str).chain(["load"]) {
                    ffi::lua_pushlstring(th, name.as_ptr().cast(), name.len());
                    keys.push(slots::key_address(th, -1));
                }
                ffi::lua_checkstack(l, 4);
                for id in ids {
                    ffi::lua_createtable(l, 0, names.len() as i32 + 1);
                    ffi::lua_pushvalue(l, 2);
                    ffi::lua_setmetatable(l, -2);
                    match id {
                        ServerId::Num(i) => ffi::lua_pushinteger(l, *i),
                        ServerId::Name(s) => {
                            ffi::lua_pushlstring(l, s.as_ptr().cast(), s.len());
                        }
                    }
                    ffi::lua_pushvalue(l, -2);
                    ffi::lua_rawset(l, 1);
                    tables.push(ffi::lua_topointer(l, -1));
                    ffi::lua_xmove(l, th, 1);
                }
            })?;
        }
        if !fits {
            return Err(mlua::Error::RuntimeError(format!(
                "{} servers × {} metrics is more than a Lua stack holds",
                ids.len(),
                names.len()
            )));
        }
        self.load_col = names.iter().position(|n| n == "load");
        let lazy = self.columns.borrow().lazy.clone();
        lazy.clear()?;
        for (col, name) in names.iter().enumerate() {
            if Some(col) != self.load_col {
                lazy.raw_set(name.as_str(), col)?;
            }
        }
        {
            let mut c = self.columns.borrow_mut();
            c.holder = Some(holder);
            c.names = names.len();
            c.rows = ids.len();
            // NaN differs bit for bit from every supplied value but an identical NaN, which is
            // `nil` either way in a fresh table.
            c.old = self
                .load_col
                .map_or_else(Vec::new, |_| vec![f64::NAN; ids.len()]);
            // No stamp is `u64::MAX`, so the first refresh visits every row.
            c.seen = vec![u64::MAX; ids.len()];
            c.seen_cols = vec![u64::MAX; names.len()];
            c.eager_cols = self.load_col.into_iter().collect();
            c.layout = Some(metrics.layout());
            c.tables = tables;
            c.keys = keys;
            c.hints = vec![0; ids.len() * names.len()];
        }
        for alias in ["servers", "server", "mds"] {
            protected.raw_set(alias, &table)?;
        }
        self.table = table;
        self.load_row.set(None);
        self.layout = Some(metrics.layout());
        Ok(())
    }

    /// Lends `metrics` to the lazy columns for as long as the returned loan lives: a policy that
    /// reads a metric no refresh has copied yet gets it from there. Every evaluation of a policy
    /// runs under a loan of the metrics it was refreshed from.
    pub(super) fn lend<'a>(&self, metrics: &'a Metrics) -> Loan<'a> {
        let previous = std::mem::replace(&mut self.columns.borrow_mut().lent, metrics);
        Loan {
            columns: self.columns.clone(),
            previous,
            _metrics: std::marker::PhantomData,
        }
    }

    /// This server's table, if it reports metrics.
    pub(super) fn me(&self, lua: &Lua, whoami: &ServerId) -> mlua::Result<Option<Table>> {
        self.table.raw_get(server_key(lua, whoami)?)
    }

    /// Records that the engine set this server's `load`, so the next refresh clears it.
    pub(super) fn engine_set_load(&self) {
        self.load_row.set(self.whoami_row);
    }
}

/// Metrics lent to the lazy columns (see [`Servers::lend`]); dropping it takes them back.
pub(crate) struct Loan<'a> {
    columns: Rc<RefCell<Columns>>,
    previous: *const Metrics,
    /// The loan borrows the metrics, so they can neither change nor move while it lives.
    _metrics: std::marker::PhantomData<&'a Metrics>,
}

impl Drop for Loan<'_> {
    fn drop(&mut self) {
        self.columns.borrow_mut().lent = self.previous;
    }
}
