//! Database-snapshot series: a SQLite database changed by a workload between copies.
//!
//! Version 0 is a table of `rows` rows; each later version updates a fraction of the rows,
//! inserts new ones and deletes some, in one transaction, and the database file is copied as
//! the next version (the way a database file is backed up between runs). The SQL is
//! generated here, deterministically from the seed, and run by the `sqlite3` command-line
//! shell. Choice: the shell rather than a linked SQLite (rusqlite with a bundled C build), to
//! keep the build of every test binary free of a C compile; the shell is a Debian package
//! (`scripts/install-peers.sh`).

use crate::error::{EvalError, IoContext, Result};
use crate::rng::Rng;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The parameters of a database series.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct SqliteParams {
    /// Seed of every random choice.
    pub seed: u64,
    /// Versions (database copies).
    pub versions: usize,
    /// Rows of version 0.
    pub rows: usize,
    /// Fraction of rows updated per version.
    pub update: f64,
    /// Rows inserted per version, as a fraction of the rows.
    pub insert: f64,
    /// Fraction of rows deleted per version.
    pub delete: f64,
}

impl SqliteParams {
    /// 10 versions of a 200 000-row table (about 40 MB), 3 % updated, 1 % inserted,
    /// 0.5 % deleted per version.
    pub fn standard(seed: u64) -> Self {
        SqliteParams {
            seed,
            versions: 10,
            rows: 200_000,
            update: 0.03,
            insert: 0.01,
            delete: 0.005,
        }
    }

    /// A name that identifies the series (a directory name in the data cache).
    pub fn dir_name(&self) -> String {
        format!(
            "sqlite-s{}-v{}-r{}-u{}-i{}-d{}",
            self.seed, self.versions, self.rows, self.update, self.insert, self.delete
        )
    }
}

fn words(rng: &mut Rng, n: u64) -> String {
    const W: &[&str] = &[
        "alpha", "beta", "gamma", "delta", "order", "paid", "open", "closed", "north", "south",
        "widget", "gadget", "spare", "blue", "red", "green", "large", "small", "priority",
    ];
    (0..n)
        .map(|_| W[rng.below(W.len() as u64) as usize])
        .collect::<Vec<_>>()
        .join(" ")
}

fn row_values(rng: &mut Rng, id: u64) -> String {
    let name = words(rng, 2);
    let n = rng.range(4, 20);
    let note = words(rng, n);
    format!(
        "({id},'{name} {id}',{},{}.{:02},'{note}')",
        rng.below(1000),
        rng.below(10_000),
        rng.below(100)
    )
}

fn run_sql(db: &Path, sql: &str) -> Result<()> {
    let mut child = Command::new("sqlite3")
        .arg(db)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| EvalError::Tool {
            tool: "sqlite3".into(),
            reason: format!("cannot start it ({e}); install it with scripts/install-peers.sh"),
        })?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(sql.as_bytes())
            .ctx(|| "writing SQL to sqlite3".into())?;
    }
    let out = child
        .wait_with_output()
        .ctx(|| "waiting for sqlite3".into())?;
    if !out.status.success() || !out.stderr.is_empty() {
        return Err(EvalError::Tool {
            tool: "sqlite3".into(),
            reason: format!("{}: {}", out.status, String::from_utf8_lossy(&out.stderr)),
        });
    }
    Ok(())
}

/// Writes the versions as `DIR/v000.db`, `DIR/v001.db`, ...; returns their paths.
///
/// # Errors
/// `sqlite3` is missing or fails, or a file cannot be written.
pub fn generate(dir: &Path, p: &SqliteParams) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).ctx(|| format!("creating {}", dir.display()))?;
    let db = dir.join("work.db");
    let _ = std::fs::remove_file(&db);
    let mut rng = Rng::new(p.seed);
    let mut live: Vec<u64> = Vec::new();
    let mut next_id = 1u64;
    let mut paths = Vec::new();
    for v in 0..p.versions {
        let mut sql = String::from("PRAGMA journal_mode=DELETE;\nBEGIN;\n");
        if v == 0 {
            sql.push_str(
                "CREATE TABLE items(id INTEGER PRIMARY KEY, name TEXT, qty INTEGER, \
                 price REAL, note TEXT);\nCREATE INDEX items_name ON items(name);\n",
            );
            insert_rows(&mut sql, &mut rng, &mut live, &mut next_id, p.rows);
        } else {
            let n = live.len();
            for _ in 0..(n as f64 * p.update) as usize {
                let id = live[rng.below(live.len() as u64) as usize];
                let n = rng.range(4, 20);
                let note = words(&mut rng, n);
                sql.push_str(&format!(
                    "UPDATE items SET qty={}, note='{note}' WHERE id={id};\n",
                    rng.below(1000)
                ));
            }
            for _ in 0..(n as f64 * p.delete) as usize {
                if live.len() > 1 {
                    let i = rng.below(live.len() as u64) as usize;
                    let id = live.swap_remove(i);
                    sql.push_str(&format!("DELETE FROM items WHERE id={id};\n"));
                }
            }
            insert_rows(
                &mut sql,
                &mut rng,
                &mut live,
                &mut next_id,
                (n as f64 * p.insert) as usize,
            );
        }
        sql.push_str("COMMIT;\n");
        run_sql(&db, &sql)?;
        let path = dir.join(format!("v{v:03}.db"));
        std::fs::copy(&db, &path).ctx(|| format!("copying {}", db.display()))?;
        paths.push(path);
    }
    std::fs::remove_file(&db).ctx(|| format!("removing {}", db.display()))?;
    Ok(paths)
}

fn insert_rows(sql: &mut String, rng: &mut Rng, live: &mut Vec<u64>, next_id: &mut u64, n: usize) {
    for batch in 0..n.div_ceil(500) {
        let count = (n - batch * 500).min(500);
        sql.push_str("INSERT INTO items VALUES ");
        for k in 0..count {
            if k > 0 {
                sql.push(',');
            }
            sql.push_str(&row_values(rng, *next_id));
            live.push(*next_id);
            *next_id += 1;
        }
        sql.push_str(";\n");
    }
}
