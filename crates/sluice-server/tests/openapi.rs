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
