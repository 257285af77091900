//! Person rows (Nexmark's `PersonGenerator`).

use std::sync::Arc;

use arrow::array::{ArrayRef, Int64Builder, StringBuilder, TimestampMillisecondBuilder};
use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;

use super::ids::{FIRST_PERSON_ID, last_base0_person_id};
use super::random::EventRng;
use super::rows::{EventContext, TableRows};
use super::strings::{FillerColumn, push_four_digits, push_string};

/// Few states and cities, so that queries grouping by them find results.
const US_STATES: [&str; 6] = ["AZ", "CA", "ID", "OR", "WA", "WY"];
const US_CITIES: [&str; 10] = [
    "Phoenix",
    "Los Angeles",
    "San Francisco",
    "Boise",
    "Portland",
    "Bend",
    "Redmond",
    "Seattle",
    "Kent",
    "Cheyenne",
];
const FIRST_NAMES: [&str; 11] = [
    "Peter", "Paul", "Luke", "John", "Saul", "Vicky", "Kate", "Julie", "Sarah", "Deiter", "Walter",
];
const LAST_NAMES: [&str; 9] = [
    "Shultz", "Abrams", "Spencer", "White", "Bartels", "Walton", "Smith", "Jones", "Noris",
];

/// The `extra` column's number in the schema (its generation can be skipped).
pub(super) const PERSON_EXTRA: usize = 7;

/// Average size of a person event in bytes; `extra` pads up to it.
const PERSON_SIZE_AVERAGE: usize = 200;

/// The columns of a person batch under construction.
pub(super) struct PersonRows {
    id: Int64Builder,
    name: StringBuilder,
    email_address: StringBuilder,
    credit_card: StringBuilder,
    city: StringBuilder,
    state: StringBuilder,
    date_time: TimestampMillisecondBuilder,
    extra: FillerColumn,
}

impl TableRows for PersonRows {
    fn with_capacity(rows: usize, context: &EventContext) -> Self {
        PersonRows {
            id: Int64Builder::with_capacity(rows),
            name: StringBuilder::with_capacity(rows, rows * 12),
            email_address: StringBuilder::with_capacity(rows, rows * 16),
            credit_card: StringBuilder::with_capacity(rows, rows * 19),
            city: StringBuilder::with_capacity(rows, rows * 8),
            state: StringBuilder::with_capacity(rows, rows * 2),
            date_time: TimestampMillisecondBuilder::with_capacity(rows),
            extra: FillerColumn::with_capacity(rows, if context.reads(PERSON_EXTRA) { rows * 150 } else { 0 }),
        }
    }

    fn append(&mut self, n: u64, context: &mut EventContext) {
        let mut rng = EventRng::for_event(context.seed, n);
        let scratch = &mut context.scratch;
        self.id.append_value((last_base0_person_id(n) + FIRST_PERSON_ID) as i64);

        scratch.clear();
        scratch.push_str(FIRST_NAMES[rng.index(FIRST_NAMES.len())]);
        scratch.push(' ');
        scratch.push_str(LAST_NAMES[rng.index(LAST_NAMES.len())]);
        self.name.append_value(scratch.as_str());
        let mut size = 8 + scratch.len();

        scratch.clear();
        push_string(&mut rng, 7, ' ', scratch);
        scratch.push('@');
        push_string(&mut rng, 5, ' ', scratch);
        scratch.push_str(".com");
        self.email_address.append_value(scratch.as_str());
        size += scratch.len();

        scratch.clear();
        for group in 0..4 {
            if group > 0 {
                scratch.push(' ');
            }
            push_four_digits(rng.below(10_000), scratch);
        }
        self.credit_card.append_value(scratch.as_str());
        size += scratch.len();

        let city = US_CITIES[rng.index(US_CITIES.len())];
        let state = US_STATES[rng.index(US_STATES.len())];
        self.city.append_value(city);
        self.state.append_value(state);
        size += city.len() + state.len();

        self.date_time.append_value(context.clock.time_ms(n));
        self.extra.append(
            context.reads(PERSON_EXTRA).then_some(&mut rng),
            size,
            PERSON_SIZE_AVERAGE,
        );
    }

    fn finish(mut self, schema: SchemaRef) -> RecordBatch {
        let columns: Vec<ArrayRef> = vec![
            Arc::new(self.id.finish()),
            Arc::new(self.name.finish()),
            Arc::new(self.email_address.finish()),
            Arc::new(self.credit_card.finish()),
            Arc::new(self.city.finish()),
            Arc::new(self.state.finish()),
            Arc::new(self.date_time.finish()),
            Arc::new(self.extra.finish()),
        ];
        RecordBatch::try_new(schema, columns).expect("person columns match the person schema")
    }
}
