//! What a policy sees: cluster metrics (`servers[id][metric]`), this server's id, tunable
//! parameters and the time-series buffer, in the Rust form the service fills in.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;

use serde::{Deserialize, Serialize};

use crate::PolicyError;

/// A server's id as policies see it: `servers[1]` or `servers["mds.a"]`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ServerId {
    /// A numeric id, a Lua integer.
    Num(i64),
    /// A named id, a Lua string.
    Name(String),
}

impl ServerId {
    /// Parses a textual id: anything that reads as an integer is numeric, so that a JSON object
    /// key `"3"` and `whoami: 3` name the same server.
    pub fn parse(s: &str) -> Self {
        match s.trim().parse::<i64>() {
            Ok(n) => Self::Num(n),
            Err(_) => Self::Name(s.to_string()),
        }
    }
}

impl std::fmt::Display for ServerId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Num(n) => write!(f, "{n}"),
            Self::Name(s) => f.write_str(s),
        }
    }
}

impl From<i64> for ServerId {
    fn from(n: i64) -> Self {
        Self::Num(n)
    }
}

impl From<&str> for ServerId {
    fn from(s: &str) -> Self {
        Self::parse(s)
    }
}

/// Cluster metrics: a dense `servers × metric names` matrix of numbers.
///
/// Dense because the engine refreshes the policy's view before every decision and a cluster
/// reports the same metrics for every server: updating values in place is what keeps a decision
/// over thousands of servers within tens of microseconds. A metric a server does not report is
/// absent (`nil` in Lua), stored as NaN.
///
/// Equality compares the servers, names and values; a clone is a new layout (see `stamps`).
#[derive(Debug)]
pub struct Metrics {
    whoami: ServerId,
    ids: Vec<ServerId>,
    names: Vec<String>,
    values: Vec<f64>,
    id_index: HashMap<ServerId, usize>,
    name_index: HashMap<String, usize>,
    /// Identifies the set of servers and metric names. A fresh id from a process-wide counter on
    /// every change, so two different layouts never share an id and the engine knows exactly when
    /// its Lua-side tables no longer match.
    layout: u64,
    /// Per row, the `clock` value of its last change: within one layout, an unchanged stamp means
    /// an unchanged row, so a refresh compares 2,048 stamps instead of 16,384 values. Sound because
    /// only this value mutates rows under its layout id: a clone gets a fresh one.
    stamps: Vec<u64>,
    /// Per column, the same: a refresh skips the columns no update touched.
    col_stamps: Vec<u64>,
    clock: u64,
}

impl Clone for Metrics {
    fn clone(&self) -> Self {
        Self {
            whoami: self.whoami.clone(),
            ids: self.ids.clone(),
            names: self.names.clone(),
            values: self.values.clone(),
            id_index: self.id_index.clone(),
            name_index: self.name_index.clone(),
            layout: next_layout(),
            stamps: self.stamps.clone(),
            col_stamps: self.col_stamps.clone(),
            clock: self.clock,
        }
    }
}

impl PartialEq for Metrics {
    fn eq(&self, other: &Self) -> bool {
        self.whoami == other.whoami
            && self.ids == other.ids
            && self.names == other.names
            && self.values == other.values
    }
}

fn next_layout() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

impl Metrics {
    /// Empty metrics for a server that calls itself `whoami`.
    pub fn new(whoami: impl Into<ServerId>) -> Self {
        Self {
            whoami: whoami.into(),
            ids: Vec::new(),
            names: Vec::new(),
            values: Vec::new(),
            id_index: HashMap::new(),
            name_index: HashMap::new(),
            layout: next_layout(),
            stamps: Vec::new(),
            col_stamps: Vec::new(),
            clock: 0,
        }
    }

    /// This server's id.
    pub fn whoami(&self) -> &ServerId {
        &self.whoami
    }

    /// Changes this server's id.
    pub fn set_whoami(&mut self, id: impl Into<ServerId>) {
        self.whoami = id.into();
    }

    /// Sets `servers[id][metric] = value`, adding the server or metric name if new.
    pub fn set(&mut self, id: impl Into<ServerId>, metric: &str, value: f64) {
        let row = self.server_row(id.into());
        let col = self.metric_col(metric);
        let n = self.names.len();
        let slot = &mut self.values[row * n + col];
        if slot.to_bits() != value.to_bits() {
            *slot = value;
            self.touch(row, Some(col));
        }
    }

    /// Sets the value of server number `row` (in [`Metrics::ids`] order) for metric number `col`
    /// (in [`Metrics::names`] order): [`Metrics::set`] for services that keep the positions of
    /// their servers and metrics ([`Metrics::row_of`], [`Metrics::col_of`]).
    ///
    /// # Panics
    /// If `row` or `col` is out of range.
    pub fn set_at(&mut self, row: usize, col: usize, value: f64) {
        let n = self.names.len();
        assert!(col < n, "metric column {col} of {n}");
        let slot = &mut self.values[row * n + col];
        if slot.to_bits() != value.to_bits() {
            *slot = value;
            self.touch(row, Some(col));
        }
    }

    /// `servers[id][metric]`, if reported.
    pub fn get(&self, id: &ServerId, metric: &str) -> Option<f64> {
        let row = *self.id_index.get(id)?;
        let col = *self.name_index.get(metric)?;
        let v = self.values[row * self.names.len() + col];
        (!v.is_nan()).then_some(v)
    }

    /// Server ids, in the order they were first added.
    pub fn ids(&self) -> &[ServerId] {
        &self.ids
    }

    /// Metric names, in the order they were first added.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// The row of values of server number `row` (in [`Metrics::ids`] order); NaN = absent.
    pub fn row(&self, row: usize) -> &[f64] {
        let n = self.names.len();
        &self.values[row * n..(row + 1) * n]
    }

    /// Mutable access to one server's row, for services that refresh metrics in bulk. The next
    /// refresh compares every column of the row; [`Metrics::set_at`] tells it which one changed.
    pub fn row_mut(&mut self, row: usize) -> &mut [f64] {
        self.touch(row, None);
        let n = self.names.len();
        &mut self.values[row * n..(row + 1) * n]
    }

    pub(crate) fn layout(&self) -> u64 {
        self.layout
    }

    /// Per row, a stamp that changes whenever the row may have changed (see the field).
    pub(crate) fn stamps(&self) -> &[u64] {
        &self.stamps
    }

    /// Every value, row after row.
    pub(crate) fn values(&self) -> &[f64] {
        &self.values
    }

    /// Per column, a stamp that changes whenever the column may have changed.
    pub(crate) fn col_stamps(&self) -> &[u64] {
        &self.col_stamps
    }

    fn touch(&mut self, row: usize, col: Option<usize>) {
        self.clock += 1;
        self.stamps[row] = self.clock;
        match col {
            Some(c) => self.col_stamps[c] = self.clock,
            None => self.col_stamps.fill(self.clock),
        }
    }

    /// The row of server `id`.
    pub fn row_of(&self, id: &ServerId) -> Option<usize> {
        self.id_index.get(id).copied()
    }

    /// The column of metric `name`.
    pub fn col_of(&self, name: &str) -> Option<usize> {
        self.name_index.get(name).copied()
    }

    fn server_row(&mut self, id: ServerId) -> usize {
        if let Some(&r) = self.id_index.get(&id) {
            return r;
        }
        let r = self.ids.len();
        self.id_index.insert(id.clone(), r);
        self.ids.push(id);
        self.values
            .extend(std::iter::repeat_n(f64::NAN, self.names.len()));
        self.stamps.push(0);
        self.layout = next_layout();
        r
    }

    fn metric_col(&mut self, name: &str) -> usize {
        if let Some(&c) = self.name_index.get(name) {
            return c;
        }
        let old = self.names.len();
        let mut values = Vec::with_capacity(self.ids.len() * (old + 1));
        for r in 0..self.ids.len() {
            values.extend_from_slice(&self.values[r * old..(r + 1) * old]);
            values.push(f64::NAN);
        }
        self.values = values;
        self.names.push(name.to_string());
        self.col_stamps.push(0);
        self.name_index.insert(name.to_string(), old);
        self.layout = next_layout();
        old
    }

    /// Parses the JSON form `{"whoami": ID, "servers": {ID: {METRIC: NUMBER}}}`.
    ///
    /// `source` names the input in errors (a file path, usually).
    pub fn from_json(text: &str, source: &str) -> Result<Self, PolicyError> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Doc {
            whoami: ServerId,
            servers: BTreeMap<String, BTreeMap<String, serde_json::Value>>,
        }
        let doc: Doc = serde_json::from_str(text).map_err(|e| {
            PolicyError::Input(format!(
                "{source}:{}:{}: invalid metrics: {e} (expected {{\"whoami\": ID, \"servers\": {{ID: {{METRIC: NUMBER}}}}}})",
                e.line(),
                e.column()
            ))
        })?;
        let mut m = Metrics::new(doc.whoami);
        for (id, metrics) in doc.servers {
            let sid = ServerId::parse(&id);
            m.server_row(sid.clone());
            for (name, v) in metrics {
                let x = v.as_f64().ok_or_else(|| {
                    PolicyError::Input(format!(
                        "{source}: servers[{id}][{name}] is {v}, expected a number"
                    ))
                })?;
                m.set(sid.clone(), &name, x);
            }
        }
        Ok(m)
    }
}

/// One time-series point: `(timestamp, value)`.
pub type Point = (f64, f64);

/// The service's time-series buffer, shared with the engine without copying.
///
/// Cloning gives another handle to the same buffer: the service appends to it, and a policy's
/// `timeseries():get(i)` reads the current contents directly.
#[derive(Debug, Clone, Default)]
pub struct TimeSeries(Rc<RefCell<Vec<Point>>>);

impl TimeSeries {
    /// An empty buffer.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends a point.
    pub fn push(&self, ts: f64, value: f64) {
        self.0.borrow_mut().push((ts, value));
    }

    /// Replaces the whole contents.
    pub fn replace(&self, points: Vec<Point>) {
        *self.0.borrow_mut() = points;
    }

    /// Drops every point.
    pub fn clear(&self) {
        self.0.borrow_mut().clear();
    }

    /// Number of points.
    pub fn len(&self) -> usize {
        self.0.borrow().len()
    }

    /// True when there are no points.
    pub fn is_empty(&self) -> bool {
        self.0.borrow().is_empty()
    }

    /// Runs `f` with mutable access to the points (bulk edits, trimming old points).
    pub fn with_mut<R>(&self, f: impl FnOnce(&mut Vec<Point>) -> R) -> R {
        f(&mut self.0.borrow_mut())
    }

    /// Point `i` (0-based), if present.
    pub fn get(&self, i: usize) -> Option<Point> {
        self.0.borrow().get(i).copied()
    }

    /// Parses `ts,value` lines; blank lines and lines starting with `#` are skipped, and a
    /// header line whose fields are not numbers is allowed as the first line.
    pub fn from_csv(text: &str, source: &str) -> Result<Self, PolicyError> {
        let mut points = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let mut it = line.split(',');
            let (a, b) = (it.next().unwrap_or(""), it.next());
            let parsed = match (a.trim().parse::<f64>(), b.map(|b| b.trim().parse::<f64>())) {
                (Ok(t), Some(Ok(v))) if it.next().is_none() => Some((t, v)),
                _ => None,
            };
            match parsed {
                Some(p) => points.push(p),
                None if i == 0 => continue, // header
                None => {
                    return Err(PolicyError::Input(format!(
                        "{source}:{}: expected `ts,value` with two numbers, got {line:?}",
                        i + 1
                    )));
                }
            }
        }
        let ts = Self::new();
        ts.replace(points);
        Ok(ts)
    }

    pub(crate) fn inner(&self) -> &Rc<RefCell<Vec<Point>>> {
        &self.0
    }
}

/// Policy parameters (`params.absorb`), set by whoever installs the policy, so one policy file
/// serves many thresholds without editing.
pub type Params = BTreeMap<String, ParamValue>;

/// A parameter's value: a number or a string.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ParamValue {
    /// A number.
    Num(f64),
    /// A string.
    Str(String),
}

impl ParamValue {
    /// Parses `"1e5"` as a number and anything else as a string.
    pub fn parse(s: &str) -> Self {
        s.trim()
            .parse::<f64>()
            .map(Self::Num)
            .unwrap_or_else(|_| Self::Str(s.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_grow_in_both_directions() {
        let mut m = Metrics::new(1);
        m.set(1, "cpu", 0.5);
        m.set(2, "cpu", 0.7);
        m.set(1, "load", 3.0);
        assert_eq!(m.get(&1.into(), "cpu"), Some(0.5));
        assert_eq!(m.get(&2.into(), "cpu"), Some(0.7));
        assert_eq!(m.get(&1.into(), "load"), Some(3.0));
        assert_eq!(m.get(&2.into(), "load"), None, "unset metric is absent");
        assert_eq!(m.names(), ["cpu", "load"]);
    }

    #[test]
    fn metrics_json_numeric_keys_match_numeric_whoami() {
        let m = Metrics::from_json(
            r#"{"whoami": 2, "servers": {"1": {"load": 1}, "2": {"load": 5}, "mds.a": {"load": 0}}}"#,
            "m.json",
        )
        .expect("valid");
        assert_eq!(m.whoami(), &ServerId::Num(2));
        assert_eq!(m.get(&ServerId::Num(2), "load"), Some(5.0));
        assert_eq!(m.get(&ServerId::Name("mds.a".into()), "load"), Some(0.0));
    }

    #[test]
    fn metrics_json_errors_name_the_field() {
        let e = Metrics::from_json(
            r#"{"whoami": 1, "servers": {"1": {"cpu": "hot"}}}"#,
            "m.json",
        )
        .expect_err("string metric");
        assert!(e.to_string().contains("servers[1][cpu]"), "{e}");
        let e =
            Metrics::from_json("{\"whoami\": 1,\n \"server\": {}}", "m.json").expect_err("typo");
        assert!(e.to_string().starts_with("m.json:2:"), "{e}");
    }

    #[test]
    fn timeseries_csv_reports_line_of_bad_row() {
        let ts = TimeSeries::from_csv("ts,value\n1,10\n2,20\n", "t.csv").expect("valid");
        assert_eq!(ts.len(), 2);
        assert_eq!(ts.get(1), Some((2.0, 20.0)));
        let e = TimeSeries::from_csv("1,10\n2,x\n", "t.csv").expect_err("bad row");
        assert!(e.to_string().contains("t.csv:2:"), "{e}");
    }
}
