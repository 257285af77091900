//! How big and how deep one statement may be.
//!
//! Parsing, binding, optimising, unparsing and evaluating an expression all
//! recurse over its tree, one stack frame (or several) per level. An
//! unbounded tree on a bounded stack is a stack overflow, and a stack
//! overflow aborts the whole process: every session and every pipeline with
//! it. So every statement is held to these limits before anything recurses
//! over it without protection, and every thread that handles statements or
//! runs tasks has a stack sized for them ([`WORKER_STACK_BYTES`]).
//!
//! The limits are chosen so that what BI tools and ORMs generate still
//! runs: a 50 000-item `IN` list (~350 KB), a 3 000-term `AND` or `OR`
//! (long `AND`/`OR` chains are regrouped into balanced trees before they
//! are measured, as Postgres flattens them, so any length within the byte
//! limit runs), a 2 000-branch `CASE`, 1 000-term arithmetic.

/// Bytes of SQL text in one query string (`54000` above it). Postgres
/// accepts up to 1 GB; a statement this long is generated, and 1 MiB holds a
/// 100 000-item `IN` list.
pub const STATEMENT_BYTES_MAX: usize = 1 << 20;

/// Nesting depth of a statement's expressions and queries (`54001` above
/// it): each operator, function call, `CASE`, subquery and set operation
/// (`UNION`, …) between the root and the deepest leaf counts one.
/// `1 + 1 + … + 1` with 1 000 terms is 1 000 deep; with 10 000 it is
/// refused. (`AND`/`OR` chains count as balanced trees: 30 000 terms are 15
/// deep.) Why not more: DataFusion's type coercion and simplification take
/// time quadratic in an expression's depth (`get_type` of every node walks
/// its subtree): compiling `k + k + …` 1 000 deep took 7 s in a debug
/// build, 2 000 deep 70 s.
pub const EXPRESSION_DEPTH_MAX: usize = 1_024;

/// Nodes of a query's bound logical plan (`54001` above it): scans, joins,
/// projections, filters, aggregates, unions, … A query that needs more is
/// better split into derived streams.
pub const PLAN_NODES_MAX: usize = 1_000;

/// Stack of every thread that handles statements or runs tasks. Compiling
/// an expression 2 000 deep (twice [`EXPRESSION_DEPTH_MAX`]) fits in 4 MiB
/// in a debug build; DataFusion's and sqlparser's own recursion grows the
/// stack on demand besides (their `recursive` protection). Threads touch
/// only what they use: the rest is address space.
pub const WORKER_STACK_BYTES: usize = 16 << 20;

/// Stack that must be left when a recursive pass of DataFusion's (the
/// optimizer's rules, tree-node walks, expression simplification: the
/// `recursive` crate's protection) takes one more step; with less, the
/// step runs on a new stack of [`RECURSION_STACK_GROWTH_BYTES`]. The
/// crate's default of 128 KiB is less than one step of some passes takes
/// in a debug build: DataFusion's SQL planner and unparser keep 256 KiB
/// of their own for that reason, and one level of the unparser is a
/// 134 KB frame there. An overflow aborts the process, so the margin is
/// generous: 1 MiB is several such steps and the leaf work under the last.
pub const RECURSION_RED_ZONE_BYTES: usize = 1 << 20;

/// Size of each stack DataFusion's recursion protection grows
/// ([`RECURSION_RED_ZONE_BYTES`]): address space, only the pages used are
/// touched.
pub const RECURSION_STACK_GROWTH_BYTES: usize = WORKER_STACK_BYTES;

/// sqlparser's recursion limit when expression text from a plan is parsed
/// again (the runtime compiles expressions from SQL text, written with a
/// pair of parentheses per operator): room for [`EXPRESSION_DEPTH_MAX`]
/// levels, each of which may recurse a few times. sqlparser's default of
/// 50 refused any stored expression more than ~50 levels deep.
pub const EXPRESSION_PARSE_RECURSION_MAX: usize = 4 * EXPRESSION_DEPTH_MAX;
