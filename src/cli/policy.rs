//! `policy set|list|history` and `plan set|assign|assignments`: the control plane's policies (docs/contract.md §7). The change is judged
//! by the `control` crate against what the ledger holds (`usecases::change`); this module parses, dispatches and prints.

use std::io::Write;
use std::process::ExitCode;

use clap::{Args, Subcommand};
use control::PolicyChange;
use schemas::{Enforcement, OnFailure, PolicyEvent, Scope, Timestamp, Violation, Window};
use usecases::change::{Destination, PolicyRow};

#[derive(Debug, Subcommand)]
pub enum PolicyCommand {
    /// Record a new version of a tenant's policy (the last version plus 1), refused when it would be invalid.
    Set(Box<SetArgs>),
    /// The policies in force now, with their versions.
    List {
        /// Only this tenant's: its own and the plan defaults that apply to it.
        #[arg(long)]
        tenant: Option<String>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Every version of a policy: its limit, when it took effect, who changed it and why.
    History {
        /// The policy id (`policy list` shows them).
        policy_id: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum PlanCommand {
    /// Record a new version of a policy of the named plan --plan (owner `*PLAN`), or without it of the plan defaults
    /// (tenant `*`): what every tenant without a policy of its own for the same metric, scope and window gets.
    Set(Box<PlanSetArgs>),
    /// Assign a tenant to a named plan from --effective-from (default now) until its next assignment.
    Assign(AssignArgs),
    /// Every plan assignment recorded, in ledger order.
    Assignments {
        /// Only this tenant's.
        #[arg(long)]
        tenant: Option<String>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Args)]
pub struct PlanSetArgs {
    /// The named plan (free, pro, ...); without it, the plan defaults.
    #[arg(long)]
    plan: Option<String>,
    #[command(flatten)]
    policy: PolicyArgs,
}

#[derive(Debug, Args)]
pub struct AssignArgs {
    /// The tenant.
    #[arg(long)]
    tenant: String,
    /// The plan's name (it must have a policy recorded); `none`: back to the plan defaults alone.
    #[arg(long)]
    plan: String,
    /// From when, RFC 3339 (default now).
    #[arg(long, value_parser = parse_time)]
    effective_from: Option<Timestamp>,
    /// Who assigns it (recorded in the event).
    #[arg(long, env = "QUOTA_LEDGER_ACTOR")]
    actor: String,
    /// Why (recorded in the event).
    #[arg(long)]
    reason: String,
    /// Print the recorded event as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub struct SetArgs {
    /// The tenant.
    #[arg(long)]
    tenant: String,
    #[command(flatten)]
    policy: PolicyArgs,
}

/// What a policy version says, who sets it and why, and where it goes.
#[derive(Debug, Args)]
pub struct PolicyArgs {
    /// The metric, e.g. requests.
    #[arg(long)]
    metric: String,
    /// What a window may consume, in the metric's unit (0 or more).
    #[arg(long, allow_negative_numbers = true)]
    limit: i64,
    /// MINUTE, HOUR, DAY or MONTH (calendar-aligned, in --time-zone's calendar), CONCURRENT (the limit is on leases
    /// held at once) or ROLLING (every interval of --window-seconds ending at any instant).
    #[arg(long, value_parser = parse_symbol::<Window>)]
    window: Window,
    /// The length of a ROLLING window in seconds, 1 to 2678400 (31 days): e.g. 86400 limits every 24 hours ending
    /// at any instant. Given with --window ROLLING only, and always with it.
    #[arg(long, value_name = "SECONDS", allow_negative_numbers = true)]
    window_seconds: Option<i64>,
    /// The billing anchor of a BILLING_CYCLE window (RFC 3339): every cycle starts on its day of month (the last day
    /// of shorter months) at its time of day, on the clock of --time-zone, e.g. 2026-01-17T00:00:00-05:00 with
    /// America/New_York. Given with --window BILLING_CYCLE only, and always with it. A new anchor takes effect at the
    /// next boundary of the cycles in force.
    #[arg(long, value_name = "INSTANT", value_parser = parse_time)]
    cycle_anchor: Option<Timestamp>,
    /// The IANA time zone of the HOUR, DAY and MONTH windows, e.g. America/New_York (default UTC): a DAY runs from
    /// local midnight to local midnight.
    #[arg(long)]
    time_zone: Option<String>,
    /// What the hook answers when the ledger cannot record its decisions (a full disk): CLOSED fails the request
    /// (503); OPEN allows it under `serve --fail-open-rate`, answering FAIL_OPEN, and records it once the ledger
    /// takes writes again. Default CLOSED.
    #[arg(long, value_parser = parse_symbol::<OnFailure>)]
    on_failure: Option<OnFailure>,
    /// Overage handling THROTTLE for a HARD quota, RATE/WINDOW (e.g. 10/MINUTE): beyond the limit, let RATE units
    /// through per WINDOW (a token bucket of RATE, answering RATE_LIMITED past it) instead of QUOTA_EXCEEDED. Default:
    /// the limit is a wall (HARD rejects, SOFT bills).
    #[arg(long, value_name = "RATE/WINDOW", value_parser = parse_overage)]
    overage_throttle: Option<(i64, Window)>,
    /// Makes the policy a gauge quota (the metric's usage events report the tenant's current level, e.g.
    /// storage_bytes): while the level is above the limit, the tenant's requests of every metric are refused as the
    /// violation says: NO_INSERTS (operation insert, or none named), NO_WRITES (all but read and delete) or DISABLE
    /// (all). HARD or SHADOW, TENANT scope.
    #[arg(long, value_parser = parse_symbol::<Violation>)]
    violation: Option<Violation>,
    /// The percents of a window's effective limit at which a THRESHOLD alert is written to quota.alerts,
    /// comma-separated and increasing, at most 10, each 1 to 1000 (e.g. 50,75,100); `none` for no THRESHOLD alert.
    /// Default 80,90,100. Not for throttles, gauges, CONCURRENT or ROLLING policies.
    #[arg(long, value_name = "PERCENTS", value_parser = parse_thresholds)]
    alert_thresholds: Option<Thresholds>,
    /// Of a TENANT policy, 1 to 99: one subject's consumption in a window above this percent of the tenant's calls for
    /// a SUBJECT_SHARE alert (e.g. 40). Default: none.
    #[arg(long, value_name = "PERCENT", allow_negative_numbers = true)]
    alert_subject_share: Option<i32>,
    /// HARD (deny), SOFT (bill the excess) or SHADOW (only report).
    #[arg(long, value_parser = parse_symbol::<Enforcement>)]
    enforcement: Enforcement,
    /// TENANT (the tenant's sum), SUBJECT, PROJECT or API_KEY (each subject, project or API key separately; requests
    /// naming none count together).
    #[arg(long, value_parser = parse_symbol::<Scope>, default_value = "TENANT")]
    scope: Scope,
    /// The policy (default TENANT:METRIC:SCOPE:WINDOW, lower case: org-42:requests:tenant:day).
    #[arg(long)]
    policy_id: Option<String>,
    /// The version to write (default: the last recorded plus 1); refused unless above the last.
    #[arg(long)]
    version: Option<i32>,
    /// When the version starts to govern, RFC 3339 (default now): it governs every window that ends after it.
    #[arg(long, value_parser = parse_time)]
    effective_from: Option<Timestamp>,
    /// Who makes the change (recorded in the event).
    #[arg(long, env = "QUOTA_LEDGER_ACTOR")]
    actor: String,
    /// Why (recorded in the event).
    #[arg(long)]
    reason: String,
    #[command(flatten)]
    target: Target,
}

/// Where a change goes: Kafka with `--brokers`, otherwise straight into the ledger.
#[derive(Debug, Args)]
pub struct Target {
    /// Produce the event to Kafka (quota.policies or quota.grants) instead of appending it to the ledger; the next
    /// version is still read from the ledger given by --ledger or --data.
    #[arg(long, env = "QUOTA_LEDGER_BROKERS")]
    brokers: Option<String>,
    /// A librdkafka setting for --brokers, repeatable: -X security.protocol=SASL_SSL.
    #[arg(short = 'X', value_name = "KEY=VALUE", value_parser = super::kafka_args::parse_setting)]
    settings: Vec<(String, String)>,
    /// The topic (default: the record type's, docs/contract.md §2).
    #[arg(long)]
    topic: Option<String>,
    /// Print the recorded event as JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn parse_symbol<T: SymbolOf>(text: &str) -> Result<T, String> {
    T::from_symbol(&text.to_uppercase()).ok_or_else(|| format!("{text:?} is not one of {}", T::SYMBOLS.join(", ")))
}

/// `RATE/WINDOW`, as `--overage-throttle 10/MINUTE` (the window in any case).
fn parse_overage(text: &str) -> Result<(i64, Window), String> {
    let (rate, window) = text.split_once('/').ok_or_else(|| format!("{text:?} is not RATE/WINDOW, e.g. 10/MINUTE"))?;
    let rate = rate.trim().parse::<i64>().map_err(|e| format!("the rate {rate:?} of {text:?}: {e}"))?;
    Ok((rate, parse_symbol::<Window>(window.trim())?))
}

/// The percents of `--alert-thresholds`, one value of the flag (a bare `Vec` would be a flag given many times).
#[derive(Debug, Clone)]
struct Thresholds(Vec<i32>);

/// `--alert-thresholds`: percents comma-separated (`50,75,100`), or `none` for an empty list. Their range and order
/// are judged with the rest of the policy, by the contract's validation.
fn parse_thresholds(text: &str) -> Result<Thresholds, String> {
    if text.trim().eq_ignore_ascii_case("none") {
        return Ok(Thresholds(Vec::new()));
    }
    text.split(',')
        .map(|n| n.trim().parse::<i32>().map_err(|e| format!("{n:?} of {text:?} is not a percent: {e}")))
        .collect::<Result<_, _>>()
        .map(Thresholds)
}

pub fn parse_time(text: &str) -> Result<Timestamp, String> {
    Timestamp::parse_rfc3339(text).map_err(|e| format!("{text:?} is not an RFC 3339 time: {e}"))
}

/// The Avro enums a flag takes by symbol.
pub trait SymbolOf: Sized + Clone + Send + Sync + 'static {
    /// Every symbol, in schema order.
    const SYMBOLS: &'static [&'static str];
    /// The value of a symbol.
    fn from_symbol(symbol: &str) -> Option<Self>;
}

macro_rules! symbol_of {
    ($($t:ty),+) => {$(
        impl SymbolOf for $t {
            const SYMBOLS: &'static [&'static str] = <$t>::SYMBOLS;
            fn from_symbol(symbol: &str) -> Option<Self> {
                <$t>::from_symbol(symbol)
            }
        }
    )+};
}
symbol_of!(Window, Enforcement, Scope, OnFailure, Violation, schemas::AlertKind);
symbol_of!(schemas::Aggregation, schemas::MeterField);

pub fn run(store: &super::Store, command: PolicyCommand) -> anyhow::Result<ExitCode> {
    match command {
        PolicyCommand::Set(args) => {
            let SetArgs { tenant, policy } = *args;
            set(store, tenant, policy, "quota-ledger policy set")
        }
        PolicyCommand::List { tenant, json } => list(store, tenant.as_deref(), json),
        PolicyCommand::History { policy_id, json } => history(store, &policy_id, json),
    }
}

pub fn run_plan(store: &super::Store, command: PlanCommand) -> anyhow::Result<ExitCode> {
    match command {
        PlanCommand::Set(args) => {
            let PlanSetArgs { plan, policy } = *args;
            let owner = plan.as_deref().map_or("*".into(), schemas::partition::plan_owner);
            set(store, owner, policy, "quota-ledger plan set")
        }
        PlanCommand::Assign(args) => {
            let plan = Some(args.plan).filter(|p| p != "none");
            let (actor, reason, source) = (args.actor, args.reason, "quota-ledger plan assign".into());
            let change = control::PlanAssignment {
                tenant: args.tenant,
                plan,
                effective_from: args.effective_from,
                actor,
                reason,
                source,
            };
            let assigned = usecases::plans::assign_plan(store, &change)?;
            match args.json {
                true => super::print_json(&assigned.event)?,
                false => writeln!(super::stdout(), "{assigned}")?,
            }
            Ok(ExitCode::SUCCESS)
        }
        PlanCommand::Assignments { tenant, json } => {
            let rows = usecases::plans::assignments(store, tenant.as_deref())?;
            super::print(&rows[..], json, usecases::plans::write_assignments)
        }
    }
}

fn set(store: &super::Store, tenant: String, args: PolicyArgs, source: &str) -> anyhow::Result<ExitCode> {
    let change = PolicyChange {
        tenant,
        metric: args.metric,
        limit: args.limit,
        window: args.window,
        enforcement: args.enforcement,
        scope: args.scope,
        policy_id: args.policy_id,
        version: args.version,
        effective_from: args.effective_from,
        time_zone: args.time_zone,
        on_failure: args.on_failure,
        overage: args.overage_throttle,
        violation: args.violation,
        window_seconds: args.window_seconds,
        cycle_anchor: args.cycle_anchor,
        alert_thresholds: args.alert_thresholds.map(|t| t.0),
        alert_subject_share: args.alert_subject_share,
        actor: args.actor,
        reason: args.reason,
        source: source.into(),
    };
    let changed = usecases::change::set_policy(store, &change, &args.target.destination())?;
    match args.target.json {
        true => super::print_json(&changed.event)?,
        false => writeln!(super::stdout(), "{changed}")?,
    }
    Ok(ExitCode::SUCCESS)
}

impl Target {
    /// Where the change goes.
    pub fn destination(&self) -> Destination {
        match &self.brokers {
            Some(brokers) => Destination::Kafka {
                brokers: brokers.clone(),
                settings: self.settings.clone(),
                topic: self.topic.clone(),
            },
            None => Destination::Ledger,
        }
    }
}

fn list(store: &super::Store, tenant: Option<&str>, json: bool) -> anyhow::Result<ExitCode> {
    let recorded = usecases::change::recorded(store)?;
    print(recorded.in_force(tenant, Timestamp::now()), json, usecases::change::write_policy_list)
}

fn history(store: &super::Store, policy_id: &str, json: bool) -> anyhow::Result<ExitCode> {
    let recorded = usecases::change::recorded(store)?;
    let versions = recorded.history(policy_id);
    if versions.is_empty() {
        anyhow::bail!("no policy {policy_id:?} is recorded");
    }
    print(versions, json, usecases::change::write_policy_history)
}

/// Policies as JSON, or as the table `write` makes of them.
fn print(
    policies: Vec<&PolicyEvent>,
    json: bool,
    write: fn(&mut dyn Write, &[PolicyRow]) -> std::io::Result<()>,
) -> anyhow::Result<ExitCode> {
    let rows: Vec<PolicyRow> = policies.into_iter().map(PolicyRow::from).collect();
    super::print(&rows[..], json, write)
}
