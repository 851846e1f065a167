//! On Citus: which node holds an authority's shards, and a pool to it.
//!
//! A custodian's engine steps (`ledger_claim_start_authority`,
//! `ledger_record_outcomes`, migration 0033) run whole on the node holding
//! the authority's shards. Sent to the coordinator, each step's call, its
//! `BEGIN` and its `COMMIT` make a hop from there to that node; sent to the
//! node itself they run there at once (statements on local shards are
//! executed locally). A step sent to a node the shards have left (a
//! rebalance moved them) fails there and changes nothing: its statements
//! would have to reach the new node as the steps' owner, `ledger_engine`,
//! which does not log in. The custodian then forgets the route, and its
//! next turn asks the coordinator's metadata again (as it does every
//! [`ROUTE_TTL`] anyway). The rebalance trial (`scripts/citus-fault-trial
//! --rebalance`) sees a few such failures while the shards move, and no
//! violation.
//!
//! A node this process cannot reach (a network that lets it reach only the
//! coordinator, a password the node does not know) is left aside for
//! [`ROUTE_TTL`], with a warning: the steps go through the coordinator, as
//! they do off Citus, and nothing else changes.

use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long a route (or a node found unreachable) is kept before it is
/// asked again: shards move seldom, and a step sent to the old node fails
/// without effect and makes the route be asked again at once.
pub const ROUTE_TTL: Duration = Duration::from_secs(30);

/// How long the first connection to a node may take before the node is
/// left aside.
pub const CONNECT_PATIENCE: Duration = Duration::from_secs(2);

/// A node of the cluster, as the coordinator's metadata names it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Node {
    pub host: String,
    pub port: u16,
}

impl std::fmt::Display for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.host, self.port)
    }
}

/// Where an authority's steps go: a worker, or the coordinator (which holds
/// the shards itself, or whose worker cannot be reached from here).
#[derive(Debug, Clone)]
struct Route {
    pool: Option<PgPool>,
    copy: Option<i64>,
    /// The node's copies for the authority's shards were asked for and are
    /// not current (missing, or made from another text of a step).
    stale: bool,
    asked: Instant,
}

/// Where an authority's engine steps run, and which: the copies that name
/// its shards (migration 0039), `ledger_claim_start_authority_s<copy>` and
/// `ledger_record_outcomes_s<copy>`, where that pool's node has them, else
/// the steps as they are (`copy` is `None`).
#[derive(Debug, Clone)]
pub struct StepRoute {
    pub pool: PgPool,
    pub copy: Option<i64>,
    /// Whether `pool` is the node's own (not the coordinator's).
    pub on_node: bool,
}

impl StepRoute {
    /// The steps as they are, on `pool` itself (no other node).
    pub fn here(pool: &PgPool) -> Self {
        StepRoute {
            pool: pool.clone(),
            copy: None,
            on_node: false,
        }
    }

    /// `backend` as a transaction on this route sees it. On the node holding
    /// the shards a transaction's `SET LOCAL`s travel in its `BEGIN`'s
    /// message, as on one node: Citus sends a `SET`'s message again only on
    /// the connections to other nodes that a transaction opens, and a step
    /// there runs on local shards (were they moved meanwhile, that node
    /// would warn once, and the step fail as it does).
    pub fn backend(&self, backend: super::Backend) -> super::Backend {
        super::Backend {
            set_local_in_begin: backend.set_local_in_begin || self.on_node,
            ..backend
        }
    }
}

/// What is known of a node: a pool to it, or when it was found unreachable.
#[derive(Debug, Clone)]
enum Reach {
    Pool(PgPool),
    Unreachable(Instant),
}

/// The routes of one process's authorities, and its pools to the nodes.
#[derive(Debug)]
pub struct Placements {
    coordinator: PgPool,
    routes: Mutex<HashMap<String, Route>>,
    nodes: Mutex<HashMap<Node, Reach>>,
    /// Authorities whose step failed while it ran a copy, and when: they run
    /// the steps as they are for [`ROUTE_TTL`], so that a copy that cannot
    /// serve (left behind by a move, or broken) never stops them.
    copy_failed: Mutex<HashMap<String, Instant>>,
    /// Whether a route asks its node for the steps' copies (a custodian's
    /// routes do; a reader's need only the node).
    copies: bool,
    /// How many authorities' steps run as they are because their node's
    /// copies are not current, as last asked (a gauge the custodian's
    /// metrics show).
    stale_copies: Arc<AtomicU64>,
}

impl Placements {
    /// Routes for statements otherwise sent through `coordinator`; the pools
    /// to the nodes log in as it does and act as the same role.
    pub fn new(coordinator: PgPool) -> Self {
        Placements {
            coordinator,
            routes: Mutex::new(HashMap::new()),
            nodes: Mutex::new(HashMap::new()),
            copy_failed: Mutex::new(HashMap::new()),
            copies: true,
            stale_copies: Arc::new(AtomicU64::new(0)),
        }
    }

    /// As [`Placements::new`], counting in `gauge` the authorities whose
    /// node's copies are not current.
    pub fn counting_stale_copies(coordinator: PgPool, gauge: Arc<AtomicU64>) -> Self {
        Placements {
            stale_copies: gauge,
            ..Placements::new(coordinator)
        }
    }

    /// Routes for reads only: the same nodes, without asking them for the
    /// steps' copies (every route's `copy` is `None`).
    pub fn for_reads(coordinator: PgPool) -> Self {
        Placements {
            copies: false,
            ..Placements::new(coordinator)
        }
    }

    /// Where `authority`'s engine steps go: the node holding its shards when
    /// this process reaches it, else the coordinator; and the copies of the
    /// steps that name its shards when that node has them. Never fails: what
    /// cannot be asked or reached is logged, and the coordinator serves.
    pub async fn route_for(&self, authority: &str) -> StepRoute {
        if let Some(route) = self.routes.lock().expect("routes lock").get(authority)
            && route.asked.elapsed() < ROUTE_TTL
        {
            return StepRoute {
                pool: route
                    .pool
                    .clone()
                    .unwrap_or_else(|| self.coordinator.clone()),
                copy: route.copy,
                on_node: route.pool.is_some(),
            };
        }
        let (pool, shard) = match holder_of(&self.coordinator, authority).await {
            Ok((Some(node), shard)) => (self.pool_to(&node).await, Some(shard)),
            Ok((None, shard)) => (None, Some(shard)),
            Err(e) => {
                tracing::warn!(authority, error = %e, "cannot ask which node holds the authority's shards; its steps go through the coordinator");
                (None, None)
            }
        };
        let on_node = pool.is_some();
        let serving = pool.clone().unwrap_or_else(|| self.coordinator.clone());
        let (copy, stale) = match shard {
            Some(shard) if self.copies && !self.copy_failed_lately(authority) => {
                match copies_current(&serving, shard).await {
                    Ok(true) => (Some(shard), false),
                    Ok(false) => {
                        // Said each time the route is asked, until the next
                        // `migrate` makes the copies again.
                        tracing::error!(
                            authority,
                            shard,
                            node = %format_args!("{}:{}", serving.connect_options().get_host(), serving.connect_options().get_port()),
                            "the node's copies of the engine steps for the authority's shards are not current (missing, or made from another text of a step, after an upgrade, a split or a move): its steps run as they are, slower, until `command-ledger migrate` makes the copies again"
                        );
                        (None, true)
                    }
                    Err(e) => {
                        tracing::warn!(authority, error = %e, "cannot ask whether the node's copies of the steps for the authority's shards are current; it runs the steps as they are");
                        (None, false)
                    }
                }
            }
            _ => (None, false),
        };
        {
            let mut routes = self.routes.lock().expect("routes lock");
            routes.insert(
                authority.to_owned(),
                Route {
                    pool,
                    copy,
                    stale,
                    asked: Instant::now(),
                },
            );
            let stale = routes.values().filter(|route| route.stale).count();
            self.stale_copies
                .store(u64::try_from(stale).unwrap_or(u64::MAX), Ordering::Relaxed);
        }
        StepRoute {
            pool: serving,
            copy,
            on_node,
        }
    }

    /// Forgets `authority`'s route (a step sent there failed): the next
    /// step asks again, and runs the steps as they are for [`ROUTE_TTL`] if
    /// this one ran a copy.
    pub fn forget(&self, authority: &str) {
        let route = self.routes.lock().expect("routes lock").remove(authority);
        if route.is_some_and(|route| route.copy.is_some()) {
            self.copy_failed
                .lock()
                .expect("copy_failed lock")
                .insert(authority.to_owned(), Instant::now());
        }
    }

    /// Whether a step of `authority` failed in a copy within [`ROUTE_TTL`].
    fn copy_failed_lately(&self, authority: &str) -> bool {
        let mut failed = self.copy_failed.lock().expect("copy_failed lock");
        failed.retain(|_, at| at.elapsed() < ROUTE_TTL);
        failed.contains_key(authority)
    }

    /// A pool to `node`, made at its first use and kept; `None` while the
    /// node is left aside as unreachable.
    pub async fn pool_to(&self, node: &Node) -> Option<PgPool> {
        match self.nodes.lock().expect("nodes lock").get(node) {
            Some(Reach::Pool(pool)) if !pool.is_closed() => return Some(pool.clone()),
            Some(Reach::Unreachable(at)) if at.elapsed() < ROUTE_TTL => return None,
            _ => {}
        }
        let reach = match self.open(node).await {
            Ok(pool) => {
                tracing::info!(%node, "engine steps go to the node holding their shards");
                Reach::Pool(pool)
            }
            Err(e) => {
                tracing::warn!(%node, error = %e, retry_in_s = ROUTE_TTL.as_secs(),
                    "cannot reach the node holding an authority's shards; its steps go through the coordinator");
                Reach::Unreachable(Instant::now())
            }
        };
        let pool = match &reach {
            Reach::Pool(pool) => Some(pool.clone()),
            Reach::Unreachable(_) => None,
        };
        self.nodes
            .lock()
            .expect("nodes lock")
            .insert(node.clone(), reach);
        pool
    }

    /// Opens a pool to `node` as the coordinator's pool logs in (user,
    /// password, database, TLS, application name), acting as the role its
    /// sessions act as, and makes its first connection within
    /// [`CONNECT_PATIENCE`].
    async fn open(&self, node: &Node) -> Result<PgPool, String> {
        let acting_as: (String, bool) = sqlx::query_as(
            "select current_user::text, current_user::text is distinct from session_user::text",
        )
        .fetch_one(&self.coordinator)
        .await
        .map_err(|e| e.to_string())?;
        let options = (*self.coordinator.connect_options())
            .clone()
            .host(&node.host)
            .port(node.port);
        let mut pool_options = PgPoolOptions::new()
            .max_connections(self.coordinator.options().get_max_connections())
            .acquire_timeout(self.coordinator.options().get_acquire_timeout());
        if acting_as.1 {
            pool_options = super::roles::acting_as(pool_options, &acting_as.0);
        }
        let pool = pool_options.connect_lazy_with(options);
        match tokio::time::timeout(CONNECT_PATIENCE, pool.acquire()).await {
            Ok(Ok(_first)) => Ok(pool),
            Ok(Err(e)) => {
                pool.close().await;
                Err(e.to_string())
            }
            Err(_) => {
                pool.close().await;
                Err(format!(
                    "no connection within {} s",
                    CONNECT_PATIENCE.as_secs()
                ))
            }
        }
    }

    /// Closes the pools to the nodes (the coordinator's is its owner's).
    pub async fn close(&self) {
        let pools: Vec<PgPool> = self
            .nodes
            .lock()
            .expect("nodes lock")
            .drain()
            .filter_map(|(_, reach)| match reach {
                Reach::Pool(pool) => Some(pool),
                Reach::Unreachable(_) => None,
            })
            .collect();
        self.routes.lock().expect("routes lock").clear();
        for pool in pools {
            pool.close().await;
        }
    }
}

/// The worker holding `authority`'s shards, as the coordinator's metadata
/// says (the shard of `commands`; the other tables are co-located with it),
/// `None` when the coordinator holds them itself; and the id of that shard.
pub async fn holder_of(
    coordinator: &PgPool,
    authority: &str,
) -> Result<(Option<Node>, i64), sqlx::Error> {
    // Citus's catalog exists only on Citus: not a compile-time checked query.
    let (shard, host, port, group): (i64, Option<String>, Option<i32>, Option<i32>) =
        sqlx::query_as(
            "select s.shard, n.nodename::text, n.nodeport, n.groupid
         from (select get_shard_id_for_distribution_column('commands', $1) as shard) s
         left join lateral (
             select n.nodename, n.nodeport, n.groupid
             from pg_dist_placement p
             join pg_dist_node n on n.groupid = p.groupid
             where p.shardid = s.shard and n.noderole = 'primary' and n.isactive
             order by n.nodeid
             limit 1) n on true",
        )
        .bind(authority)
        .fetch_one(coordinator)
        .await?;
    let node = match (host, port.map(u16::try_from), group) {
        (Some(host), Some(Ok(port)), Some(group)) if group != 0 => Some(Node { host, port }),
        _ => None,
    };
    Ok((node, shard))
}

/// Whether the node behind `pool` holds `shard`'s group and both copies of
/// the engine steps that name its shards, each what its step makes of it
/// today (migration 0039, `ledger_shard_step_copies_current`).
pub async fn copies_current(pool: &PgPool, shard: i64) -> Result<bool, sqlx::Error> {
    // The copies exist only on Citus nodes: not a compile-time checked query.
    sqlx::query_scalar("select ledger_shard_step_copies_current($1)")
        .bind(shard)
        .fetch_one(pool)
        .await
}
