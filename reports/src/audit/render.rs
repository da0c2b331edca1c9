//! Audit answers in words a support engineer can paste to a customer.

use std::borrow::Cow;
use std::fmt::Write;

use crate::text::printable;

use super::tenant::{Timeline, UnknownTenant};
use super::why::{Unknown, Why};

/// Rows as a table whose columns are aligned, the header first, two spaces apart, indented. A cell's control
/// characters are shown escaped: a producer's newline or escape sequence never forges a row or a line.
pub fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let rows: Vec<Vec<Cow<'_, str>>> = rows.iter().map(|row| row.iter().map(|c| printable(c)).collect()).collect();
    let rows = &rows;
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| -> String {
        let cells: Vec<String> = cells.iter().zip(&widths).map(|(c, w)| format!("{c:<w$}")).collect();
        format!("  {}\n", cells.join("  ").trim_end())
    };
    let mut out = line(header.to_vec());
    for row in rows {
        out.push_str(&line(row.iter().map(AsRef::as_ref).collect()));
    }
    out
}

fn or_empty<T: ToString>(value: &Option<T>) -> String {
    value.as_ref().map_or(String::new(), T::to_string)
}

/// `text` in its [`printable`] form.
fn escaped(text: &str) -> String {
    printable(text).into_owned()
}

/// Sets `text` to its [`printable`] form.
fn escape(text: &mut String) {
    if let Cow::Owned(shown) = printable(text) {
        *text = shown;
    }
}

/// The strings `why` writes into its sentences, escaped (what it writes into tables, [`table`] escapes): ingest and
/// the hook refuse control characters in names and ids, but a policy id, a source or a reason may hold one, and
/// support pastes this answer to a customer.
fn printable_why(w: &Why) -> Why {
    let mut w = w.clone();
    escape(&mut w.request_id);
    let d = &mut w.decision;
    for text in [&mut d.event_id, &mut d.who.tenant, &mut d.metric, &mut d.source, &mut d.outcome, &mut d.reason] {
        escape(text);
    }
    let who = &mut d.who;
    for text in [&mut who.subject, &mut who.project, &mut who.api_key, &mut d.policy_id, &mut d.token_name]
        .into_iter()
        .flatten()
    {
        escape(text);
    }
    for m in &mut w.metrics {
        for text in [&mut m.metric, &mut m.outcome, &mut m.reason, &mut m.event_id] {
            escape(text);
        }
        m.policy_id.iter_mut().for_each(escape);
    }
    if let Some(p) = &mut w.policy {
        for text in [&mut p.policy_id, &mut p.owner, &mut p.scope, &mut p.window, &mut p.enforcement] {
            escape(text);
        }
        for text in [&mut p.actor, &mut p.change_reason].into_iter().flatten() {
            escape(text);
        }
        if let Some(plan) = &mut p.plan {
            for text in [&mut plan.name, &mut plan.actor, &mut plan.reason] {
                escape(text);
            }
        }
    }
    w
}

/// `audit why` in words.
pub fn why(w: &Why) -> String {
    let w = &printable_why(w);
    let d = &w.decision;
    let mut out = String::new();
    let named =
        |noun: &str, member: &Option<String>| member.as_deref().map_or(String::new(), |m| format!(", {noun} {m}"));
    let who = &d.who;
    let subject =
        [named("subject", &who.subject), named("project", &who.project), named("API key", &who.api_key)].concat();
    writeln!(out, "Request {} was {}: {}.", w.request_id, d.outcome, d.reason).unwrap();
    if let Some(words) = rolling_denial(w) {
        writeln!(out, "{words}").unwrap();
    } else if let Some(reason) = schemas::Reason::from_symbol(&d.reason) {
        writeln!(out, "{}", reason.in_words()).unwrap();
    }
    writeln!(
        out,
        "Decided at {} by {} for tenant {}{subject}, metric {}, asking for {}.",
        d.occurred_at, d.source, who.tenant, d.metric, d.amount
    )
    .unwrap();
    // Only for decisions that name their token (DecisionEvent v2, through `serve`): older ones read as before.
    if let Some(token_name) = &d.token_name {
        writeln!(out, "Asked with the serve token named {token_name}.").unwrap();
    }
    writeln!(
        out,
        "Decision event {} (ledger entry {}); answered at ledger watermark {}.",
        d.event_id, d.seq, w.watermark
    )
    .unwrap();
    if !w.metrics.is_empty() {
        metrics_paragraph(w, &mut out);
    } else if w.decisions_for_request > 1 {
        writeln!(out, "({} decisions are recorded for this request id; this is the latest.)", w.decisions_for_request)
            .unwrap();
    }
    out.push('\n');
    policy_paragraph(w, &mut out);
    meter_paragraph(w, &mut out);
    counter_paragraph(w, &mut out);
    consumption_paragraph(w, &mut out);
    retry_paragraph(w, &mut out);
    adjustments_paragraph(w, &mut out);
    if !w.corrections.is_empty() {
        writeln!(out, "Corrections of this request's usage: {}.", w.corrections.len()).unwrap();
        corrections_table(&w.corrections, &mut out);
    }
    out
}

/// Corrections of usage, a row each: when, which event, what it counted before and after, who and why.
fn corrections_table(corrections: &[super::CorrectionLine], out: &mut String) {
    let rows: Vec<Vec<String>> = corrections
        .iter()
        .map(|c| {
            vec![
                c.corrected_at.to_string(),
                c.original_event_id.clone(),
                c.original_occurred_at.to_string(),
                c.metric.clone(),
                c.action.clone(),
                format!("{} -> {}", c.quantity_before, c.quantity_after),
                c.actor.clone(),
                c.reason.clone(),
            ]
        })
        .collect();
    let header = ["corrected at", "usage event", "event at", "metric", "action", "counted", "actor", "reason"];
    out.push_str(&table(&header, &rows));
}

/// A request of several metrics: what it asked, that they were decided together, and which metric and policy denied.
fn metrics_paragraph(w: &Why, out: &mut String) {
    let d = &w.decision;
    let asked: Vec<String> = w.metrics.iter().map(|m| format!("{} {}", m.metric, m.amount)).collect();
    writeln!(
        out,
        "This request asked for several metrics at once ({}), decided together: allowed on all of them or on none.",
        asked.join(", ")
    )
    .unwrap();
    let others: Vec<String> = w
        .metrics
        .iter()
        .filter(|m| m.event_id != d.event_id)
        .map(|m| match (m.outcome.as_str(), m.reason.as_str()) {
            ("DENIED", "QUOTA_EXCEEDED" | "RATE_LIMITED" | "CONCURRENCY_LIMITED") => {
                format!("{} {} was over a limit too ({}, decision {})", m.metric, m.amount, m.reason, m.event_id)
            }
            ("DENIED", _) => format!("{} {} had room (decision {})", m.metric, m.amount, m.event_id),
            _ => format!("{} {} (decision {})", m.metric, m.amount, m.event_id),
        })
        .collect();
    if d.outcome == "DENIED" {
        let policy = d.policy_id.as_deref().map_or(String::new(), |p| format!(" under policy {p}"));
        writeln!(
            out,
            "It was denied on every metric because metric {} had no room{policy} ({}); nothing was consumed on any of \
             them. Of the other metrics, {}. The rest of this answer explains metric {}.",
            d.metric,
            d.reason,
            others.join(", "),
            d.metric
        )
        .unwrap();
    } else {
        writeln!(
            out,
            "It was allowed on every metric, and each was consumed. The other metrics: {}. The rest of this answer \
             explains metric {}.",
            others.join(", "),
            d.metric
        )
        .unwrap();
    }
}

fn policy_paragraph(w: &Why, out: &mut String) {
    let d = &w.decision;
    match (&w.policy, &d.policy_id) {
        (Some(p), _) => {
            let owner = match &p.plan {
                _ if p.owner == "*" => "the plan default (tenant *)".to_string(),
                Some(plan) if plan.actor.is_empty() => format!("plan {} v{}", plan.name, p.version),
                Some(plan) => format!(
                    "plan {} v{}, assigned {} by {}: \"{}\"",
                    plan.name,
                    p.version,
                    plan.assigned_from.to_string().get(..10).unwrap_or_default(),
                    plan.actor,
                    plan.reason
                ),
                None => format!("tenant {}'s own", p.owner),
            };
            // A ROLLING window has no calendar period: the interval of its length up to any instant.
            let per = match w.rolling_seconds() {
                Some(seconds) => format!("in any {} (a rolling window of {seconds} s)", length_in_words(seconds)),
                // A billing cycle is the tenant's own month: say where it starts, in the zone it is counted in.
                None => match p.cycle_anchor {
                    Some(anchor) => format!(
                        "per billing cycle (monthly from {anchor} in {})",
                        p.time_zone.as_deref().unwrap_or("UTC")
                    ),
                    None => format!("per {} window", p.window),
                },
            };
            let rule = match p.burst {
                None if w.by_gauge() => format!(
                    "a gauge quota: the tenant's level of {} (the latest it reported) at most {}; while it is above, {}",
                    p.gauge_metric.as_deref().unwrap_or(&d.metric),
                    p.limit,
                    violation_in_words(p.violation.as_deref())
                ),
                None if w.by_concurrency() => format!("at most {} leases of {} held at once", p.limit, d.metric),
                None => match p.overage() {
                    Some((rate, per)) => format!(
                        "at most {} {} per {} window, and beyond that a throttled overage of {rate} {} per {per} \
                         (a token bucket of {rate} that fills with time) instead of a refusal",
                        p.limit, d.metric, p.window, d.metric
                    ),
                    None => format!("at most {} {} {per}", p.limit, d.metric),
                },
                Some(burst) => format!(
                    "a throttle, a token bucket of {burst} {} refilled continuously at {} per {} window",
                    d.metric, p.limit, p.window
                ),
            };
            writeln!(
                out,
                "Policy: {} version {}, {owner}, {} scope{}: {rule}, {} enforcement (effective from {}).",
                p.policy_id,
                p.version,
                p.scope,
                counted_for(&p.scope, d),
                p.enforcement,
                p.effective_from
            )
            .unwrap();
            if let Some(actor) = &p.actor {
                let reason = p.change_reason.as_deref().map_or(String::new(), |r| format!(": {r}"));
                writeln!(out, "Set by {actor}{reason}.").unwrap();
            }
            if p.copies > 1 {
                writeln!(
                    out,
                    "(This version was published {} times; shown is ledger entry {}, the copy the hook, reconcile and \
                     billing apply: the latest effective_from, then the last recorded.)",
                    p.copies, p.seq
                )
                .unwrap();
            }
        }
        (None, Some(id)) => writeln!(
            out,
            "Policy: the decision names {id} version {}, which the ledger does not hold.",
            or_empty(&d.policy_version)
        )
        .unwrap(),
        (None, None) => writeln!(out, "Policy: the decision names none.").unwrap(),
    }
    if w.by_concurrency() {
        // No window: the decision's `window_end`, denied, is when the first lease held then expired.
        if let (false, Some(end)) = (d.outcome == "ALLOWED", d.window_end) {
            writeln!(out, "Leases: the first of those held then expired at {end}, freeing a slot.").unwrap();
        }
    } else if let (Some(start), Some(end)) = (d.window_start, d.window_end) {
        // A zone only when the policy names one: a UTC window reads as it always did.
        if w.by_gauge() {
            writeln!(out, "Window: {start} to {end} (reconcile reports a gauge's time over its limit per window).")
                .unwrap();
        } else if let Some(seconds) = w.rolling_seconds() {
            let length = length_in_words(seconds);
            writeln!(
                out,
                "Window: {start} to {end}, the {length} up to and including the decision (rolling: what happened \
                 before it had aged out)."
            )
            .unwrap();
        } else {
            match w.policy.as_ref().and_then(|p| p.time_zone.as_deref().map(|zone| (&p.window, zone))) {
                Some((window, zone)) => {
                    writeln!(out, "Window: {start} to {end}, a {window} of {zone}'s calendar.").unwrap()
                }
                None => writeln!(out, "Window: {start} to {end}.").unwrap(),
            }
        }
    }
    if w.by_throttle() {
        writeln!(out, "Grants: they raise quotas, not a throttle's bucket.").unwrap();
        writeln!(out, "Effective limit: {} (the bucket's capacity).", or_empty(&w.effective_limit)).unwrap();
    } else if w.policy.is_some() {
        if w.grants.is_empty() {
            writeln!(out, "Grants: none applied to this window.").unwrap();
        } else {
            let total: i64 = w.grants.iter().map(|g| g.amount).sum();
            writeln!(out, "Grants: {} applied to this window, adding {total}:", w.grants.len()).unwrap();
            let rows: Vec<Vec<String>> = w
                .grants
                .iter()
                .map(|g| {
                    vec![
                        g.grant_id.clone(),
                        g.amount.to_string(),
                        g.valid_from.to_string(),
                        g.valid_until.to_string(),
                        match &g.actor {
                            Some(actor) => format!("{} (by {actor})", g.reason),
                            None => g.reason.clone(),
                        },
                    ]
                })
                .collect();
            out.push_str(&table(&["grant", "amount", "valid from", "valid until", "reason"], &rows));
        }
        writeln!(out, "Effective limit: {}.", or_empty(&w.effective_limit)).unwrap();
    }
    out.push('\n');
}

/// Whose windows a policy of SUBJECT, PROJECT or API_KEY scope counted the decision in, in words: each member's
/// windows are apart (`, for project "p-1"`), those of what names none together; nothing for TENANT scope.
fn counted_for(scope: &str, d: &super::why::Decision) -> String {
    let (noun, member) = match scope {
        "SUBJECT" => ("subject", &d.who.subject),
        "PROJECT" => ("project", &d.who.project),
        "API_KEY" => ("API key", &d.who.api_key),
        _ => return String::new(),
    };
    match member {
        // Quoted, not `{:?}`: the answer's strings are escaped already (`printable_why`).
        Some(member) => format!(", for {noun} \"{member}\""),
        None => format!(", for the requests naming no {noun}, counted together"),
    }
}

/// The member an event or adjustment names, for a table of a decision under `scope`: the project (API key) under a
/// PROJECT (API_KEY) policy; else the subject, or, for the windows of another scope, its member with its kind.
fn member_cell(
    scope: Option<&str>,
    subject: &Option<String>,
    project: &Option<String>,
    api_key: &Option<String>,
) -> String {
    match (scope, subject, project, api_key) {
        (Some("PROJECT"), _, project, _) => or_empty(project),
        (Some("API_KEY"), _, _, api_key) => or_empty(api_key),
        (_, Some(subject), _, _) => subject.clone(),
        (_, None, Some(project), _) => format!("project {project}"),
        (_, None, None, Some(api_key)) => format!("API key {api_key}"),
        (_, None, None, None) => String::new(),
    }
}

/// The heading of [`member_cell`]'s column.
fn member_heading(scope: Option<&str>) -> &'static str {
    match scope {
        Some("PROJECT") => "project",
        Some("API_KEY") => "API key",
        _ => "subject",
    }
}

/// What a gauge's violation policy refuses, in words support can paste.
fn violation_in_words(violation: Option<&str>) -> &'static str {
    match violation {
        Some("NO_INSERTS") => {
            "NO_INSERTS: inserts are refused (and requests that name no operation); reads, updates \
                               and deletes pass"
        }
        Some("NO_WRITES") => "NO_WRITES: everything but reads and deletes is refused",
        Some("DISABLE") => "DISABLE: every request is refused",
        _ => "its violation policy refuses what it covers",
    }
}

/// A gauge quota's decision: the level it judged against its limit, and what its violation policy made of it.
fn gauge_paragraph(w: &Why, out: &mut String) {
    let (d, c) = (&w.decision, &w.counter);
    let metric = w.policy.as_ref().and_then(|p| p.gauge_metric.as_deref()).unwrap_or(&d.metric);
    let (level, limit) = (or_empty(&c.used_before), or_empty(&c.limit));
    let above = matches!((c.used_before, c.limit), (Some(level), Some(limit)) if level > limit);
    let standing = if above { "above" } else { "not above" };
    writeln!(out, "Level of {metric} at decision time: {level}, {standing} the limit of {limit}.").unwrap();
    let verdict = match (d.outcome.as_str(), d.reason.as_str()) {
        ("DENIED", _) => "so the request was refused",
        (_, "SHADOW_DENIED") => "so a HARD gauge would have refused the request; this SHADOW one only reports it",
        _ => "and the request was allowed",
    };
    writeln!(
        out,
        "The request ({} {}) is one the violation policy covers, {verdict}. It passes again once the level reported \
         drops to the limit or below (the owner frees {metric}), or the limit is raised or a grant added.",
        d.amount, d.metric
    )
    .unwrap();
    out.push('\n');
}

/// The meter the window was counted by, when not a sum: what the counter's figures are.
fn meter_paragraph(w: &Why, out: &mut String) {
    let Some(m) = &w.meter else { return };
    let what = match (m.aggregation.as_str(), m.field.as_deref()) {
        ("COUNT", _) => "usage events, whatever their amounts; this request counts 1".to_string(),
        ("UNIQUE_COUNT", Some(field)) => {
            let field = field.to_lowercase().replace('_', " ");
            let member = m.member.as_deref().map_or("none".to_string(), escaped);
            format!(
                "distinct {field}s, not amounts; this request's {field} is {member} (one counted already costs nothing)"
            )
        }
        _ => "a gauge's level, which no request consumes".to_string(),
    };
    writeln!(
        out,
        "Meter: {} (version {} of {}, by {}: {}): the counter counts {what}.",
        m.aggregation,
        m.version,
        escaped(&m.owner),
        escaped(&m.actor),
        escaped(&m.reason)
    )
    .unwrap();
}

fn counter_paragraph(w: &Why, out: &mut String) {
    if w.by_throttle() {
        return bucket_paragraph(w, out);
    }
    if w.by_gauge() {
        return gauge_paragraph(w, out);
    }
    let c = &w.counter;
    // The hook's used_before is consumption plus what open reservations held (contract §6): the holds are in it,
    // never to be added again.
    let held = match c.open_reservations {
        0 => String::new(),
        n if w.by_concurrency() => format!(" (the slots of {n} {} held then)", if n == 1 { "lease" } else { "leases" }),
        n => format!(" (which includes the {} held by {n} {} open then)", c.open_reservations_amount, reservations(n)),
    };
    if c.limit.is_none() && c.used_before.is_none() && c.remaining.is_none() {
        writeln!(out, "Counter at decision time: none recorded (the decision names no limit).").unwrap();
        out.push('\n');
        return;
    }
    // The hook records what remains after an allowed request (what it answered), before a denied one.
    let after = if w.decision.outcome == "ALLOWED" { " after it" } else { "" };
    writeln!(
        out,
        "Counter at decision time: {} used before{held}, {} remaining{after} (limit {}).",
        or_empty(&c.used_before),
        or_empty(&c.remaining),
        or_empty(&c.limit),
    )
    .unwrap();
    if let (Some(used), Some(limit)) = (c.used_before, c.limit) {
        // Producers' decisions are not bounded: a counter near i64::MAX is shown, not a crash.
        let asked = used.saturating_add(w.decision.amount);
        let over = asked > limit;
        let verdict = if over { "over the limit" } else { "within the limit" };
        let overage = w.policy.as_ref().and_then(|p| p.overage()).filter(|_| over);
        let note = if overage.is_some() { String::new() } else { unexplained(w, over, "counter") };
        writeln!(out, "{used} used + {} asked = {asked}, {verdict} of {limit}{note}.", w.decision.amount).unwrap();
        if let Some((rate, per)) = overage {
            let beyond = asked.saturating_sub(limit).min(w.decision.amount);
            overage_sentence(w, beyond, rate, per, out);
        }
    }
    out.push('\n');
}

/// What a HARD quota's throttled overage did with the part of a request beyond its limit.
fn overage_sentence(w: &Why, beyond: i64, rate: i64, per: &str, out: &mut String) {
    let d = &w.decision;
    let bucket = "the overage bucket of the serving process";
    let sentence = match (d.outcome.as_str(), d.reason.as_str()) {
        ("ALLOWED", _) => format!(
            "The {beyond} beyond the limit were let through by the throttled overage ({rate} per {per}), taken from \
             {bucket}: allowed on purpose, not billed as overage."
        ),
        (_, "RATE_LIMITED") => format!(
            "Beyond the limit this policy throttles rather than refuses, {rate} per {per}: the {beyond} this request \
             needed beyond the limit were not in {bucket} then, and refill within the wait below."
        ),
        (_, "QUOTA_EXCEEDED") => format!(
            "Beyond the limit this policy throttles, {rate} per {per}, but this request needed {beyond} beyond it, \
             more than {bucket} ever holds ({rate}): only the window's reset lets it through."
        ),
        _ => return,
    };
    writeln!(out, "{sentence}").unwrap();
}

/// A throttle's recorded counter: the bucket as the serving process held it (capacity, tokens taken, left).
fn bucket_paragraph(w: &Why, out: &mut String) {
    let c = &w.counter;
    // Tokens before the request: capacity less what was taken. The recorded `remaining` is after the request for
    // an allowed one (what the hook answered), before it for a denied one.
    let left = c.limit.zip(c.used_before).map(|(limit, used)| limit.saturating_sub(used));
    writeln!(
        out,
        "Bucket at decision time, in the serving process: {} of {} tokens left ({} taken and not yet refilled).",
        or_empty(&left),
        or_empty(&c.limit),
        or_empty(&c.used_before),
    )
    .unwrap();
    if let Some(left) = left {
        let asked = w.decision.amount;
        let over = asked > left;
        let verdict = if over { "too few tokens" } else { "enough tokens" };
        let note = unexplained(w, over, "bucket");
        writeln!(out, "{asked} asked, {left} left: {verdict}{note}.").unwrap();
    }
    out.push('\n');
}

/// A decision its own recorded counter does not explain is what support most needs to see. Over the limit and
/// allowed is expected of a SHADOW or SOFT policy (SHADOW_DENIED allows; SOFT excess is billed), not of a HARD one.
fn unexplained(w: &Why, over: bool, counter: &str) -> String {
    let hard = w.policy.as_ref().is_none_or(|p| p.enforcement == schemas::Enforcement::HARD.symbol());
    match (over, w.decision.outcome.as_str()) {
        (false, "DENIED") => format!(": the recorded {counter} does not explain this denial"),
        (true, "ALLOWED") if hard => format!(": by the recorded {counter} this request should have been denied"),
        _ => String::new(),
    }
}

fn reservations(count: u64) -> &'static str {
    if count == 1 { "reservation" } else { "reservations" }
}

fn consumption_paragraph(w: &Why, out: &mut String) {
    if w.by_gauge() {
        writeln!(out, "Consumption: not what decided; a gauge judges a level, not the window's consumption.").unwrap();
        out.push('\n');
        return;
    }
    if w.by_concurrency() {
        // A lease consumes nothing: what the policy counted is the leases held at the decision, as it recorded them.
        let (held, limit) = (or_empty(&w.counter.used_before), or_empty(&w.counter.limit));
        writeln!(out, "Leases held before the decision: {held} of {limit} slots; a lease consumes nothing.").unwrap();
        out.push('\n');
        return;
    }
    if w.decision.window_start.is_none() {
        writeln!(out, "Consumption: the decision names no window, so none is counted against it.").unwrap();
        out.push('\n');
        return;
    }
    let c = &w.consumption;
    // Holds count as the hook counts them, so that this figure and the recorded "used before" compare.
    let held = match w.counter.open_reservations {
        0 => "no reservation open".to_string(),
        n => format!("{} held by {n} open {}", w.counter.open_reservations_amount, reservations(n)),
    };
    writeln!(
        out,
        "Consumption of this window before the decision, per the ledger: {} {} in {} {}, and {held}: {} used \
         before.",
        c.total,
        w.decision.metric,
        c.events,
        if c.events == 1 { "event" } else { "events" },
        c.used_before
    )
    .unwrap();
    if w.by_throttle() {
        writeln!(
            out,
            "(For context only: a throttle decides by its bucket, which refills continuously, counts no reservation \
             and starts full when the serving process starts; buckets are not in the ledger.)"
        )
        .unwrap();
    }
    if !c.largest.is_empty() {
        let scope = w.policy.as_ref().map(|p| p.scope.as_str());
        writeln!(
            out,
            "Largest first{}:",
            if c.events as usize > c.largest.len() {
                format!(" ({} of {})", c.largest.len(), c.events)
            } else {
                String::new()
            }
        )
        .unwrap();
        let rows: Vec<Vec<String>> = c
            .largest
            .iter()
            .map(|e| {
                vec![
                    e.seq.to_string(),
                    e.event_id.clone(),
                    e.kind.to_string(),
                    e.occurred_at.to_string(),
                    member_cell(scope, &e.subject, &e.project, &e.api_key),
                    e.quantity.to_string(),
                ]
            })
            .collect();
        let heading = member_heading(scope);
        out.push_str(&table(&["entry", "event", "kind", "occurred at", heading, "quantity"], &rows));
    }
    out.push('\n');
}

fn retry_paragraph(w: &Why, out: &mut String) {
    match w.retry_after_ms {
        Some(ms) => writeln!(out, "Retry after: {ms} ms ({} s).", retry_after_seconds(ms)).unwrap(),
        None => writeln!(out, "Retry after: none given.").unwrap(),
    }
    match (w.resets_at, w.by_throttle()) {
        // A bucket has no reset: it refills continuously. What the hook answered is when this amount fits again.
        (Some(at), true) if w.retry_after_ms.is_some() => {
            writeln!(out, "The bucket holds enough tokens for this amount again at {at}.").unwrap()
        }
        (Some(at), false) if w.by_concurrency() => {
            writeln!(out, "A slot frees at {at} at the latest, when the first lease held expires.").unwrap()
        }
        // A rolling window never resets at once: its usage ages out, each event its length after it happened.
        (Some(at), false) if w.rolling_seconds().is_some() => {
            writeln!(out, "Enough of the window's usage ages out for this amount at {at}.").unwrap()
        }
        (None, false) if w.rolling_seconds().is_some() => writeln!(
            out,
            "A rolling window never resets at once: each use ages out of it {} after it happened.",
            w.rolling_seconds().map_or(String::new(), length_in_words)
        )
        .unwrap(),
        (Some(reset), false) => writeln!(out, "The window resets at {reset}.").unwrap(),
        _ => {}
    }
    out.push('\n');
}

/// A denial by a ROLLING policy's quota in words support can paste, in place of the reason's: its limit over any
/// interval of its length, what the interval up to the decision held, and when enough of it ages out. None for any
/// other decision.
fn rolling_denial(w: &Why) -> Option<String> {
    let (d, c) = (&w.decision, &w.counter);
    let seconds =
        w.rolling_seconds().filter(|_| (d.outcome.as_str(), d.reason.as_str()) == ("DENIED", "QUOTA_EXCEEDED"))?;
    let limit = c.limit.or(w.effective_limit)?;
    let used = c.used_before.unwrap_or(w.consumption.used_before);
    let length = length_in_words(seconds);
    let when = if d.amount > limit {
        format!(
            "; this request alone ({}) is above the limit, so no usage aging out makes room for it",
            grouped(d.amount)
        )
    } else {
        w.resets_at.map_or(String::new(), |at| format!("; enough ages out at {at}"))
    };
    Some(format!(
        "Out of allowance: the limit of {} {} in any {length} (rolling) was reached: {} were used in the {length} \
         before {}{when}. Requests pass again as earlier usage ages out, or sooner if the quota is raised or a grant \
         is added.",
        grouped(limit),
        d.metric,
        grouped(used),
        d.occurred_at,
    ))
}

/// A ROLLING window's length in words: `24 hours`, `7 days`, `90 seconds`; `hour` for one hour (read after "any" and
/// "the"). Days from two on, so that a day reads as the 24 hours it is.
fn length_in_words(seconds: i64) -> String {
    let (count, unit) = match seconds {
        s if s % 86_400 == 0 && s >= 2 * 86_400 => (s / 86_400, "day"),
        s if s % 3_600 == 0 => (s / 3_600, "hour"),
        s if s % 60 == 0 => (s / 60, "minute"),
        s => (s, "second"),
    };
    match count {
        1 => unit.to_string(),
        n => format!("{} {unit}s", grouped(n)),
    }
}

/// `n` with its thousands grouped by commas (`10,000`), as a customer reads a limit.
fn grouped(n: i64) -> String {
    let digits = n.unsigned_abs().to_string();
    let mut shown = String::with_capacity(digits.len() + digits.len() / 3 + 1);
    for (i, digit) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            shown.push(',');
        }
        shown.push(digit);
    }
    if n < 0 { format!("-{shown}") } else { shown }
}

/// Whole seconds, rounded up as the `Retry-After` header is: a client that waits them is not early.
fn retry_after_seconds(ms: i64) -> i64 {
    ms.div_euclid(1_000) + i64::from(ms.rem_euclid(1_000) > 0)
}

fn adjustments_paragraph(w: &Why, out: &mut String) {
    if w.adjustments.is_empty() {
        writeln!(out, "Adjustments for this window since: none.").unwrap();
        return;
    }
    writeln!(out, "Adjustments for this window since: {}.", w.adjustments.len()).unwrap();
    let scope = w.policy.as_ref().map(|p| p.scope.as_str());
    let rows: Vec<Vec<String>> = w
        .adjustments
        .iter()
        .map(|a| {
            let window = match (a.window_start, a.window_end) {
                (Some(s), Some(e)) => format!("{s} .. {e}"),
                _ => String::new(),
            };
            vec![
                a.seq.to_string(),
                a.kind.clone(),
                or_empty(&a.policy_id),
                member_cell(scope, &a.subject, &a.project, &a.api_key),
                window,
                a.amount.to_string(),
                a.run_id.clone(),
            ]
        })
        .collect();
    let heading = member_heading(scope);
    out.push_str(&table(&["entry", "kind", "policy", heading, "window", "amount", "run"], &rows));
}

/// An unknown request id, with the nearest known ones.
pub fn unknown(u: &Unknown) -> String {
    let mut out = format!("No decision is recorded for request id {:?}.\n", u.request_id);
    if u.nearest.is_empty() {
        out.push_str("No recorded request id is near it.\n");
    } else {
        out.push_str("Nearest recorded request ids:\n");
        for n in &u.nearest {
            writeln!(out, "  {}", printable(n)).unwrap();
        }
    }
    out
}

/// A tenant the ledger holds no event of, with the nearest known ones.
pub fn unknown_tenant(u: &UnknownTenant) -> String {
    unknown_tenant_named(&u.tenant, &u.nearest)
}

/// [`unknown_tenant`] from its tenant and nearest tenants (a read across a cluster ranks them over every shard).
pub fn unknown_tenant_named(tenant: &str, nearest: &[String]) -> String {
    let mut out = format!("No event is recorded for tenant {tenant:?}.\n");
    if nearest.is_empty() {
        out.push_str("No recorded tenant is near it.\n");
    } else {
        out.push_str("Nearest recorded tenants:\n");
        for n in nearest {
            writeln!(out, "  {}", printable(n)).unwrap();
        }
    }
    out
}

/// `audit tenant` in words: the timeline, then consumption per window, reservations, adjustments.
pub fn timeline(t: &Timeline) -> String {
    let mut out = String::new();
    let tenant = printable(&t.tenant);
    writeln!(out, "Tenant {tenant} from {} to {} (ledger watermark {}).", t.from, t.to, t.watermark).unwrap();
    writeln!(out, "\nDecisions: {}.", t.decisions.len()).unwrap();
    if !t.decisions.is_empty() {
        let rows: Vec<Vec<String>> = t
            .decisions
            .iter()
            .map(|d| {
                vec![
                    d.occurred_at.to_string(),
                    d.request_id.clone(),
                    or_empty(&d.subject),
                    d.metric.clone(),
                    d.amount.to_string(),
                    d.outcome.clone(),
                    d.reason.clone(),
                    match (&d.policy_id, d.policy_version, d.policy_owner.as_deref()) {
                        (Some(id), Some(version), Some(rules::policy::PLAN_DEFAULT_TENANT)) => {
                            format!("{id} v{version} (plan default)")
                        }
                        (Some(id), Some(version), _) => format!("{id} v{version}"),
                        (Some(id), None, _) => id.clone(),
                        (None, _, _) => String::new(),
                    },
                ]
            })
            .collect();
        out.push_str(&table(
            &["occurred at", "request", "subject", "metric", "amount", "outcome", "reason", "policy"],
            &rows,
        ));
    }
    writeln!(out, "\nConsumption per day (usage and valid commits):").unwrap();
    let rows: Vec<Vec<String>> = t
        .consumption
        .iter()
        .map(|c| {
            vec![
                c.window_start.to_string(),
                c.metric.clone(),
                c.usage.to_string(),
                c.commits.to_string(),
                c.total.to_string(),
                c.events.to_string(),
            ]
        })
        .collect();
    out.push_str(&table(&["day", "metric", "usage", "commits", "consumption", "events"], &rows));
    writeln!(out, "\nReservations: {}.", t.reservations.len()).unwrap();
    if !t.reservations.is_empty() {
        let rows: Vec<Vec<String>> = t
            .reservations
            .iter()
            .map(|r| {
                vec![
                    r.reserved_at.as_ref().map_or(String::new(), ToString::to_string),
                    r.reservation_id.clone(),
                    r.metric.clone(),
                    or_empty(&r.amount_held),
                    r.state.clone(),
                    or_empty(&r.committed),
                ]
            })
            .collect();
        out.push_str(&table(&["reserved at", "reservation", "metric", "held", "state", "committed"], &rows));
    }
    writeln!(out, "\nAdjustments: {}.", t.adjustments.len()).unwrap();
    if !t.adjustments.is_empty() {
        let rows: Vec<Vec<String>> = t
            .adjustments
            .iter()
            .map(|a| {
                let window = match (a.window_start, a.window_end) {
                    (Some(s), Some(e)) => format!("{s} .. {e}"),
                    _ => String::new(),
                };
                vec![
                    a.occurred_at.to_string(),
                    a.kind.clone(),
                    a.metric.clone(),
                    or_empty(&a.policy_id),
                    or_empty(&a.subject),
                    window,
                    or_empty(&a.event_occurred_at),
                    a.amount.to_string(),
                ]
            })
            .collect();
        let header = ["recorded for", "kind", "metric", "policy", "subject", "window", "event at", "amount"];
        out.push_str(&table(&header, &rows));
    }
    alerts_paragraph(t, &mut out);
    changes_paragraph(t, &mut out);
    if !t.corrections.is_empty() {
        writeln!(out, "\nCorrections of its usage: {}.", t.corrections.len()).unwrap();
        corrections_table(&t.corrections, &mut out);
    }
    out
}

/// The alerts written in the range: when each window reached which threshold, and by which request.
fn alerts_paragraph(t: &Timeline, out: &mut String) {
    writeln!(out, "\nAlerts: {}.", t.alerts.len()).unwrap();
    if t.alerts.is_empty() {
        return;
    }
    let rows: Vec<Vec<String>> = t
        .alerts
        .iter()
        .map(|a| {
            let window = match (a.window_start, a.window_end) {
                (Some(s), Some(e)) => format!("{s} .. {e}"),
                _ => String::new(),
            };
            let of_limit = a.limit.map_or(String::new(), |limit| format!("{} of {limit}", a.observed));
            vec![
                a.occurred_at.to_string(),
                format!("{} {}%", a.kind, a.threshold_percent),
                a.metric.clone(),
                or_empty(&a.policy_id),
                or_empty(&a.member),
                window,
                of_limit,
                or_empty(&a.request_id),
            ]
        })
        .collect();
    let header = ["at", "alert", "metric", "policy", "member", "window", "used", "request"];
    out.push_str(&table(&header, &rows));
}

/// The changes to the tenant's limits recorded in the range (its policies, the plan defaults, its grants), with who
/// made them and why; nothing when there were none, as before changes were recorded with who and why.
fn changes_paragraph(t: &Timeline, out: &mut String) {
    if t.changes.is_empty() {
        return;
    }
    writeln!(out, "\nChanges to its limits: {}.", t.changes.len()).unwrap();
    let rows: Vec<Vec<String>> = t
        .changes
        .iter()
        .map(|c| {
            vec![
                c.occurred_at.to_string(),
                c.kind.clone(),
                c.owner.clone(),
                c.metric.clone(),
                match c.version {
                    Some(version) => format!("{} v{version}", c.id),
                    None => c.id.clone(),
                },
                c.change.clone(),
                or_empty(&c.actor),
                or_empty(&c.reason),
            ]
        })
        .collect();
    let header = ["recorded at", "kind", "owner", "metric", "id", "change", "actor", "reason"];
    out.push_str(&table(&header, &rows));
}

#[cfg(test)]
mod tests {
    use super::*;

    // Proves a rolling window's length and its limit read as a customer reads them.
    #[test]
    fn rolling_lengths_and_limits_in_words() {
        let lengths =
            [(86_400, "24 hours"), (3_600, "hour"), (172_800, "2 days"), (90, "90 seconds"), (120, "2 minutes")];
        for (seconds, words) in lengths {
            assert_eq!(length_in_words(seconds), words, "{seconds} s");
        }
        let numbers = [(0, "0"), (999, "999"), (1_000, "1,000"), (10_000, "10,000"), (-1_234_567, "-1,234,567")];
        for (n, words) in numbers {
            assert_eq!(grouped(n), words);
        }
        assert_eq!(grouped(i64::MIN), "-9,223,372,036,854,775,808");
    }

    // Proves the retry time in seconds is rounded up, never down (a client told 86356 s would come back early).
    #[test]
    fn retry_seconds_round_up() {
        let cases = [(0, 0), (1, 1), (999, 1), (1_000, 1), (1_001, 2), (60_000, 60), (86_356_800, 86_357)];
        for (ms, seconds) in cases {
            assert_eq!(retry_after_seconds(ms), seconds, "{ms} ms");
        }
    }
}
