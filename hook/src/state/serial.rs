//! How the state's fields of other crates' types are written in a snapshot ([`crate::snapshot`]): the events' own
//! serde is their JSON (RFC 3339 instants, fields left out when empty, a flattened header), which a compact binary
//! format cannot read back, so instants are written as microseconds, a `Who` as its four fields in order, a time
//! zone as its IANA name, and policies and grants as their JSON (few, and read back as the events they are).

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use rules::policy::PolicyIndex;
use rules::reservation::Facts;
use schemas::{GrantEvent, PolicyEvent, ReservationAction, Timestamp, Tz, Who};

/// An instant as microseconds.
pub(super) mod micros {
    use super::*;

    pub(crate) fn serialize<S: Serializer>(at: &Timestamp, s: S) -> Result<S::Ok, S::Error> {
        at.micros().serialize(s)
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Timestamp, D::Error> {
        i64::deserialize(d).map(Timestamp)
    }
}

/// An optional instant as microseconds.
pub(super) mod micros_option {
    use super::*;

    pub(crate) fn serialize<S: Serializer>(at: &Option<Timestamp>, s: S) -> Result<S::Ok, S::Error> {
        at.map(Timestamp::micros).serialize(s)
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Timestamp>, D::Error> {
        Option::<i64>::deserialize(d).map(|at| at.map(Timestamp))
    }
}

/// A `Who` as (tenant, subject, project, api_key).
pub(super) mod who {
    use super::*;

    type Fields = (String, Option<String>, Option<String>, Option<String>);

    pub(crate) fn serialize<S: Serializer>(who: &Who, s: S) -> Result<S::Ok, S::Error> {
        (&who.tenant, &who.subject, &who.project, &who.api_key).serialize(s)
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Who, D::Error> {
        let (tenant, subject, project, api_key) = Fields::deserialize(d)?;
        Ok(Who { tenant, subject, project, api_key })
    }
}

/// Time zones by their IANA names.
pub(super) mod zones {
    use super::*;

    pub(crate) fn serialize<S: Serializer>(zones: &[Tz], s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(zones.iter().map(|zone| zone.name()))
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Tz>, D::Error> {
        let names = Vec::<String>::deserialize(d)?;
        names
            .iter()
            .map(|name| name.parse::<Tz>().map_err(|_| D::Error::custom(format!("time zone {name:?}"))))
            .collect()
    }
}

/// Every policy version and plan assignment folded, as their JSON, each in the order folded.
pub(super) mod policies {
    use super::*;

    pub(crate) fn serialize<S: Serializer>(index: &PolicyIndex, s: S) -> Result<S::Ok, S::Error> {
        let policies: Result<Vec<String>, _> = index.policies().iter().map(serde_json::to_string).collect();
        let assignments: Result<Vec<String>, _> = index.assignments().iter().map(serde_json::to_string).collect();
        let error = serde::ser::Error::custom;
        (policies.map_err(error)?, assignments.map_err(error)?).serialize(s)
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<PolicyIndex, D::Error> {
        let (policies, assignments) = <(Vec<String>, Vec<String>)>::deserialize(d)?;
        let policies: Result<Vec<PolicyEvent>, _> = policies.iter().map(|text| serde_json::from_str(text)).collect();
        let assignments: Result<Vec<schemas::PlanAssignmentEvent>, _> =
            assignments.iter().map(|text| serde_json::from_str(text)).collect();
        let assignments = assignments.map_err(D::Error::custom)?;
        Ok(PolicyIndex::new(policies.map_err(D::Error::custom)?).with_assignments(&assignments))
    }
}

/// Every grant folded, by (tenant, metric), as their JSON.
pub(super) mod grants {
    use std::collections::HashMap;

    use super::*;

    type Grants = HashMap<(String, String), Vec<GrantEvent>>;

    pub(crate) fn serialize<S: Serializer>(grants: &Grants, s: S) -> Result<S::Ok, S::Error> {
        let texts: Result<Vec<String>, _> = grants.values().flatten().map(serde_json::to_string).collect();
        texts.map_err(serde::ser::Error::custom)?.serialize(s)
    }

    /// Grouped again in the order written, which is each group's order folded.
    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Grants, D::Error> {
        let mut grants = Grants::new();
        for text in Vec::<String>::deserialize(d)? {
            let grant: GrantEvent = serde_json::from_str(&text).map_err(D::Error::custom)?;
            grants.entry((grant.header.tenant.clone(), grant.header.metric.clone())).or_default().push(grant);
        }
        Ok(grants)
    }
}

/// What judging a reservation event reads.
#[derive(Serialize, Deserialize)]
#[serde(remote = "Facts")]
pub(super) struct FactsDef {
    action: ReservationAction,
    #[serde(with = "micros")]
    occurred_at: Timestamp,
    amount: i64,
    #[serde(with = "micros_option")]
    expires_at: Option<Timestamp>,
    fencing_token: Option<i64>,
}

/// Gauge levels by (tenant, metric): (instant in microseconds, level).
pub(super) mod levels {
    use std::collections::HashMap;

    use super::*;

    type Levels = HashMap<(String, String), (Timestamp, i64)>;

    pub(crate) fn serialize<S: Serializer>(levels: &Levels, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(levels.iter().map(|(key, (at, level))| (key, at.micros(), level)))
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Levels, D::Error> {
        let entries = Vec::<((String, String), i64, i64)>::deserialize(d)?;
        Ok(entries.into_iter().map(|(key, at, level)| (key, (Timestamp(at), level))).collect())
    }
}
