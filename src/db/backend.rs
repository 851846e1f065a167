//! What the database behind a pool can and cannot do, detected once when the
//! pool opens ([`Backend::detect`]) and carried from there (`AppState`, group
//! commit, the custodian, recovery). Code outside `db` asks these
//! capabilities, never which product answers: a distributed backend (a
//! Citus coordinator, docs/SCALING.md) differs from one PostgreSQL in the
//! few ways the fields name, each by what the code does differently.

/// The capabilities of the ledger's database. `Copy`: pass it by value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backend {
    /// The ledger's tables are ordinary tables of the database the pool
    /// connects to: their rows, statistics, triggers and plans are there.
    /// False when `migrate` distributes them by authority over worker nodes
    /// (`ledger_distribute()`, migration 0019), where each runs on its shard.
    pub local_tables: bool,
    /// The commit that makes a command terminal also wakes its waiters (a
    /// trigger's `NOTIFY` in that transaction). When false, whoever
    /// committed sends the notification right after
    /// (`ledger::OutcomeWake`), and the API's waiters also re-read on a
    /// timer (`http::wait::REREAD_FALLBACK`), since a notification sent
    /// after the commit is lost if its sender dies first.
    pub outcome_notify_in_transaction: bool,
    /// A submission writes its key's row in `command_keys` first, in its
    /// own transaction, and looks keys up there
    /// ([`super::submissions`], migration 0020): the table holding the commands
    /// cannot keep a key unique across authorities. When false the unique
    /// constraint on `commands` does.
    pub key_table_first: bool,
    /// The custodian's claim names one authority per statement (each then
    /// runs on one shard group), taking the leased authorities in turn; when
    /// false, one statement claims for all of them.
    pub claims_per_authority: bool,
    /// The custodian's transitions run with one generic plan for every
    /// authority ([`super::txn::GENERIC_PLANS`]). A distributed backend cannot
    /// run these statements from a generic plan, and plans each for its
    /// shard anyway.
    pub generic_plans: bool,
    /// The tables' shards live on other nodes, each authority's on one, and
    /// every node can run the engine's steps: a custodian sends each
    /// authority's steps straight to the node holding its shards
    /// ([`super::placement`]), falling back to this pool's node when it
    /// cannot reach that one. When false, everything goes through this pool.
    pub steps_on_shard_nodes: bool,
    /// The API's waiters re-read their command on the node holding its
    /// authority's shards ([`super::placement`]), one hop fewer than
    /// through this pool's node, and through this pool when that read
    /// fails. When false, every read goes through this pool.
    pub reads_on_shard_nodes: bool,
    /// A transaction's `SET LOCAL`s travel in its `BEGIN`'s message: one
    /// round trip ([`super::txn`]). When false they follow in a message of
    /// their own: Citus keeps a `SET`'s whole message and sends it again on
    /// each worker connection the transaction then opens, so a `BEGIN` in
    /// it would reach every worker a transaction touches inside its own
    /// transaction, and each would warn (and log) "there is already a
    /// transaction in progress".
    pub set_local_in_begin: bool,
    /// Limits per provider are held by a claim of their groups' commands of
    /// its own, through this pool's node (migration 0049): the groups'
    /// room read and locked there, the claim on the node holding the
    /// authority's shards within that room, the tokens charged there; and
    /// each authority's shards hold which group each of its kinds belongs
    /// to. When false, the claim holds them itself (`ledger_claim_start`).
    pub provider_rooms_on_coordinator: bool,
}

impl Backend {
    /// One PostgreSQL server.
    pub const ONE_NODE: Backend = Backend {
        local_tables: true,
        outcome_notify_in_transaction: true,
        key_table_first: false,
        claims_per_authority: false,
        generic_plans: true,
        steps_on_shard_nodes: false,
        reads_on_shard_nodes: false,
        set_local_in_begin: true,
        provider_rooms_on_coordinator: false,
    };

    /// A Citus coordinator (the `citus` extension is installed): the tables
    /// are distributed by authority, and the shards' triggers run on the
    /// workers, whose `NOTIFY` reaches no listener of the coordinator.
    pub const CITUS: Backend = Backend {
        local_tables: false,
        outcome_notify_in_transaction: false,
        key_table_first: true,
        claims_per_authority: true,
        generic_plans: false,
        steps_on_shard_nodes: true,
        reads_on_shard_nodes: true,
        set_local_in_begin: false,
        provider_rooms_on_coordinator: true,
    };

    /// The backend of the database `ex` is connected to: asked once, where
    /// the pool is opened.
    pub async fn detect(ex: impl sqlx::PgExecutor<'_>) -> Result<Backend, sqlx::Error> {
        let citus: bool = sqlx::query_scalar(
            "select exists (select 1 from pg_extension where extname = 'citus')",
        )
        .fetch_one(ex)
        .await?;
        Ok(if citus {
            Backend::CITUS
        } else {
            Backend::ONE_NODE
        })
    }

    /// The product, as the command line names it to an operator.
    pub fn product(self) -> &'static str {
        if self == Backend::CITUS {
            "Citus"
        } else {
            "PostgreSQL"
        }
    }
}

/// What `command-ledger migrate` says about its flag requiring a
/// distributed backend (the command line's help, kept with the backends).
pub mod migrate_help {
    /// The flag's name: `migrate --citus`.
    pub const REQUIRE_FLAG: &str = "citus";
    /// The subcommand's help.
    pub const ABOUT: &str = "Apply database migrations and exit. On a Citus coordinator (detected: \
         the `citus` extension is installed) the tables are then distributed by authority \
         (docs/SCALING.md)";
    /// The flag's help.
    pub const REQUIRE_HELP: &str = "Require a Citus coordinator: fail, after migrating, if the \
         database is not one (instead of leaving the tables on one node)";
    /// The refusal when the flag was given and the backend is not distributed.
    pub const NOT_DISTRIBUTED: &str = "migrations applied, but the database is not a Citus \
         coordinator (no citus extension): create extension citus and add the workers, then \
         run migrate --citus again";
}
