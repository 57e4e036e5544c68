//! The coordination store on etcd (cargo feature `etcd`), for clusters across machines. Keys,
//! under the prefix `/pliant/`:
//!
//! ```text
//! /pliant/map             the slot map's JSON (SlotMap::to_json)
//! /pliant/version         its version, a decimal: a map update is one transaction that puts
//!                         both if `version` still holds what the writer read
//! /pliant/members/<id>    a node's Member JSON, put under a lease of the node's ttl, renewed
//!                         by keepalives: when the lease ends, etcd deletes the key
//! /pliant/balancer        the balancer policy's record (BalancerRecord JSON), replaced in a
//!                         transaction that checks it is still the one read
//! /pliant/supervisor      ADDR:PORT where a local cluster's supervisor (`pliant cluster up
//!                         --etcd`) takes PLIANT.COORD SPAWN and RETIRE, while it runs: a
//!                         commission's new nodes are started there, as with the embedded store
//! ```
//!
//! Nodes follow the state by one watch of the prefix; each event makes them read the state
//! again (a few KiB), so a watcher never has to apply deltas in order.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use etcd_client::{Client, Compare, CompareOp, GetOptions, PutOptions, Txn, TxnOp, WatchOptions};
use tokio::sync::watch;

use crate::coord::{BoxFuture, ClusterState, Coord, CoordError};
use crate::map::{Member, SlotMap};

const PREFIX: &str = "/pliant/";
const MAP: &str = "/pliant/map";
const VERSION: &str = "/pliant/version";
const MEMBERS: &str = "/pliant/members/";
const BALANCER: &str = "/pliant/balancer";
const SUPERVISOR: &str = "/pliant/supervisor";

/// How long the watch waits before watching again after it lost etcd.
const RETRY: Duration = Duration::from_millis(500);

/// The coordination store on the etcd cluster at `endpoints`.
pub struct Etcd {
    endpoints: String,
    client: Client,
    /// The lease of each node joined through this client.
    leases: Mutex<HashMap<String, i64>>,
    /// How the supervisor's SPAWN and RETIRE are sent: the cluster's password, aimed at no node.
    dialer: pliant_proto::Dialer,
}

impl Etcd {
    /// Connects to etcd at `url` (`http://HOST:2379`, several comma-separated).
    pub async fn connect(url: &str) -> Result<Self, CoordError> {
        let endpoints: Vec<&str> = url.split(',').map(str::trim).collect();
        // The timeout bounds each request; HTTP/2 keep-alive pings bound the streams (a
        // lease's keepalive, the watch), which have no reply to wait for otherwise: a dead
        // connection ends them within the ping timeout instead of hanging.
        let options = etcd_client::ConnectOptions::new()
            .with_connect_timeout(Duration::from_secs(5))
            .with_timeout(Duration::from_secs(5))
            .with_keep_alive(Duration::from_secs(2), Duration::from_secs(5))
            .with_keep_alive_while_idle(true);
        let client = Client::connect(&endpoints, Some(options))
            .await
            .map_err(|e| unreachable(url, e))?;
        Ok(Self {
            endpoints: url.to_string(),
            client,
            leases: Mutex::new(HashMap::new()),
            dialer: pliant_proto::Dialer::default(),
        })
    }

    /// How to reach a supervisor (its SPAWN and RETIRE need the cluster's password).
    pub fn with_dialer(mut self, dialer: pliant_proto::Dialer) -> Self {
        self.dialer = dialer;
        self
    }

    /// Records where this cluster's supervisor takes SPAWN and RETIRE (`None`: nowhere, as it
    /// stops).
    pub async fn set_supervisor(
        &self,
        addr: Option<std::net::SocketAddr>,
    ) -> Result<(), CoordError> {
        let mut c = self.client.clone();
        match addr {
            Some(a) => c.put(SUPERVISOR, a.to_string(), None).await.map(drop),
            None => c.delete(SUPERVISOR, None).await.map(drop),
        }
        .map_err(|e| self.fail(e))
    }

    /// Removes the supervisor's address if it is still `addr`.
    pub async fn forget_supervisor(&self, addr: std::net::SocketAddr) -> Result<(), CoordError> {
        let txn = Txn::new()
            .when([Compare::value(
                SUPERVISOR,
                CompareOp::Equal,
                addr.to_string(),
            )])
            .and_then([TxnOp::delete(SUPERVISOR, None)]);
        let mut c = self.client.clone();
        c.txn(txn).await.map(drop).map_err(|e| self.fail(e))
    }

    /// The supervisor recorded in etcd, as a client of its SPAWN and RETIRE; `None` if none
    /// runs (nodes are started by hand), or the one recorded does not answer (a supervisor
    /// killed before it could remove its record).
    async fn supervisor(&self) -> Result<Option<crate::remote::Remote>, CoordError> {
        let mut c = self.client.clone();
        let got = c.get(SUPERVISOR, None).await.map_err(|e| self.fail(e))?;
        let Some(kv) = got.kvs().first() else {
            return Ok(None);
        };
        let text = String::from_utf8_lossy(kv.value()).into_owned();
        let addr: std::net::SocketAddr = text.trim().parse().map_err(|_| {
            CoordError::Refused(format!("etcd key {SUPERVISOR}: {text:?} is not ADDR:PORT"))
        })?;
        if tokio::time::timeout(Duration::from_secs(2), tokio::net::TcpStream::connect(addr))
            .await
            .is_ok_and(|r| r.is_ok())
        {
            Ok(Some(crate::remote::Remote::new(addr, &self.dialer)))
        } else {
            tracing::warn!("the supervisor etcd names ({addr}) does not answer; ignoring it");
            Ok(None)
        }
    }

    fn fail(&self, e: etcd_client::Error) -> CoordError {
        unreachable(&self.endpoints, e)
    }

    async fn read(&self) -> Result<ClusterState, CoordError> {
        let mut c = self.client.clone();
        let got = c
            .get(PREFIX, Some(GetOptions::new().with_prefix()))
            .await
            .map_err(|e| self.fail(e))?;
        let mut map = SlotMap::empty();
        let mut members = Vec::new();
        let mut balancer = None;
        for kv in got.kvs() {
            let key = String::from_utf8_lossy(kv.key());
            let text = std::str::from_utf8(kv.value())
                .map_err(|_| CoordError::Refused(format!("etcd key {key}: not UTF-8")))?;
            if key == MAP {
                map = SlotMap::from_json(text)?;
            } else if key == BALANCER {
                balancer = Some(
                    serde_json::from_str(text)
                        .map_err(|e| CoordError::Refused(format!("etcd key {key}: {e}")))?,
                );
            } else if key.starts_with(MEMBERS) {
                let m: Member = serde_json::from_str(text)
                    .map_err(|e| CoordError::Refused(format!("etcd key {key}: {e}")))?;
                members.push(m);
            }
        }
        // etcd lists keys in key order; members in id order is as good as join order here.
        Ok(ClusterState {
            map,
            members,
            balancer,
        })
    }

    /// Keeps `tx` current from a watch of the prefix, watching again whenever it is lost, until
    /// every receiver is gone.
    async fn follow(client: Client, me: Arc<Etcd>, tx: watch::Sender<Arc<ClusterState>>) {
        let mut warned = false;
        while !tx.is_closed() {
            let mut c = client.clone();
            match c
                .watch(PREFIX, Some(WatchOptions::new().with_prefix()))
                .await
            {
                Ok(mut stream) => {
                    // Changes between the last read and the watch's start are read here; an
                    // older map (etcd restored from an older snapshot) never replaces a newer.
                    if let Ok(s) = me.read().await
                        && s.map.version() >= tx.borrow().map.version()
                    {
                        tx.send_replace(Arc::new(s));
                    }
                    loop {
                        tokio::select! {
                            msg = stream.message() => match msg {
                                Ok(Some(_)) => match me.read().await {
                                    Ok(s) if s.map.version() >= tx.borrow().map.version() => {
                                        tx.send_replace(Arc::new(s));
                                    }
                                    Ok(_) => {}
                                    Err(e) => {
                                        tracing::warn!("{e}");
                                        break;
                                    }
                                },
                                Ok(None) | Err(_) => break,
                            },
                            _ = tx.closed() => return,
                        }
                    }
                }
                Err(e) => {
                    if !warned {
                        tracing::warn!(
                            "{}; keeping the last slot map and trying again",
                            me.fail(e)
                        );
                        warned = true;
                    }
                }
            }
            tokio::time::sleep(RETRY).await;
        }
    }
}

fn unreachable(url: &str, e: impl std::fmt::Display) -> CoordError {
    CoordError::Unreachable {
        addr: url.to_string(),
        why: e.to_string(),
    }
}

impl Coord for Arc<Etcd> {
    fn join(&self, me: Member, ttl: Duration) -> BoxFuture<'_, Result<(), CoordError>> {
        Box::pin(async move {
            let secs = i64::try_from(ttl.as_secs().clamp(1, 600)).unwrap_or(600);
            let mut c = self.client.clone();
            let lease = c
                .lease_grant(secs, None)
                .await
                .map_err(|e| self.fail(e))?
                .id();
            let json = serde_json::to_string(&me).expect("a member serialises");
            c.put(
                format!("{MEMBERS}{}", me.id),
                json,
                Some(PutOptions::new().with_lease(lease)),
            )
            .await
            .map_err(|e| self.fail(e))?;
            let old = self
                .leases
                .lock()
                .expect("leases lock")
                .insert(me.id.clone(), lease);
            if let Some(old) = old {
                let _ = c.lease_revoke(old).await;
            }
            Ok(())
        })
    }

    fn keepalive<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<(), CoordError>> {
        Box::pin(async move {
            let lease = self.leases.lock().expect("leases lock").get(id).copied();
            let Some(lease) = lease else {
                return Err(CoordError::NoLease(id.to_string()));
            };
            let mut c = self.client.clone();
            let (mut keeper, mut stream) =
                c.lease_keep_alive(lease).await.map_err(|e| self.fail(e))?;
            keeper.keep_alive().await.map_err(|e| self.fail(e))?;
            let answer = tokio::time::timeout(Duration::from_secs(5), stream.message())
                .await
                .map_err(|_| unreachable(&self.endpoints, "no keepalive answer within 5 s"))?;
            match answer.map_err(|e| self.fail(e))? {
                Some(r) if r.ttl() > 0 => Ok(()),
                _ => Err(CoordError::NoLease(id.to_string())),
            }
        })
    }

    fn leave<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<(), CoordError>> {
        Box::pin(async move {
            let lease = self.leases.lock().expect("leases lock").remove(id);
            let mut c = self.client.clone();
            if let Some(lease) = lease {
                c.lease_revoke(lease).await.map_err(|e| self.fail(e))?;
            }
            Ok(())
        })
    }

    fn state(&self) -> BoxFuture<'_, Result<ClusterState, CoordError>> {
        Box::pin(async move { self.read().await })
    }

    fn update(&self, expected: u64, map: SlotMap) -> BoxFuture<'_, Result<bool, CoordError>> {
        Box::pin(async move {
            let next = expected.checked_add(1).ok_or_else(|| {
                CoordError::Refused("the map version cannot grow any further".into())
            })?;
            // The moves the map goes on with keep the version they began at: read against the
            // map it replaces, which the transaction's guard below keeps current.
            let current = self.read().await?.map;
            if current.version() != expected {
                return Ok(false);
            }
            let map = map.with_moves_begun(&current, next).with_version(next);
            // Version 0 is no map at all: the key must not exist yet.
            let guard = if expected == 0 {
                Compare::create_revision(VERSION, CompareOp::Equal, 0)
            } else {
                Compare::value(VERSION, CompareOp::Equal, expected.to_string())
            };
            let txn = Txn::new().when([guard]).and_then([
                TxnOp::put(MAP, map.to_json(), None),
                TxnOp::put(VERSION, next.to_string(), None),
            ]);
            let mut c = self.client.clone();
            let r = c.txn(txn).await.map_err(|e| self.fail(e))?;
            Ok(r.succeeded())
        })
    }

    fn set_balancer(
        &self,
        record: crate::coord::BalancerRecord,
    ) -> BoxFuture<'_, Result<u64, CoordError>> {
        Box::pin(async move {
            let mut c = self.client.clone();
            for _ in 0..100 {
                let got = c.get(BALANCER, None).await.map_err(|e| self.fail(e))?;
                let (current, guard) = match got.kvs().first() {
                    None => (
                        None,
                        Compare::create_revision(BALANCER, CompareOp::Equal, 0),
                    ),
                    Some(kv) => (
                        Some(
                            serde_json::from_slice::<crate::coord::BalancerRecord>(kv.value())
                                .map_err(|e| {
                                    CoordError::Refused(format!("etcd key {BALANCER}: {e}"))
                                })?,
                        ),
                        Compare::mod_revision(BALANCER, CompareOp::Equal, kv.mod_revision()),
                    ),
                };
                let next = record.clone().after(current.as_ref());
                let json = serde_json::to_string(&next).expect("a balancer record serialises");
                let txn = Txn::new()
                    .when([guard])
                    .and_then([TxnOp::put(BALANCER, json, None)]);
                if c.txn(txn).await.map_err(|e| self.fail(e))?.succeeded() {
                    return Ok(next.version);
                }
            }
            Err(CoordError::Refused(
                "the balancer record kept changing under 100 attempts".into(),
            ))
        })
    }

    fn spawn(&self, n: usize) -> BoxFuture<'_, Result<Vec<String>, CoordError>> {
        Box::pin(async move {
            match self.supervisor().await? {
                Some(sv) => sv.spawn_nodes(n).await,
                None => Err(CoordError::Refused(crate::coord::NO_SUPERVISOR.into())),
            }
        })
    }

    fn retire<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<(), CoordError>> {
        Box::pin(async move {
            match self.supervisor().await? {
                Some(sv) => sv.retire_node(id).await,
                None => Err(CoordError::Refused(crate::coord::NO_SUPERVISOR.into())),
            }
        })
    }

    fn watch(&self) -> BoxFuture<'_, Result<watch::Receiver<Arc<ClusterState>>, CoordError>> {
        Box::pin(async move {
            let first = self.read().await?;
            let (tx, rx) = watch::channel(Arc::new(first));
            tokio::spawn(Etcd::follow(self.client.clone(), self.clone(), tx));
            Ok(rx)
        })
    }
}
