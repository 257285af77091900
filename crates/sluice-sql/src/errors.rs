//! Turning parser and DataFusion errors into Sluice errors with SQLSTATEs.

use datafusion::error::DataFusionError;
use sluice_types::{Error, SqlCode};
use sqlparser::parser::ParserError;

/// A sqlparser error: `42601`, or `54001` when the statement nests
/// (parentheses, subqueries, prefix operators) deeper than sqlparser's
/// recursion limit (50 levels).
pub fn parser_error(e: ParserError) -> Error {
    let message = match e {
        ParserError::TokenizerError(m) | ParserError::ParserError(m) => m,
        ParserError::RecursionLimitExceeded => {
            return Error::too_complex(
                "statement too complex: parentheses, subqueries or prefix operators nested more than 50 levels deep",
            );
        }
    };
    Error::syntax(format!("syntax error: {message}"))
}

/// A Sluice error as a DataFusion error, for code DataFusion calls (a
/// catalog function, say): [`plan_error`] gives it back unchanged, SQLSTATE
/// included, however DataFusion wrapped it on the way (an optimizer's
/// context, an Arrow error around a failed batch, a shared error).
pub fn carry(e: Error) -> DataFusionError {
    DataFusionError::External(Box::new(e))
}

/// The Sluice error [`carry`] put somewhere in `e`'s chain of sources.
fn carried(e: &DataFusionError) -> Option<&Error> {
    let mut next: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(current) = next {
        if let Some(found) = current.downcast_ref::<Error>() {
            return Some(found);
        }
        next = current.source();
    }
    None
}

/// A DataFusion planning error, classified by what it says.
pub fn plan_error(e: DataFusionError) -> Error {
    if let Some(sluice) = carried(&e) {
        return sluice.clone();
    }
    match e {
        DataFusionError::SQL(p, _) => parser_error(*p),
        DataFusionError::SchemaError(s, _) => {
            let text = s.to_string();
            if text.contains("not found") || text.contains("No field named") {
                Error::user(SqlCode::UndefinedColumn, column_message(&text))
            } else {
                Error::user(SqlCode::Syntax, text)
            }
        }
        DataFusionError::NotImplemented(m) => Error::unsupported(format!("not supported: {m}")),
        DataFusionError::Plan(m) => classify_plan_message(m),
        DataFusionError::ArrowError(a, _) => Error::from(*a),
        DataFusionError::Execution(m) => Error::user(SqlCode::DataException, m),
        DataFusionError::Context(c, inner) => match plan_error(*inner) {
            Error::User { code, message } => Error::user(code, format!("{c}: {message}")),
            other => other,
        },
        DataFusionError::Diagnostic(_, inner) => plan_error(*inner),
        other => Error::internal(other.to_string()),
    }
}

fn column_message(text: &str) -> String {
    // DataFusion: "Schema error: No field named foo. Valid fields are …"
    text.trim_start_matches("Schema error: ")
        .replace("No field named", "column does not exist:")
}

fn classify_plan_message(m: String) -> Error {
    let lower = m.to_ascii_lowercase();
    if lower.contains("table") && lower.contains("not found") {
        Error::user(SqlCode::UndefinedTable, m)
    } else if lower.contains("invalid function") || lower.contains("function") && lower.contains("not found") {
        Error::user(SqlCode::UndefinedFunction, m)
    } else if lower.contains("cannot") && (lower.contains("type") || lower.contains("coerc") || lower.contains("cast"))
        || lower.contains("type")
    {
        Error::user(SqlCode::DatatypeMismatch, m)
    } else {
        Error::user(SqlCode::Syntax, m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn a_carried_error_keeps_its_sqlstate_and_message_through_datafusion_wrappers() {
        let original = || Error::user(SqlCode::UndefinedObject, "role \"nobody\" does not exist");
        let wrapped = [
            carry(original()),
            carry(original()).context("Optimizer rule 'simplify_expressions' failed"),
            DataFusionError::ArrowError(
                Box::new(arrow::error::ArrowError::ExternalError(Box::new(carry(original())))),
                None,
            ),
            DataFusionError::Shared(Arc::new(carry(original()))),
            DataFusionError::Collection(vec![carry(original()), DataFusionError::Execution("later".into())]),
        ];
        for e in wrapped {
            let shown = format!("{e:?}");
            let back = plan_error(e);
            assert_eq!(back.sqlstate(), "42704", "{shown}");
            assert_eq!(back.to_string(), "role \"nobody\" does not exist", "{shown}");
        }
        // Anything else is classified as before.
        assert_eq!(plan_error(DataFusionError::Execution("x".into())).sqlstate(), "22000");
        let foreign = DataFusionError::External(Box::new(std::io::Error::other("disk")));
        assert_eq!(plan_error(foreign).sqlstate(), "XX000");
    }
}
