//! `sqlx::migrate!` embeds `migrations/` when the crate compiles; without
//! this, adding or editing a migration would leave a built binary that does
//! not know it. The functions' and views' current texts
//! (`migrations/functions/*.sql`) are embedded the same way, listed here
//! (`db::functions`).

use std::fmt::Write as _;
use std::path::Path;

fn main() {
    println!("cargo:rerun-if-changed=migrations");
    // Read at run time: `env!` would bake in the directory this script was
    // compiled in, and a target directory shared with another checkout of
    // the same source reuses the compiled script.
    let manifest = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let dir = Path::new(&manifest).join("migrations/functions");
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .expect("migrations/functions is readable")
        .map(|entry| entry.expect("a directory entry").file_name())
        .map(|name| name.into_string().expect("file names are UTF-8"))
        .filter(|name| name.ends_with(".sql"))
        .collect();
    files.sort();
    let mut out = String::from("&[\n");
    for name in &files {
        let path = dir.join(name);
        writeln!(out, "    ({name:?}, include_str!({:?})),", path.display())
            .expect("writing to a String");
    }
    out.push(']');
    let target =
        Path::new(&std::env::var("OUT_DIR").expect("cargo sets OUT_DIR")).join("functions.rs");
    std::fs::write(target, out).expect("OUT_DIR is writable");
}
