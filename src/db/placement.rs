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
use std::sync::Mutex;
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
    asked: Instant,
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
}

impl Placements {
    /// Routes for statements otherwise sent through `coordinator`; the pools
    /// to the nodes log in as it does and act as the same role.
    pub fn new(coordinator: PgPool) -> Self {
        Placements {
            coordinator,
            routes: Mutex::new(HashMap::new()),
            nodes: Mutex::new(HashMap::new()),
        }
    }

    /// The pool for `authority`'s engine steps: the node holding its shards
    /// when this process reaches it, else the coordinator. Never fails: what
    /// cannot be asked or reached is logged, and the coordinator serves.
    pub async fn pool_for(&self, authority: &str) -> PgPool {
        if let Some(route) = self.routes.lock().expect("routes lock").get(authority)
            && route.asked.elapsed() < ROUTE_TTL
        {
            return route
                .pool
                .clone()
                .unwrap_or_else(|| self.coordinator.clone());
        }
        let pool = match holder_of(&self.coordinator, authority).await {
            Ok(Some(node)) => self.pool_to(&node).await,
            Ok(None) => None,
            Err(e) => {
                tracing::warn!(authority, error = %e, "cannot ask which node holds the authority's shards; its steps go through the coordinator");
                None
            }
        };
        self.routes.lock().expect("routes lock").insert(
            authority.to_owned(),
            Route {
                pool: pool.clone(),
                asked: Instant::now(),
            },
        );
        pool.unwrap_or_else(|| self.coordinator.clone())
    }

    /// Forgets `authority`'s route (a step sent there failed): the next
    /// step asks again.
    pub fn forget(&self, authority: &str) {
        self.routes.lock().expect("routes lock").remove(authority);
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
/// says (the shard of `commands`; the other tables are co-located with it);
/// `None` when the coordinator holds them itself.
pub async fn holder_of(coordinator: &PgPool, authority: &str) -> Result<Option<Node>, sqlx::Error> {
    // Citus's catalog exists only on Citus: not a compile-time checked query.
    let row: Option<(String, i32, i32)> = sqlx::query_as(
        "select n.nodename::text, n.nodeport, n.groupid
         from pg_dist_placement p
         join pg_dist_node n on n.groupid = p.groupid
         where p.shardid = get_shard_id_for_distribution_column('commands', $1)
           and n.noderole = 'primary' and n.isactive
         order by n.nodeid
         limit 1",
    )
    .bind(authority)
    .fetch_optional(coordinator)
    .await?;
    Ok(row.and_then(|(host, port, group)| {
        (group != 0).then_some(Node {
            host,
            port: u16::try_from(port).ok()?,
        })
    }))
}
