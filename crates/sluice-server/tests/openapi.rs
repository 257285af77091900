//! The OpenAPI document the server serves (`/api/v1/openapi.json`) checked
//! against the Rust types it describes, so the two cannot drift: a kind of
//! operator added to the plan fails here until the document lists it.

/// `components.schemas.<schema>.properties.<property>.enum` of the document.
fn enum_of(schema: &str, property: &str) -> Vec<String> {
    let spec: serde_json::Value =
        serde_json::from_str(include_str!("../src/openapi.json")).expect("openapi.json is JSON");
    spec["components"]["schemas"][schema]["properties"][property]["enum"]
        .as_array()
        .unwrap_or_else(|| panic!("{schema}.{property} has an enum"))
        .iter()
        .map(|v| v.as_str().expect("enum values are strings").to_string())
        .collect()
}

#[test]
fn operator_kinds_are_the_plans_operator_kinds() {
    assert_eq!(
        enum_of("Operator", "kind"),
        sluice_plan::OperatorKind::NAMES,
        "openapi.json's Operator.kind must list sluice_plan::OperatorKind::NAMES, in order"
    );
}

#[test]
fn a_version_diffs_kinds_changes_and_state_fates_are_the_plans() {
    use sluice_plan::diff::{Change, StateFate};
    assert_eq!(enum_of("DiffLine", "kind"), sluice_plan::OperatorKind::NAMES);
    // Every variant, in declaration order; the matches fail to compile when
    // one is added, so this list (and then the document) must follow.
    let changes = [Change::Kept, Change::Replaced, Change::Added, Change::Removed];
    for c in changes {
        match c {
            Change::Kept | Change::Replaced | Change::Added | Change::Removed => {}
        }
    }
    let fates = [
        StateFate::None,
        StateFate::Kept,
        StateFate::Moved,
        StateFate::Reset,
        StateFate::Fresh,
        StateFate::Dropped,
    ];
    for f in fates {
        match f {
            StateFate::None
            | StateFate::Kept
            | StateFate::Moved
            | StateFate::Reset
            | StateFate::Fresh
            | StateFate::Dropped => {}
        }
    }
    assert_eq!(
        enum_of("DiffLine", "change"),
        changes.map(Change::name),
        "openapi.json's DiffLine.change must list every sluice_plan::diff::Change, in order"
    );
    assert_eq!(
        enum_of("DiffLine", "state"),
        fates.map(StateFate::name),
        "openapi.json's DiffLine.state must list every sluice_plan::diff::StateFate, in order"
    );
}
