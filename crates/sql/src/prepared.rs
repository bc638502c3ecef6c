//! MySQL's SQL-level prepared statements: `PREPARE name FROM text`,
//! `EXECUTE name [USING @var, ...]` and `DEALLOCATE PREPARE name` (or
//! `DROP PREPARE name`). They belong to the session, as in MySQL, and share
//! the plan cache of protocol-level prepared statements (COM_STMT_*): a
//! statement is planned at its first EXECUTE and planned again only when
//! one of its tables changes.

use crate::error::{SqlError, SqlResult, ER_UNKNOWN_STMT_HANDLER, ER_WRONG_ARGUMENTS};
use crate::session::{CachedPlan, Response, Session};
use latsdb_types::Value;
use sqlparser::ast::{self, Statement};

/// A statement PREPARE made.
pub struct SqlPrepared {
    statement: Statement,
    params: usize,
    plan: CachedPlan,
}

/// The session's prepared statements by name (names compare ignoring case,
/// as in MySQL).
pub type SqlPreparedStatements = std::collections::HashMap<String, SqlPrepared>;

/// MySQL refuses more prepared statements than `max_prepared_stmt_count`
/// (16,382 by default) with 1461; a session here may hold this many.
const MAX_PER_SESSION: usize = 16_382;

impl Session {
    /// `PREPARE name FROM text`; the parser hands the text over as the one
    /// expression of a SELECT (a string literal or a user variable).
    pub(crate) fn prepare_sql(&mut self, name: &ast::Ident, text: &Statement) -> SqlResult<Response> {
        // A PREPARE that fails still drops the statement of its name, as in MySQL.
        let key = name.value.to_lowercase();
        self.sql_prepared.remove(&key);
        let expr = match text {
            Statement::Query(q) => match q.body.as_ref() {
                ast::SetExpr::Select(s) if s.projection.len() == 1 && s.from.is_empty() => match &s.projection[0] {
                    ast::SelectItem::UnnamedExpr(e) => e,
                    _ => return Err(not_text()),
                },
                _ => return Err(not_text()),
            },
            _ => return Err(not_text()),
        };
        let sql = match self.constant(expr)? {
            Value::Str(s) => s,
            Value::Bytes(b) => {
                String::from_utf8(b).map_err(|_| SqlError::parse("the statement text of PREPARE is not UTF-8"))?
            }
            Value::Null => {
                return Err(SqlError::parse("PREPARE ... FROM a variable that is NULL: set it to the statement's text"))
            }
            other => crate::eval::to_text(&other),
        };
        let parsed = crate::parse::parse(&sql)?;
        let statement = match <[Statement; 1]>::try_from(parsed.statements) {
            Ok([statement]) => statement,
            Err(_) => {
                return Err(SqlError::new(
                    crate::error::ER_PARSE,
                    "42000",
                    "PREPARE takes exactly one statement (no ';' between several)",
                ))
            }
        };
        if matches!(statement, Statement::Prepare { .. } | Statement::Execute { .. } | Statement::Deallocate { .. }) {
            return Err(SqlError::new(
                crate::error::ER_UNSUPPORTED_PS,
                "HY000",
                "This command is not supported in the prepared statement protocol yet",
            ));
        }
        if self.sql_prepared.len() >= MAX_PER_SESSION {
            return Err(SqlError::new(
                1461,
                "42000",
                format!("Can't create more than max_prepared_stmt_count statements (current value: {MAX_PER_SESSION}); DEALLOCATE PREPARE ones no longer used"),
            ));
        }
        self.sql_prepared.insert(key, SqlPrepared { statement, params: parsed.params, plan: CachedPlan::default() });
        debug_assert!(self.sql_prepared.len() <= MAX_PER_SESSION);
        Ok(Response::Ok { affected: 0, last_insert_id: 0, info: "Statement prepared".into() })
    }

    /// `EXECUTE name [USING @a, @b, ...]`: the values of the variables bind
    /// the statement's `?` in order.
    pub(crate) async fn execute_sql(
        &mut self,
        name: &ast::ObjectName,
        using: &[ast::ExprWithAlias],
    ) -> SqlResult<Response> {
        let key = match name.0.as_slice() {
            [part] => part.as_ident().map(|i| i.value.to_lowercase()).unwrap_or_default(),
            _ => return Err(unknown(&name.to_string(), "EXECUTE")),
        };
        let Some(mut prepared) = self.sql_prepared.remove(&key) else {
            return Err(unknown(&key, "EXECUTE"));
        };
        let params: SqlResult<Vec<Value>> = using.iter().map(|u| self.constant(&u.expr)).collect();
        let result = match params {
            Ok(params) if params.len() == prepared.params => {
                Box::pin(self.execute(&prepared.statement, &params, Some(&mut prepared.plan))).await
            }
            Ok(_) => Err(SqlError::new(ER_WRONG_ARGUMENTS, "HY000", "Incorrect arguments to EXECUTE")),
            Err(e) => Err(e),
        };
        self.sql_prepared.insert(key, prepared);
        result
    }

    /// `DEALLOCATE PREPARE name`.
    pub(crate) fn deallocate_sql(&mut self, name: &ast::Ident) -> SqlResult<Response> {
        let key = name.value.to_lowercase();
        match self.sql_prepared.remove(&key) {
            Some(_) => Ok(Response::ok()),
            None => Err(unknown(&key, "DEALLOCATE PREPARE")),
        }
    }
}

fn not_text() -> SqlError {
    SqlError::parse("PREPARE name FROM takes the statement as a string or a user variable (@var)")
}

fn unknown(name: &str, to: &str) -> SqlError {
    SqlError::new(
        ER_UNKNOWN_STMT_HANDLER,
        "HY000",
        format!("Unknown prepared statement handler ({name}) given to {to}"),
    )
}
