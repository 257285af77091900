//! Identifier normalisation, as Postgres does it.

use sqlparser::ast::{Ident, ObjectName};

/// A name: unquoted parts are lower-cased, as Postgres does.
pub fn normalize_ident(ident: &Ident) -> String {
    if ident.quote_style.is_some() {
        ident.value.clone()
    } else {
        ident.value.to_lowercase()
    }
}

/// The (single-part, or last-part) normalized name of an object name.
pub fn normalize_name(name: &ObjectName) -> String {
    name.0
        .last()
        .and_then(|part| part.as_ident())
        .map(normalize_ident)
        .unwrap_or_else(|| name.to_string())
}
