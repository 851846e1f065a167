//! `sqlx::migrate!` embeds `migrations/` when the crate compiles; without
//! this, adding or editing a migration would leave a built binary that does
//! not know it.

fn main() {
    println!("cargo:rerun-if-changed=migrations");
}
