//! Event ids built from parts (a tenant, a metric, a policy or grant id, a version): the one way every writer of
//! quota-ledger joins them, so that two different sets of parts never give one id.
//!
//! Tenants, metrics and ids may hold `/`, the separator, so joining them as they are would let one tenant's admin
//! record the event id another tenant's change is derived to (tenant `iso`'s grant `b/credit-7` and tenant `iso/b`'s
//! grant `credit-7` both `grant/iso/b/credit-7`), and deduplication by event_id forever (contract §4.3) would then
//! refuse the other tenant's change. Each part is percent-escaped first (`%` as `%25`, `/` as `%2F`), so a part
//! never holds the separator and the id splits back into its parts in one way only. A part without `/` or `%` is
//! left as it is: every id derived before the escape from such parts is derived exactly as before, so the ids
//! recorded in existing ledgers are found and deduplicated as they were.
//!
//! ```
//! assert_eq!(schemas::ids::join(&["grant", "org-42", "credit-7"]), "grant/org-42/credit-7");
//! assert_eq!(schemas::ids::join(&["grant", "iso", "b/credit-7"]), "grant/iso/b%2Fcredit-7");
//! assert_eq!(schemas::ids::join(&["grant", "iso/b", "credit-7"]), "grant/iso%2Fb/credit-7");
//! ```

/// What joins the parts of an id.
pub const SEPARATOR: char = '/';

/// The id of `parts`, in order: each part percent-escaped (`%` as `%25`, `/` as `%2F`), joined by `/`. Two different
/// lists of parts give two different ids; parts without `/` or `%` give `parts.join("/")`.
///
/// Every id has a part at least (its kind, `grant` or `policy`): no parts and one empty part would both be the empty
/// id.
pub fn join(parts: &[&str]) -> String {
    assert!(!parts.is_empty(), "an id is built from one part at least");
    let mut id = String::with_capacity(parts.iter().map(|part| part.len() + 1).sum());
    for (i, part) in parts.iter().enumerate() {
        if i > 0 {
            id.push(SEPARATOR);
        }
        push_escaped(&mut id, part);
    }
    id
}

/// `part` with `%` and `/` percent-escaped: `%` first of all, so that an escape in the part itself (`%2F`) is kept
/// apart from the escape of a `/`.
fn push_escaped(id: &mut String, part: &str) {
    for c in part.chars() {
        match c {
            '%' => id.push_str("%25"),
            SEPARATOR => id.push_str("%2F"),
            c => id.push(c),
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::join;

    /// Parts drawn from the characters that could make two lists collide: the separator, the escape character and
    /// what its escapes are spelled with.
    fn parts() -> impl Strategy<Value = Vec<String>> {
        prop::collection::vec("[/%25Fa]{0,6}", 1..5)
    }

    fn id_of(parts: &[String]) -> String {
        join(&parts.iter().map(String::as_str).collect::<Vec<_>>())
    }

    proptest! {
        // Proves two different lists of parts never give one id, whatever `/` and `%` they hold: neither two lists
        // drawn apart nor the list an id joined as it is would be read back as (its `/`s taken as separators, the
        // way one tenant's part takes another's place), nor two neighbours merged around a `/`.
        #[test]
        fn distinct_parts_give_distinct_ids(a in parts(), b in parts()) {
            let resplit: Vec<String> = a.join("/").split('/').map(String::from).collect();
            let mut merged = a.clone();
            if merged.len() > 1 {
                let second = merged.remove(1);
                merged[0] = format!("{}/{second}", merged[0]);
            }
            for other in [b, resplit, merged] {
                if other != a {
                    prop_assert_ne!(id_of(&a), id_of(&other), "{:?} and {:?}", a, other);
                }
            }
        }

        // Proves an id splits back into exactly its parts: the escape is undone by reading `%25` and `%2F` back.
        #[test]
        fn an_id_splits_back_into_its_parts(a in parts()) {
            let back: Vec<String> = id_of(&a).split('/').map(|p| p.replace("%2F", "/").replace("%25", "%")).collect();
            prop_assert_eq!(back, a);
        }

        // Proves parts without `/` or `%` give the id they gave before the escape: the ids of existing ledgers.
        #[test]
        fn plain_parts_give_the_ids_recorded_before(parts in prop::collection::vec("[a-zA-Z0-9:*._ -]{0,12}", 1..6)) {
            prop_assert_eq!(id_of(&parts), parts.join("/"));
        }
    }

    // Proves the two ids of the attack differ, and a part that spells an escape itself is kept apart from one.
    #[test]
    fn a_tenant_with_a_slash_and_an_id_with_a_slash_are_two_ids() {
        assert_ne!(join(&["grant", "iso", "b/credit-7"]), join(&["grant", "iso/b", "credit-7"]));
        assert_ne!(join(&["grant", "iso", "b%2Fcredit-7"]), join(&["grant", "iso", "b/credit-7"]));
        assert_eq!(join(&["policy", "org-42", "requests", "org-42:requests:tenant:day", "v3"]), {
            "policy/org-42/requests/org-42:requests:tenant:day/v3"
        });
    }
}
