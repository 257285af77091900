//! Between the runtime's types and the control plane's messages
//! (`proto/sluice/v1/control.proto`): a part's events, task metrics.
//! Pure conversions; a message that does not convert is a protocol error
//! naming what was wrong.

use sluice_dataflow::checkpoint::coordinator::CoordinatorEvent;
use sluice_dataflow::checkpoint::manifest::TaskEntry;
use sluice_dataflow::deploy::Failure;
use sluice_dataflow::metrics::TaskMetrics;
use sluice_dataflow::part::PartEvent;
use sluice_proto::v1 as pb;
use sluice_types::{Error, OperatorId, PipelineId, Result, SqlCode};
use std::sync::atomic::Ordering;

/// One deployment of a pipeline: the master's epoch tells a deployment
/// from the one before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DeploymentKey {
    pub pipeline: PipelineId,
    pub epoch: u64,
}

/// A part's event as the worker sends it.
pub fn event_to_wire(key: DeploymentKey, event: &PartEvent) -> Result<pb::worker_event::Event> {
    use pb::worker_event::Event;
    let report = |outcome| {
        Event::Report(pb::DeploymentReport {
            pipeline: key.pipeline.0,
            epoch: key.epoch,
            outcome: Some(outcome),
        })
    };
    let ack = |checkpoint_id, (operator, instance): (OperatorId, u32), entry_json: Vec<u8>, finished| {
        Event::CheckpointAck(pb::CheckpointAck {
            pipeline: key.pipeline.0,
            epoch: key.epoch,
            checkpoint_id,
            operator: operator.0,
            instance,
            entry_json: entry_json.into(),
            finished,
        })
    };
    Ok(match event {
        PartEvent::Failed {
            operator,
            instance,
            failure,
            after_cancel,
        } => report(pb::deployment_report::Outcome::Failed(pb::TaskFailed {
            operator: operator.0,
            instance: *instance,
            error: failure.error.clone(),
            sqlstate: failure.code.map(|c| c.sqlstate().to_string()).unwrap_or_default(),
            consequence: failure.consequence,
            after_cancel: *after_cancel,
        })),
        PartEvent::Exited => report(pb::deployment_report::Outcome::Exited(pb::AllExited {})),
        PartEvent::Checkpoint(CoordinatorEvent::Stored {
            checkpoint_id,
            operator,
            instance,
            entry,
        }) => ack(
            *checkpoint_id,
            (*operator, *instance),
            serde_json::to_vec(entry).map_err(|e| Error::internal(format!("task entry: {e}")))?,
            false,
        ),
        PartEvent::Checkpoint(CoordinatorEvent::Finished { operator, instance }) => {
            ack(0, (*operator, *instance), Vec::new(), true)
        }
        PartEvent::Checkpoint(CoordinatorEvent::WriteFailed { checkpoint_id, error }) => {
            Event::CheckpointFailed(pb::CheckpointFailed {
                pipeline: key.pipeline.0,
                epoch: key.epoch,
                checkpoint_id: *checkpoint_id,
                error: error.clone(),
            })
        }
    })
}

/// A worker's report or acknowledgement as the owner's event, with the
/// deployment it is about; `None` for events that are not about a
/// deployment.
pub fn event_from_wire(event: &pb::worker_event::Event) -> Result<Option<(DeploymentKey, PartEvent)>> {
    use pb::worker_event::Event;
    let key = |pipeline, epoch| DeploymentKey {
        pipeline: PipelineId(pipeline),
        epoch,
    };
    Ok(Some(match event {
        Event::Report(r) => {
            let event = match &r.outcome {
                Some(pb::deployment_report::Outcome::Failed(f)) => PartEvent::Failed {
                    operator: OperatorId(f.operator),
                    instance: f.instance,
                    failure: Failure {
                        error: f.error.clone(),
                        code: SqlCode::from_sqlstate(&f.sqlstate),
                        consequence: f.consequence,
                    },
                    after_cancel: f.after_cancel,
                },
                Some(pb::deployment_report::Outcome::Exited(_)) => PartEvent::Exited,
                None => return Err(Error::internal("a deployment report without an outcome")),
            };
            (key(r.pipeline, r.epoch), event)
        }
        Event::CheckpointAck(a) => {
            let event = if a.finished {
                CoordinatorEvent::Finished {
                    operator: OperatorId(a.operator),
                    instance: a.instance,
                }
            } else {
                let entry: TaskEntry = serde_json::from_slice(&a.entry_json)
                    .map_err(|e| Error::internal(format!("a checkpoint acknowledgement's task entry: {e}")))?;
                CoordinatorEvent::Stored {
                    checkpoint_id: a.checkpoint_id,
                    operator: OperatorId(a.operator),
                    instance: a.instance,
                    entry,
                }
            };
            (key(a.pipeline, a.epoch), PartEvent::Checkpoint(event))
        }
        Event::CheckpointFailed(f) => (
            key(f.pipeline, f.epoch),
            PartEvent::Checkpoint(CoordinatorEvent::WriteFailed {
                checkpoint_id: f.checkpoint_id,
                error: f.error.clone(),
            }),
        ),
        _ => return Ok(None),
    }))
}

/// Instances' watermarks of a split alignment group for the master.
pub fn watermarks_to_wire(
    key: DeploymentKey,
    operator: OperatorId,
    instances: &[(u32, Option<i64>)],
) -> pb::SourceWatermarks {
    pb::SourceWatermarks {
        pipeline: key.pipeline.0,
        epoch: key.epoch,
        operator: operator.0,
        instances: instances
            .iter()
            .map(|&(instance, w)| pb::InstanceWatermark {
                instance,
                counting: w.is_some(),
                watermark_ms: w.unwrap_or(0),
            })
            .collect(),
    }
}

/// The instances' watermarks a relayed report carries.
pub fn watermarks_from_wire(w: &pb::SourceWatermarks) -> impl Iterator<Item = (u32, Option<i64>)> + '_ {
    w.instances
        .iter()
        .map(|i| (i.instance, i.counting.then_some(i.watermark_ms)))
}

/// A task instance's counters for a heartbeat.
pub fn metrics_to_wire(key: DeploymentKey, m: &TaskMetrics) -> pb::TaskMetrics {
    let get = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
    pb::TaskMetrics {
        pipeline: key.pipeline.0,
        epoch: key.epoch,
        operator: m.operator.0,
        instance: m.instance,
        rows_in: get(&m.rows_in),
        rows_out: get(&m.rows_out),
        late_rows: get(&m.late_rows_dropped),
        malformed_rows: get(&m.records_malformed),
        queued_rows: get(&m.queued_rows),
        backpressure_us: get(&m.backpressure_us),
        busy_us: get(&m.busy_us),
        poll_max_us: get(&m.poll_max_us),
        alignment_held_us: get(&m.alignment_held_us),
        watermark_ms: m.watermark_ms.load(Ordering::Relaxed),
        state_groups: get(&m.state_groups),
        condition: m.condition().unwrap_or_default(),
        checkpoint_alignment_us: get(&m.checkpoint_alignment_us),
        last_checkpoint_alignment_us: get(&m.last_checkpoint_alignment_us),
        state_bytes: get(&m.state_bytes),
    }
}

/// Copies a heartbeat's counters into the master's mirror of the task.
pub fn apply_metrics(m: &TaskMetrics, w: &pb::TaskMetrics) {
    let set = |a: &std::sync::atomic::AtomicU64, v| a.store(v, Ordering::Relaxed);
    set(&m.rows_in, w.rows_in);
    set(&m.rows_out, w.rows_out);
    set(&m.late_rows_dropped, w.late_rows);
    set(&m.records_malformed, w.malformed_rows);
    set(&m.queued_rows, w.queued_rows);
    set(&m.backpressure_us, w.backpressure_us);
    set(&m.busy_us, w.busy_us);
    set(&m.poll_max_us, w.poll_max_us);
    set(&m.alignment_held_us, w.alignment_held_us);
    set(&m.checkpoint_alignment_us, w.checkpoint_alignment_us);
    set(&m.last_checkpoint_alignment_us, w.last_checkpoint_alignment_us);
    set(&m.state_bytes, w.state_bytes);
    m.watermark_ms.store(w.watermark_ms, Ordering::Relaxed);
    set(&m.state_groups, w.state_groups);
    m.set_condition(Some(w.condition.clone()).filter(|c| !c.is_empty()));
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_types::OperatorUid;

    fn round_trip(event: PartEvent) -> PartEvent {
        let key = DeploymentKey {
            pipeline: PipelineId(7),
            epoch: 3,
        };
        let wire = event_to_wire(key, &event).unwrap();
        let (k, back) = event_from_wire(&wire).unwrap().unwrap();
        assert_eq!(k, key);
        back
    }

    #[test]
    fn part_events_survive_the_wire() {
        let events = [
            PartEvent::Failed {
                operator: OperatorId(2),
                instance: 1,
                failure: Failure {
                    error: "division by zero".into(),
                    code: Some(SqlCode::DivisionByZero),
                    consequence: false,
                },
                after_cancel: true,
            },
            PartEvent::Failed {
                operator: OperatorId(0),
                instance: 0,
                failure: Failure::message("broker gone".into()),
                after_cancel: false,
            },
            PartEvent::Exited,
            PartEvent::Checkpoint(CoordinatorEvent::Stored {
                checkpoint_id: 9,
                operator: OperatorId(1),
                instance: 3,
                entry: TaskEntry {
                    operator: None,
                    uid: OperatorUid(0xfeed),
                    instance: 3,
                    parallelism: Some(4),
                    key_groups: Some(sluice_plan::key_group_range(3, 4, 256)),
                    file: "task-x-3.state".into(),
                    bytes: 123,
                    crc32: 456,
                    references: vec![sluice_dataflow::checkpoint::manifest::FileRef {
                        checkpoint: 7,
                        bytes: 99,
                        crc32: 1,
                    }],
                },
            }),
            PartEvent::Checkpoint(CoordinatorEvent::Finished {
                operator: OperatorId(4),
                instance: 0,
            }),
            PartEvent::Checkpoint(CoordinatorEvent::WriteFailed {
                checkpoint_id: 2,
                error: "disk full".into(),
            }),
        ];
        for e in events {
            assert_eq!(round_trip(e.clone()), e);
        }
    }

    #[test]
    fn metrics_survive_the_wire() {
        let m = TaskMetrics::new(OperatorId(3), 1, "window");
        m.rows_in.store(10, Ordering::Relaxed);
        m.rows_out.store(4, Ordering::Relaxed);
        m.watermark_ms.store(-5, Ordering::Relaxed);
        m.set_condition(Some("broker down".into()));
        let key = DeploymentKey {
            pipeline: PipelineId(1),
            epoch: 1,
        };
        let mirror = TaskMetrics::new(OperatorId(3), 1, "window");
        apply_metrics(&mirror, &metrics_to_wire(key, &m));
        assert_eq!(mirror.rows_in.load(Ordering::Relaxed), 10);
        assert_eq!(mirror.rows_out.load(Ordering::Relaxed), 4);
        assert_eq!(mirror.watermark_ms.load(Ordering::Relaxed), -5);
        assert_eq!(mirror.condition().as_deref(), Some("broker down"));
    }
}
