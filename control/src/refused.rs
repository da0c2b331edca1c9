//! Why a change is refused (contract §7): a refused change records nothing, and says which rule it broke.

use schemas::{Invalid, Timestamp};

/// A change that would be invalid, and nothing was written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Refused {
    /// A field breaks a rule of the contract (§3, §9.2): a bad name, a negative limit, an amount below 1, ...
    #[error("{0}")]
    Invalid(#[from] Invalid),
    /// The version is not above the last one recorded for the policy.
    #[error("version {version} of policy {policy_id} is not above the last recorded, {last}")]
    VersionNotAbove {
        /// The policy.
        policy_id: String,
        /// The version asked for.
        version: i32,
        /// The last recorded version.
        last: i32,
    },
    /// The last version recorded is the greatest an `int` holds: no version can follow it.
    #[error(
        "policy {policy_id} is at version {}, the last an Avro int holds: give the change another policy id",
        i32::MAX
    )]
    VersionsExhausted {
        /// The policy.
        policy_id: String,
    },
    /// The change would reach into a closed period, whose bill never changes (contract §9.5).
    #[error("{field} {value} is before {closed_until}, the end of closed period {period}: a closed bill never changes")]
    BeforeClose {
        /// `effective_from` or `valid_from`.
        field: &'static str,
        /// Its value.
        value: Timestamp,
        /// The last closed period.
        period: String,
        /// Its end.
        closed_until: Timestamp,
    },
    /// A usage correction that cannot apply to the event it names (contract §7, `usage void|amend`).
    #[error("{0}")]
    Correction(#[from] rules::correction::Refusal),
    /// A plan assigned that no policy is recorded of.
    #[error("plan {plan:?} has no policy recorded: set one first with `plan set --plan {plan} ...`")]
    UnknownPlan {
        /// The plan's name.
        plan: String,
    },
    /// A grant of that id is recorded already: grants are never changed, another one is added.
    #[error("grant {grant_id} of {tenant} is recorded already: a grant never changes, add another")]
    GrantExists {
        /// The grant.
        grant_id: String,
        /// Its tenant.
        tenant: String,
    },
}
