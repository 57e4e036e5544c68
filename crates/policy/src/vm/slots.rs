//! Writing a number into an existing field of a Lua table without a hash lookup.
//!
//! The refresh writes up to 16,384 numbers per decision into the server tables. Through the C
//! API each write is a `lua_pushvalue` + `lua_pushnumber` + `lua_rawset`, and `lua_rawset` looks
//! the key up again (`luaH_getshortstr`) although it is the same key in the same table as last
//! time: ~10 ns, which on 2,048 servers was most of the refresh. This module remembers, per field,
//! which node of the table's hash part holds it, and writes the number there directly (~1 ns).
//!
//! That reads Lua 5.4's private `Table` and `Node` layouts (`lobject.h`, unchanged from 5.4.0 to
//! 5.4.9, which `mlua`'s `lua54` feature builds), so it is hedged three ways:
//!
//! - it is enabled only when the running Lua says it is 5.4 and a probe table built through the
//!   public API reads back correctly through the mirror structs ([`Layout::probe`]);
//! - every write first checks, in the table's *current* node array, that the remembered node
//!   still holds this very key (an interned short string is one object, so pointer equality is
//!   key equality); after a rehash (a policy adding fields), or once the collector marked the key
//!   dead, the check fails and the caller writes through the C API instead, which re-inserts the
//!   key, and the next write finds the new node;
//! - it writes only numbers under keys that are not metamethod names (`__…`), where `lua_rawset`
//!   itself does nothing but store the value: a number needs no GC barrier, and only a `__` key
//!   can change what the table's metamethod cache (`flags`) records.
//!
//! The caller keeps the tables and the key strings alive (on a thread's stack) for as long as it
//! uses their addresses; Lua's collector never moves objects.

#![allow(unsafe_code)]

use std::ffi::c_void;

use mlua::ffi;

/// `lobject.h`'s `Table` (5.4.0–5.4.9), up to the fields read here.
#[repr(C)]
struct Table {
    next: *mut c_void,
    tt: u8,
    marked: u8,
    flags: u8,
    lsizenode: u8,
    alimit: u32,
    array: *mut c_void,
    node: *mut Node,
}

/// `lobject.h`'s `Node`: the value's `TValue` fields, then the key.
#[repr(C)]
struct Node {
    value: f64,
    tt: u8,
    key_tt: u8,
    next: i32,
    key_val: *const c_void,
}

/// `makevariant(LUA_TNUMBER, 1)`.
const NUMFLT: u8 = 3 | (1 << 4);
/// `ctb(makevariant(LUA_TSTRING, 0))`: a short (interned) string key.
const SHRSTR_KEY: u8 = 4 | (1 << 6);
/// `LUAI_MAXSHORTLEN`: longer strings are not interned, so their keys are left to the C API.
const MAX_SHORT_LEN: usize = 40;

/// Proof that the running Lua matches the mirrored layout; the only way to call [`write`].
#[derive(Clone, Copy)]
pub(super) struct Layout(());

impl Layout {
    /// Checks the Lua version and reads a probe table through the mirror structs.
    ///
    /// # Safety
    /// `l` must be a valid Lua state with three free stack slots, and no Lua code may run
    /// meanwhile.
    pub(super) unsafe fn probe(l: *mut ffi::lua_State) -> Option<Layout> {
        unsafe {
            if ffi::lua_version(l) != 504.0 {
                return None;
            }
            ffi::lua_createtable(l, 0, 4);
            ffi::lua_pushlstring(l, c"pliant_probe".as_ptr(), 12);
            let key = ffi::lua_topointer(l, -1);
            ffi::lua_pushnumber(l, 1.5);
            ffi::lua_rawset(l, -3);
            let table = ffi::lua_topointer(l, -1);
            // The probe's own fields must agree with what we know of it before `node` is
            // followed: a 4-node hash part, a non-null node array.
            let t = table as *const Table;
            let ok = !t.is_null()
                && (*t).lsizenode == 2
                && !(*t).node.is_null()
                && (0..4).any(|i| {
                    let n = (*t).node.add(i);
                    (*n).key_tt == SHRSTR_KEY
                        && (*n).key_val == key
                        && (*n).tt == NUMFLT
                        && (*n).value == 1.5
                });
            ffi::lua_pop(l, 1);
            ok.then_some(Layout(()))
        }
    }
}

/// The address of a key string on a Lua stack if [`write`] may use it, else null.
///
/// # Safety
/// `idx` must hold a string on `l`'s stack.
pub(super) unsafe fn key_address(l: *mut ffi::lua_State, idx: i32) -> *const c_void {
    unsafe {
        let mut len = 0;
        let s = ffi::lua_tolstring(l, idx, &mut len);
        let name = std::slice::from_raw_parts(s.cast::<u8>(), len);
        if len > MAX_SHORT_LEN || name.starts_with(b"__") {
            std::ptr::null()
        } else {
            ffi::lua_topointer(l, idx)
        }
    }
}

/// Stores `v` in the field `key` of `table` if the table has that key in its hash part, starting
/// from the node `hint` found last time (and updating it). `false` means nothing was written:
/// the caller must use the C API.
///
/// # Safety
/// `table` must be the address of a live Lua table and `key` null or the [`key_address`] of a
/// live string, with no Lua code running.
pub(super) unsafe fn write(
    _: Layout,
    table: *const c_void,
    key: *const c_void,
    hint: &mut u32,
    v: f64,
) -> bool {
    if key.is_null() || v.is_nan() {
        return false;
    }
    unsafe {
        let t = table as *const Table;
        let nodes = (*t).node;
        let size = 1usize << (*t).lsizenode;
        let holds = |i: usize| {
            let n = nodes.add(i);
            (*n).key_tt == SHRSTR_KEY && (*n).key_val == key
        };
        let i = *hint as usize;
        let at = if i < size && holds(i) {
            i
        } else {
            match (0..size).find(|&i| holds(i)) {
                Some(i) => {
                    *hint = i as u32;
                    i
                }
                None => return false,
            }
        };
        let n = nodes.add(at);
        (*n).value = v;
        (*n).tt = NUMFLT;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mlua::Lua;

    /// Runs `f` on the main Lua stack with `t` at index 1 and the string `k` at index 2.
    fn with_table(lua: &Lua, t: &mlua::Table, k: &str, f: impl FnOnce(*mut ffi::lua_State)) {
        unsafe { lua.exec_raw::<()>((t, k), f).expect("exec") }
    }

    fn layout(lua: &Lua) -> Layout {
        let mut layout = None;
        unsafe {
            lua.exec_raw::<()>((), |l| layout = Layout::probe(l))
                .expect("exec")
        };
        layout.expect("the built Lua has the mirrored table layout")
    }

    #[test]
    fn writes_land_in_the_field_and_follow_it_across_rehashes() {
        let lua = Lua::new();
        let layout = layout(&lua);
        let t = lua.create_table().expect("table");
        t.raw_set("rate", 1.0).expect("set");
        let mut hint = 0;
        for round in 0..5 {
            // Each round's new fields make the table grow, moving `rate` to a new node array.
            for i in 0..(16 << round) {
                t.raw_set(format!("f{round}_{i}"), i).expect("set");
            }
            let v = 10.0 + round as f64;
            with_table(&lua, &t, "rate", |l| unsafe {
                let (table, key) = (ffi::lua_topointer(l, 1), key_address(l, 2));
                assert!(write(layout, table, key, &mut hint, v), "round {round}");
            });
            assert_eq!(t.raw_get::<f64>("rate").expect("get"), v);
        }
    }

    #[test]
    fn absent_fields_long_keys_metamethod_names_and_nil_are_left_to_the_api() {
        let lua = Lua::new();
        let layout = layout(&lua);
        let long = "k".repeat(MAX_SHORT_LEN + 1);
        let t = lua.create_table().expect("table");
        for k in ["present", "__index", long.as_str()] {
            t.raw_set(k, 1.0).expect("set");
        }
        for (k, v, ok) in [
            ("absent", 2.0, false),
            ("__index", 2.0, false),
            (long.as_str(), 2.0, false),
            ("present", f64::NAN, false),
            ("present", 3.0, true),
        ] {
            with_table(&lua, &t, k, |l| unsafe {
                let (table, key) = (ffi::lua_topointer(l, 1), key_address(l, 2));
                assert_eq!(write(layout, table, key, &mut 0, v), ok, "{k}");
            });
        }
        assert_eq!(t.raw_get::<Option<f64>>("absent").expect("get"), None);
        assert_eq!(t.raw_get::<f64>("__index").expect("get"), 1.0);
        assert_eq!(t.raw_get::<f64>("present").expect("get"), 3.0);
    }
}
