//! Bounded fuzzing of what the SQL node reads from clients: SQL text
//! (parser, binder and planner) and the binary protocol (handshake
//! response, COM_STMT_EXECUTE parameters, packet framing). Every input must
//! give a result or a clear error, never a panic.
//!
//! Deterministic by seed; `LATSDB_FUZZ_ITERATIONS` runs longer.

use latsdb_sql::conn::{decode_execute, parse_handshake_response};
use latsdb_sql::error::SqlResult;
use latsdb_sql::parse::parse;
use latsdb_sql::plan::{plan_select, Catalog, SourceKind, VirtualTable};
use latsdb_types::rng::Rng;
use latsdb_types::schema::{ColumnDef, ColumnType, IntWidth};
use latsdb_types::Value;
use std::sync::Arc;

fn iterations(default: usize) -> usize {
    std::env::var("LATSDB_FUZZ_ITERATIONS").ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// Every table is an in-memory one with the same columns.
struct FakeCatalog;
impl Catalog for FakeCatalog {
    async fn resolve(&self, _db: Option<&str>, name: &str) -> SqlResult<(String, SourceKind)> {
        let columns = vec![
            ColumnDef::new("id", ColumnType::int(IntWidth::Int)).not_null(),
            ColumnDef::new("k", ColumnType::int(IntWidth::Int)),
            ColumnDef::new("c", ColumnType::Char(20)),
            ColumnDef::new("d", ColumnType::Decimal { precision: 10, scale: 2 }),
        ];
        let rows = vec![vec![Value::Int(1), Value::Int(2), Value::Str("x".into()), Value::Null]];
        let _ = name;
        Ok(("db".into(), SourceKind::Virtual(Arc::new(VirtualTable { columns, rows }))))
    }
}

const SEEDS: &[&str] = &[
    "SELECT c FROM sbtest1 WHERE id = ?",
    "SELECT DISTINCT c FROM sbtest1 WHERE id BETWEEN ? AND ? ORDER BY c",
    "SELECT SUM(k) FROM t WHERE id BETWEEN 1 AND 10",
    "SELECT a.c, COUNT(*) FROM t a LEFT JOIN u b ON a.id = b.id GROUP BY a.c HAVING COUNT(*) > 1 ORDER BY 2 DESC LIMIT 3, 4",
    "UPDATE sbtest1 SET k = k + 1 WHERE id = ?",
    "INSERT INTO t (id, k, c) VALUES (1, 2, 'x'), (?, ?, ?) ON DUPLICATE KEY UPDATE k = VALUES(k) + 1",
    "DELETE FROM t WHERE k IN (1, 2, NULL) ORDER BY id LIMIT 5",
    "SELECT CASE WHEN k > 1 THEN 'a' ELSE NULL END, CAST(c AS SIGNED), IFNULL(d, 0) / 3 FROM t WHERE c LIKE 'a%' OR NOT k <=> NULL FOR UPDATE",
    "SELECT * FROM t WHERE id = 1 LOCK IN SHARE MODE",
    "CREATE TABLE t (id INT NOT NULL AUTO_INCREMENT, c CHAR(10) DEFAULT '' NOT NULL, PRIMARY KEY (id), KEY k (c))",
    "SET @@session.autocommit = OFF, sql_mode = 'ANSI'; SELECT @@version_comment LIMIT 1",
];

const TOKENS: &[&str] = &[
    "SELECT",
    "FROM",
    "WHERE",
    "AND",
    "OR",
    "NOT",
    "IN",
    "BETWEEN",
    "LIKE",
    "IS",
    "NULL",
    "GROUP BY",
    "ORDER BY",
    "HAVING",
    "LIMIT",
    "OFFSET",
    "JOIN",
    "LEFT JOIN",
    "ON",
    "INSERT INTO",
    "VALUES",
    "UPDATE",
    "SET",
    "DELETE",
    "(",
    ")",
    ",",
    "*",
    "+",
    "-",
    "/",
    "=",
    "<",
    ">",
    "<=",
    ">=",
    "<>",
    "<=>",
    "?",
    "'str'",
    "0",
    "1",
    "-1",
    "1.5",
    "1e308",
    "99999999999999999999999",
    "t",
    "u",
    "id",
    "k",
    "c",
    "d",
    "t.id",
    "COUNT(*)",
    "SUM(k)",
    "AVG(d)",
    "MIN(",
    "MAX(",
    "CONCAT(",
    "DISTINCT",
    "AS",
    "@@version",
    "@x",
    "CASE",
    "WHEN",
    "THEN",
    "ELSE",
    "END",
    ";",
    "FOR UPDATE",
    "X'4142'",
    "DIV",
    "MOD",
    "NOW()",
];

#[test]
fn sql_text_never_panics_the_parser_binder_or_planner() {
    let runtime = tokio::runtime::Builder::new_current_thread().build().expect("runtime");
    let mut rng = Rng::new(0x9e37_79b9_7f4a_7c15);
    let mut planned = 0;
    for i in 0..iterations(200_000) {
        let sql = if i % 2 == 0 {
            let n = 1 + rng.index(25);
            (0..n).map(|_| *rng.pick(TOKENS)).collect::<Vec<_>>().join(" ")
        } else {
            // Mutate a valid statement: cut, splice or flip a byte.
            let mut bytes = rng.pick(SEEDS).as_bytes().to_vec();
            for _ in 0..1 + rng.index(3) {
                let at = rng.index(bytes.len() + 1);
                match rng.index(3) {
                    0 => bytes.truncate(at),
                    1 => {
                        let tok = rng.pick(TOKENS).as_bytes();
                        bytes.splice(at..at, tok.iter().copied());
                    }
                    _ => {
                        if at < bytes.len() {
                            bytes[at] = (rng.next_u64() & 0x7f) as u8;
                        }
                    }
                }
            }
            String::from_utf8_lossy(&bytes).into_owned()
        };
        let Ok(parsed) = parse(&sql) else { continue };
        for stmt in &parsed.statements {
            if let sqlparser::ast::Statement::Query(q) = stmt {
                if runtime.block_on(plan_select(&FakeCatalog, q)).is_ok() {
                    planned += 1;
                }
            }
        }
    }
    assert!(planned > 100, "the generator should produce plannable queries too (got {planned})");
}

#[test]
fn protocol_bytes_never_panic_the_decoders() {
    let mut rng = Rng::new(0x2545_f491_4f6c_dd1d);
    // A well-formed handshake response and execute body to mutate.
    let mut handshake = Vec::new();
    handshake.extend_from_slice(&(0x00ff_f7ffu32 | (1 << 21)).to_le_bytes());
    handshake.extend_from_slice(&(1u32 << 24).to_le_bytes());
    handshake.push(45);
    handshake.extend_from_slice(&[0; 23]);
    handshake.extend_from_slice(b"root\0");
    handshake.push(20);
    handshake.extend_from_slice(&[7; 20]);
    handshake.extend_from_slice(b"db\0mysql_native_password\0");
    assert!(parse_handshake_response(&handshake).is_some(), "the seed handshake is valid");
    let mut execute = vec![1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1];
    for ty in [8u16, 253, 12, 246] {
        execute.extend_from_slice(&ty.to_le_bytes());
    }
    execute.extend_from_slice(&42u64.to_le_bytes());
    execute.extend_from_slice(&[3, b'a', b'b', b'c']);
    execute.extend_from_slice(&[4, 0xea, 0x07, 1, 2]);
    execute.extend_from_slice(&[3, b'1', b'.', b'5']);
    let mut types = Vec::new();
    assert!(decode_execute(&execute, 4, &mut types).is_ok(), "the seed execute body is valid");
    for _ in 0..iterations(300_000) {
        for (seed, which) in [(&handshake, 0), (&execute, 1)] {
            let mut b = seed.clone();
            for _ in 0..1 + rng.index(4) {
                let at = rng.index(b.len() + 1);
                match rng.index(4) {
                    0 => b.truncate(at),
                    1 => b.insert(at, rng.next_u64() as u8),
                    2 if at < b.len() => b[at] = rng.next_u64() as u8,
                    _ => b.extend((0..rng.index(8)).map(|_| rng.next_u64() as u8)),
                }
            }
            if which == 0 {
                let _ = parse_handshake_response(&b);
            } else {
                let mut types = if rng.index(2) == 0 { vec![8, 253, 12, 246] } else { Vec::new() };
                let _ = decode_execute(&b, rng.index(6), &mut types);
            }
        }
        // Pure noise too.
        let noise: Vec<u8> = (0..rng.index(64)).map(|_| rng.next_u64() as u8).collect();
        let _ = parse_handshake_response(&noise);
        let _ = decode_execute(&noise, rng.index(300), &mut Vec::new());
    }
}
