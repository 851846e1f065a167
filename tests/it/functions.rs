//! The functions' and views' files (`migrations/functions`, applied by
//! `db::functions`) against the database: a migrated database holds exactly
//! what the files make (each definition, owner, right and comment, and no
//! function or view without a file), and a file the database does not hold
//! is applied by the next migrate, alone.

use std::collections::BTreeMap;

use command_ledger::db::{self, functions};
use sqlx::PgConnection;

use crate::harness::fresh_database;

/// A function or view as the catalog holds it: its definition, owner, the
/// rights others hold on it (sorted) and its comment.
#[derive(Debug, PartialEq, sqlx::FromRow)]
struct Held {
    name: String,
    definition: String,
    owner: String,
    rights: Vec<String>,
    comment: Option<String>,
}

/// What the catalog holds, by name.
type Definitions = BTreeMap<String, Held>;

/// The schema's functions (but the engine steps' copies by shard, which
/// `ledger_make_shard_steps_here()` makes) and views, by name.
async fn definitions(conn: &mut PgConnection) -> Definitions {
    let rows: Vec<Held> = sqlx::query_as(
        "select p.proname::text as name, pg_get_functiondef(p.oid) as definition,
                pg_get_userbyid(p.proowner)::text as owner,
                array(select case when a.grantee = 0 then 'public' else pg_get_userbyid(a.grantee)::text end || ':' || a.privilege_type
                      from aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) a
                      where a.grantee <> p.proowner order by 1) as rights,
                obj_description(p.oid, 'pg_proc') as comment
         from pg_proc p
         where p.pronamespace = 'public'::regnamespace
           and pg_get_userbyid(p.proowner) in ('ledger_owner', 'ledger_engine')
           and not exists (select 1 from pg_depend d where d.objid = p.oid and d.deptype = 'e')
           and p.proname !~ '_s[0-9]+$'
         union all
         select c.relname::text, pg_get_viewdef(c.oid), pg_get_userbyid(c.relowner)::text,
                array(select case when a.grantee = 0 then 'public' else pg_get_userbyid(a.grantee)::text end || ':' || a.privilege_type
                      from aclexplode(coalesce(c.relacl, acldefault('r', c.relowner))) a
                      where a.grantee <> c.relowner order by 1),
                obj_description(c.oid, 'pg_class')
         from pg_class c
         where c.relnamespace = 'public'::regnamespace and c.relkind = 'v'
           and pg_get_userbyid(c.relowner) = 'ledger_owner'",
    )
    .fetch_all(&mut *conn)
    .await
    .unwrap();
    let mut out = Definitions::new();
    for held in rows {
        let name = held.name.clone();
        let before = out.insert(name.clone(), held);
        assert!(before.is_none(), "{name} is defined twice (overloaded)");
    }
    out
}

/// Takes from every function and view what a file must give back: rights
/// held by others, the comment, and (functions) an owner other than the
/// schema's.
async fn strip(conn: &mut PgConnection) {
    let objects: Vec<(String, bool, String, Vec<String>)> = sqlx::query_as(
        "select p.oid::regprocedure::text, true, pg_get_userbyid(p.proowner)::text,
                array(select distinct case when a.grantee = 0 then 'public' else pg_get_userbyid(a.grantee)::text end
                      from aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) a
                      where a.grantee <> p.proowner)
         from pg_proc p
         where p.pronamespace = 'public'::regnamespace
           and pg_get_userbyid(p.proowner) in ('ledger_owner', 'ledger_engine')
           and not exists (select 1 from pg_depend d where d.objid = p.oid and d.deptype = 'e')
           and p.proname !~ '_s[0-9]+$'
         union all
         select c.oid::regclass::text, false, pg_get_userbyid(c.relowner)::text,
                array(select distinct case when a.grantee = 0 then 'public' else pg_get_userbyid(a.grantee)::text end
                      from aclexplode(coalesce(c.relacl, acldefault('r', c.relowner))) a
                      where a.grantee <> c.relowner)
         from pg_class c
         where c.relnamespace = 'public'::regnamespace and c.relkind = 'v'
           and pg_get_userbyid(c.relowner) = 'ledger_owner'",
    )
    .fetch_all(&mut *conn)
    .await
    .unwrap();
    for (object, function, owner, grantees) in objects {
        let what = if function { "function" } else { "view" };
        let mut sql = format!("comment on {what} {object} is null;");
        if !grantees.is_empty() {
            let on = if function { "function " } else { "" };
            sql.push_str(&format!(
                "revoke all on {on}{object} from {};",
                grantees.join(", ")
            ));
        }
        if function && owner != "ledger_owner" {
            sql.push_str(&format!("alter function {object} owner to ledger_owner;"));
        }
        sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
            .execute(&mut *conn)
            .await
            .unwrap_or_else(|e| panic!("stripping {object}: {e}"));
    }
}

/// Names whose definitions differ, each with what differs.
fn differences(want: &Definitions, got: &Definitions) -> Vec<String> {
    let mut out = Vec::new();
    for name in want.keys().chain(got.keys()) {
        let (a, b) = (want.get(name), got.get(name));
        let what = match (a, b) {
            (Some(a), Some(b)) if a == b => continue,
            (Some(a), Some(b)) => {
                let mut parts = Vec::new();
                if a.definition != b.definition {
                    parts.push("definition");
                }
                if a.owner != b.owner {
                    parts.push("owner");
                }
                if a.rights != b.rights {
                    parts.push("rights");
                }
                if a.comment != b.comment {
                    parts.push("comment");
                }
                parts.join(", ")
            }
            (Some(_), None) => "only in the database".to_owned(),
            (None, _) => "only in the files".to_owned(),
        };
        let line = format!("{name}: {what}");
        if !out.contains(&line) {
            out.push(line);
        }
    }
    out
}

#[tokio::test]
async fn a_migrated_database_holds_exactly_what_the_function_files_make() {
    let (_url, pool) = fresh_database().await;
    let mut conn = pool.acquire().await.unwrap();
    let layout = functions::layout(&mut conn).await.unwrap();
    let sources = functions::sources(layout);
    let held = definitions(&mut conn).await;

    // Every function and view has a file, and every file's object exists.
    let named: Vec<&str> = sources
        .iter()
        .filter(|s| s.defines())
        .map(|s| s.name)
        .collect();
    let in_database: Vec<&str> = held.keys().map(String::as_str).collect();
    assert_eq!(
        in_database, named,
        "the database's functions and views against the files of migrations/functions ({layout:?})"
    );

    // What the files make, from objects stripped of what the files give:
    // the same definitions, owners, rights and comments.
    let mut tx = sqlx::Connection::begin(&mut *conn).await.unwrap();
    strip(&mut tx).await;
    for source in &sources {
        sqlx::raw_sql(sqlx::AssertSqlSafe(source.text))
            .execute(&mut *tx)
            .await
            .unwrap_or_else(|e| panic!("applying {}: {e}", source.file));
    }
    let made = definitions(&mut tx).await;
    tx.rollback().await.unwrap();
    let differ = differences(&held, &made);
    assert!(
        differ.is_empty(),
        "the database differs from the files of migrations/functions:\n{}",
        differ.join("\n")
    );
}

#[tokio::test]
async fn a_file_the_database_does_not_hold_is_applied_by_the_next_migrate_alone() {
    let (_url, pool) = fresh_database().await;
    assert!(db::migrations_current(&pool).await.unwrap());
    let recorded = |name: &'static str| {
        let pool = pool.clone();
        async move {
            sqlx::query_as::<_, (Vec<u8>, chrono::DateTime<chrono::Utc>)>(
                "select checksum, applied_at from ledger_function_sources where name = $1",
            )
            .bind(name)
            .fetch_one(&pool)
            .await
            .unwrap()
        }
    };
    let comment = || async {
        sqlx::query_scalar::<_, Option<String>>(
            "select obj_description('ledger_state_terminal(text)'::regprocedure, 'pg_proc')",
        )
        .fetch_one(&pool)
        .await
        .unwrap()
    };
    let want = comment().await;
    let (sum, _) = recorded("ledger_state_terminal").await;
    let (_, other_applied) = recorded("ledger_transition_allowed").await;

    // The database holds an older text of one file (as after a release
    // whose file differs): another comment, another checksum.
    sqlx::raw_sql(
        "comment on function ledger_state_terminal(text) is 'an older text';
         update ledger_function_sources set checksum = '\\x00' where name = 'ledger_state_terminal'",
    )
    .execute(&pool)
    .await
    .unwrap();
    assert!(
        !db::migrations_current(&pool).await.unwrap(),
        "a database holding another text of a file is not current (readyz says so)"
    );

    db::migrate(&pool).await.unwrap();
    assert_eq!(comment().await, want, "the file's text is applied again");
    assert_eq!(recorded("ledger_state_terminal").await.0, sum);
    assert!(db::migrations_current(&pool).await.unwrap());
    // The others were not applied again.
    assert_eq!(recorded("ledger_transition_allowed").await.1, other_applied);
}
