//! Interned names, and the window keys a run builds of them: the consumption stream keys windows by small integers
//! instead of owned strings. The plan and the judges of gauges, rolling windows and alerts share them.

use rustc_hash::FxHashMap;
use schemas::{AdjustmentKind, Scope, Timestamp};

use crate::concern::Concern;

/// Interned strings: the consumption stream keys windows by small integers instead of owned strings.
#[derive(Default)]
pub(crate) struct Interner {
    ids: FxHashMap<Box<str>, u32>,
    names: Vec<Box<str>>,
}

impl Interner {
    pub(crate) fn id(&mut self, name: &str) -> u32 {
        if let Some(id) = self.ids.get(name) {
            return *id;
        }
        let id = u32::try_from(self.names.len()).expect("fewer than 2^32 distinct names");
        self.ids.insert(name.into(), id);
        self.names.push(name.into());
        id
    }
    pub(crate) fn name(&self, id: u32) -> &str {
        &self.names[id as usize]
    }

    /// A window key's member by name: none for TENANT and for what names no member.
    pub(crate) fn member(&self, member: Option<u32>) -> Option<String> {
        member.filter(|m| *m != NAMES_NONE).map(|m| self.name(m).to_string())
    }
}

/// One window of a policy for a tenant (and a member of the policy's scope), by interned names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct WindowKey {
    pub(crate) tenant: u32,
    pub(crate) metric: u32,
    pub(crate) policy_id: u32,
    /// The policy's scope: members of different scopes share the interner (a subject and a project may have the same
    /// name, and so the same id), and policies of different scopes may share a policy_id.
    pub(crate) scope: Scope,
    /// None for TENANT scope; else the member's interned name, [`NAMES_NONE`] for what names no member.
    pub(crate) member: Option<u32>,
    pub(crate) start: i64,
    pub(crate) end: i64,
}

/// The member of a window of what names no member of its scope (contract §5: it counts as one more member). No
/// interned name has this id: the interner stops before 2^32 names.
pub(crate) const NAMES_NONE: u32 = u32::MAX;

impl WindowKey {
    /// The concern of this window's adjustments of `kind`.
    pub(crate) fn concern(&self, names: &Interner, kind: AdjustmentKind) -> Concern {
        Concern::Window {
            kind,
            policy_id: names.name(self.policy_id).to_string(),
            scope: self.scope,
            tenant: names.name(self.tenant).to_string(),
            member: names.member(self.member),
            metric: names.name(self.metric).to_string(),
            window_start: Timestamp(self.start),
            window_end: Timestamp(self.end),
        }
    }
}
