//! `timestamp-micros`: microseconds since the Unix epoch, UTC.

use std::fmt;

use chrono::{DateTime, SecondsFormat, Utc};
use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// An Avro `timestamp-micros`: microseconds since 1970-01-01T00:00:00Z.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(pub i64);

impl Timestamp {
    /// Microseconds since the epoch.
    pub fn micros(self) -> i64 {
        self.0
    }

    /// The instant as a chrono date, `None` outside chrono's range.
    pub fn to_datetime(self) -> Option<DateTime<Utc>> {
        DateTime::from_timestamp_micros(self.0)
    }

    /// The instant of a chrono date.
    pub fn from_datetime(datetime: DateTime<Utc>) -> Timestamp {
        Timestamp(datetime.timestamp_micros())
    }

    /// Parses RFC 3339 (`2026-11-01T00:00:00Z`).
    pub fn parse_rfc3339(text: &str) -> Result<Timestamp, chrono::ParseError> {
        let datetime = DateTime::parse_from_rfc3339(text)?;
        Ok(Timestamp::from_datetime(datetime.with_timezone(&Utc)))
    }

    /// The wall clock.
    pub fn now() -> Timestamp {
        Timestamp::from_datetime(Utc::now())
    }
}

impl fmt::Display for Timestamp {
    /// RFC 3339 with the microseconds when there are any; the raw number outside chrono's range.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.to_datetime() {
            Some(datetime) => f.write_str(&datetime.to_rfc3339_opts(SecondsFormat::AutoSi, true)),
            None => write!(f, "{}us", self.0),
        }
    }
}

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self.to_datetime() {
            Some(_) => serializer.serialize_str(&self.to_string()),
            None => serializer.serialize_i64(self.0),
        }
    }
}

impl<'de> Deserialize<'de> for Timestamp {
    /// Accepts an RFC 3339 string or an integer number of microseconds.
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Timestamp, D::Error> {
        struct TimestampVisitor;
        impl Visitor<'_> for TimestampVisitor {
            type Value = Timestamp;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an RFC 3339 timestamp string or microseconds since the epoch")
            }
            fn visit_i64<E: de::Error>(self, micros: i64) -> Result<Timestamp, E> {
                Ok(Timestamp(micros))
            }
            fn visit_u64<E: de::Error>(self, micros: u64) -> Result<Timestamp, E> {
                i64::try_from(micros)
                    .map(Timestamp)
                    .map_err(|_| E::custom(format!("timestamp {micros} is beyond the range of timestamp-micros")))
            }
            fn visit_str<E: de::Error>(self, text: &str) -> Result<Timestamp, E> {
                Timestamp::parse_rfc3339(text).map_err(|e| E::custom(format!("timestamp {text:?}: {e}")))
            }
        }
        deserializer.deserialize_any(TimestampVisitor)
    }
}
