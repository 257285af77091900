//! `BEGIN`, `COMMIT`, `ROLLBACK` and Postgres' failed-transaction rule:
//! after an error inside a block only its end is accepted (25P02), and
//! `COMMIT` then rolls back. Statements are not transactional (a stream
//! created inside a block stays when it rolls back); the block exists for
//! clients that open one (JDBC with autocommit off, cursors).

use super::command;
use crate::engine::Output;
use sluice_sql::statement::SluiceStatement;
use sluice_types::{Error, Result, SqlCode};
use sqlparser::ast::Statement;

/// The session's transaction block.
#[derive(Debug, Default)]
pub struct Transaction {
    /// Inside BEGIN … COMMIT/ROLLBACK.
    in_block: bool,
    /// A statement failed inside the block: only its end is accepted.
    failed: bool,
}

/// Whether `statement` ends a block (`COMMIT` or `ROLLBACK`).
pub fn ends_block(statement: &SluiceStatement) -> bool {
    matches!(
        statement,
        SluiceStatement::Sql(s) if matches!(s.as_ref(), Statement::Commit { .. } | Statement::Rollback { .. })
    )
}

impl Transaction {
    pub fn in_block(&self) -> bool {
        self.in_block
    }

    /// `BEGIN` (a second `BEGIN` inside a block is accepted, as Postgres
    /// does with a warning).
    pub fn begin(&mut self) -> Output {
        self.in_block = true;
        command("BEGIN")
    }

    /// Ends the block (`COMMIT`, `ROLLBACK`, or the end a failed block is
    /// allowed).
    pub fn end(&mut self) {
        self.in_block = false;
        self.failed = false;
    }

    /// Before running `statement`: inside a failed block, `Some` answer
    /// instead of running it — 25P02, or `ROLLBACK` for its end (the
    /// caller then ends the block).
    pub fn refuse_in_failed_block(&self, statement: &SluiceStatement) -> Option<Result<Output>> {
        if !self.failed {
            return None;
        }
        if ends_block(statement) {
            return Some(Ok(command("ROLLBACK")));
        }
        Some(Err(Error::user(
            SqlCode::InFailedTransaction,
            "current transaction is aborted, commands ignored until end of transaction block",
        )))
    }

    /// A statement failed: inside a block, the block fails.
    pub fn statement_failed(&mut self) {
        if self.in_block {
            self.failed = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_sql::statement::parse_statements;

    fn statement(sql: &str) -> SluiceStatement {
        parse_statements(sql).unwrap().pop().unwrap()
    }

    #[test]
    fn a_failed_block_accepts_only_its_end_which_rolls_back() {
        let mut t = Transaction::default();
        t.statement_failed();
        assert!(
            t.refuse_in_failed_block(&statement("SELECT 1")).is_none(),
            "no block, no rule"
        );
        t.begin();
        assert!(t.refuse_in_failed_block(&statement("SELECT 1")).is_none());
        t.statement_failed();
        match t.refuse_in_failed_block(&statement("SELECT 1")) {
            Some(Err(refused)) => assert_eq!(refused.sqlstate(), SqlCode::InFailedTransaction.sqlstate()),
            _ => panic!("a failed block must refuse SELECT"),
        }
        match t.refuse_in_failed_block(&statement("COMMIT")) {
            Some(Ok(Output::Command { tag, .. })) => assert_eq!(tag, "ROLLBACK"),
            _ => panic!("COMMIT of a failed block must answer ROLLBACK"),
        }
        t.end();
        assert!(!t.in_block());
        assert!(t.refuse_in_failed_block(&statement("SELECT 1")).is_none());
    }
}
