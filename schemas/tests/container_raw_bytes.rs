// Proves that a container file's record has the same raw bytes on every read, its attributes in key order, so that
// the digest `ingest --file` keeps of what it appended matches a rerun's (otherwise a rerun after a full disk would
// read the whole file again, and count each record appended before as a duplicate).

use std::collections::BTreeMap;

use apache_avro::{Codec, Writer};
use schemas::{Catalog, Event, Header, Timestamp, UsageEvent};

fn usage_with_attributes(i: u64) -> Event {
    Event::Usage(UsageEvent {
        header: Header {
            event_id: format!("u-{i}"),
            occurred_at: Timestamp(1_793_491_200_000_000),
            tenant: "org-1".into(),
            subject: None,
            metric: "requests".into(),
            source: "test".into(),
            api_key: None,
            project: None,
        },
        quantity: 1,
        request_id: None,
        // Twelve keys: two reads in hash order agree about once in 12! times.
        attributes: (0..12).map(|k| (format!("key-{k:02}"), format!("value-{i}-{k}"))).collect::<BTreeMap<_, _>>(),
    })
}

fn container(events: &[Event]) -> Vec<u8> {
    let catalog = Catalog::builtin();
    let schema = &catalog.current(schemas::EventType::UsageEvent).schema;
    let mut writer =
        Writer::builder().schema(schema).writer(Vec::new()).codec(Codec::Null).build().expect("a container writer");
    for event in events {
        writer.append_value_ref(&schemas::avro::to_value(event)).expect("a UsageEvent value");
    }
    writer.into_inner().expect("the container is written")
}

fn raw_bytes(file: &[u8]) -> Vec<Vec<u8>> {
    Catalog::builtin().read_container(file).expect("a container file").map(|record| record.raw).collect()
}

#[test]
fn a_container_records_raw_bytes_are_the_same_on_every_read_and_hold_its_attributes_in_key_order() {
    let events: Vec<Event> = (0..4).map(usage_with_attributes).collect();
    let file = container(&events);
    let first = raw_bytes(&file);
    for _ in 0..3 {
        let again = raw_bytes(&file);
        let differing = again.iter().zip(&first).filter(|(a, b)| a != b).count();
        assert_eq!(differing, 0, "another read gave {differing} of {} records other raw bytes", first.len());
    }
    // Under the current writer schema the raw bytes are the single-object encoding, which sorts attributes.
    let catalog = Catalog::builtin();
    let expected: Vec<Vec<u8>> = events.iter().map(|e| catalog.encode_single_object(e)).collect();
    assert!(first == expected, "the raw bytes are not the single-object encoding with sorted attributes");
}
