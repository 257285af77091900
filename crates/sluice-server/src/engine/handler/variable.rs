//! `SET name = value`, `SET TIME ZONE`, `SET NAMES`, `SHOW name`,
//! `SHOW ALL`: the session's settings.

use super::command;
use crate::engine::Output;
use crate::engine::settings::Settings;
use crate::engine::show::{self, Table};
use sluice_types::{Error, Result};
use sqlparser::ast::{Set, Value};

/// `SET …`.
pub fn set(settings: &mut Settings, set: Set) -> Result<Output> {
    match set {
        Set::SingleAssignment { variable, values, .. } => {
            let name = variable.to_string().to_ascii_lowercase();
            let value = values.iter().map(setting_value).collect::<Vec<_>>().join(", ");
            settings.set(&name, &value)?;
        }
        Set::SetTimeZone { value, .. } => settings.set("timezone", &setting_value(&value))?,
        Set::SetNames { charset_name, .. } => settings.set("client_encoding", &charset_name.to_string())?,
        other => return Err(Error::unsupported(format!("{other} is not supported"))),
    }
    Ok(command("SET"))
}

/// `SHOW name`.
pub fn show(settings: &Settings, name: &str) -> Result<Output> {
    let value = settings.get(name)?;
    Table::text(&[name], vec![vec![value]]).output("SHOW")
}

/// `SHOW ALL`.
pub fn show_all(settings: &Settings) -> Result<Output> {
    let rows = settings.all().into_iter().map(|(n, v, d)| vec![n, v, d]).collect();
    Table::text(&["name", "setting", "description"], rows).output("SHOW")
}

/// The columns of `SHOW name` / `SHOW ALL` (`None`: `SHOW ALL`).
pub fn schema(name: Option<&str>) -> arrow::datatypes::SchemaRef {
    show::schema_of(name.unwrap_or("show_all"))
}

fn setting_value(e: &sqlparser::ast::Expr) -> String {
    match e {
        sqlparser::ast::Expr::Value(v) => match &v.value {
            Value::SingleQuotedString(s) | Value::DoubleQuotedString(s) => s.clone(),
            other => other.to_string(),
        },
        sqlparser::ast::Expr::Identifier(i) => i.value.clone(),
        other => other.to_string(),
    }
}
