//! Flags from a TOML file for a clap command (`--config FILE`): every flag of every command from a file, so that
//! settings (and secrets such as `sasl.password`) stay off the command line. Precedence: a flag given > its environment
//! variable > the file > the default. The file's top-level keys are the global flags (`ledger`, `data`); a table per
//! command holds its flags by their long names (`[serve]`, `[export.billing]`); `[kafka]` holds librdkafka settings,
//! given to every command that takes `-X` (before the command line's own, which win). A key that names no flag is
//! refused, named with its table. [`settings`] says what the file resolves to, secrets masked.
//!
//! The file is applied to the arguments before clap parses them: each value the command line does not give becomes
//! the flag it names, so clap's own checks and conversions apply to it as to a typed flag.

#![deny(missing_docs)]

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use clap::{Arg, ArgAction};

/// A config file that cannot be used; nothing runs.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FlagFileError {
    /// The file cannot be read.
    #[error("cannot read the config file {}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The file is not TOML (the position only: the line may hold a secret).
    #[error("the config file {} is not valid TOML{at}: {message}", path.display())]
    NotToml {
        /// The file.
        path: PathBuf,
        /// ` at line N`, when known.
        at: String,
        /// toml's message, without the line it quotes.
        message: String,
    },
    /// A key of the file names no flag, or has a value of the wrong shape.
    #[error("in {}", path.display())]
    Key {
        /// The file.
        path: PathBuf,
        /// Which key, and why.
        #[source]
        refused: KeyRefused,
    },
}

/// A key of the file that names no flag, or whose value has the wrong shape.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct KeyRefused(String);

macro_rules! refuse {
    ($($words:tt)*) => {
        return Err(KeyRefused(format!($($words)*)))
    };
}

/// The environment variable naming the config file when `--config` is not given.
pub const CONFIG_ENV: &str = "QUOTA_LEDGER_CONFIG";

/// The table of librdkafka settings.
const KAFKA_TABLE: &str = "kafka";

/// The arguments with the config file's values added, for clap to parse; the arguments as they are without a file.
pub fn with_config(command: &clap::Command, args: Vec<OsString>) -> Result<Vec<OsString>, FlagFileError> {
    let Some(path) = config_path(&args) else { return Ok(args) };
    let table = checked(command, &path)?;
    let used = CommandLine::scan(command, &args);
    Ok(apply(command, &table, &used, args))
}

/// `--config FILE` (or `--config=FILE`) before `--`, else `QUOTA_LEDGER_CONFIG`.
fn config_path(args: &[OsString]) -> Option<PathBuf> {
    let mut tokens = args.iter().skip(1);
    while let Some(token) = tokens.next() {
        let text = token.to_string_lossy();
        if text == "--" {
            break;
        }
        if text == "--config" {
            return tokens.next().map(PathBuf::from);
        }
        if let Some(path) = text.strip_prefix("--config=") {
            return Some(PathBuf::from(path));
        }
    }
    std::env::var_os(CONFIG_ENV).filter(|v| !v.is_empty()).map(PathBuf::from)
}

/// The file at `path`, every key of it checked against `command`.
fn checked(command: &clap::Command, path: &Path) -> Result<toml::Table, FlagFileError> {
    let table = read(path)?;
    check_keys(command, &table, &[]).map_err(|refused| FlagFileError::Key { path: path.to_path_buf(), refused })?;
    Ok(table)
}

fn read(path: &Path) -> Result<toml::Table, FlagFileError> {
    let text =
        std::fs::read_to_string(path).map_err(|source| FlagFileError::Read { path: path.to_path_buf(), source })?;
    // toml's message names the line and column, and quotes the line: a secret on it would be printed, so only the
    // position is kept.
    text.parse::<toml::Table>().map_err(|error| {
        let at = error
            .span()
            .map(|span| {
                let line = text[..span.start].matches('\n').count() + 1;
                format!(" at line {line}")
            })
            .unwrap_or_default();
        FlagFileError::NotToml { path: path.to_path_buf(), at, message: error.message().to_string() }
    })
}

/// Refuses a key that names no flag of the command at `path` (nor a global flag, nor one of its subcommands).
fn check_keys(command: &clap::Command, table: &toml::Table, path: &[&str]) -> Result<(), KeyRefused> {
    for (key, value) in table {
        let name = path.iter().copied().chain([key.as_str()]).collect::<Vec<_>>().join(".");
        if path.is_empty() && key == KAFKA_TABLE {
            let Some(settings) = value.as_table() else {
                refuse!("`{KAFKA_TABLE}` must be a table of librdkafka settings")
            };
            for (setting, value) in settings {
                if value.is_table() || value.is_array() {
                    refuse!("`{KAFKA_TABLE}.{setting}` must be a string, a number or a boolean (a librdkafka setting)");
                }
            }
            continue;
        }
        if let Some(sub) = command.find_subcommand(key) {
            let Some(inner) = value.as_table() else {
                refuse!("`{name}` is a command: give its flags as a table [{name}]")
            };
            check_keys(sub, inner, &path.iter().copied().chain([key.as_str()]).collect::<Vec<_>>())?;
            continue;
        }
        let Some(arg) = long_arg(command, key) else {
            let known: Vec<String> = command
                .get_arguments()
                .filter(|a| !is_internal(a))
                .filter_map(|a| a.get_long().map(str::to_string))
                .collect();
            let flag = key.replace('_', "-");
            match path.is_empty() {
                true => refuse!(
                    "unknown key `{name}`: no global flag --{flag} and no command of that name (global flags: {})",
                    known.join(", ")
                ),
                false => refuse!(
                    "unknown key `{name}`: `{}` has no flag --{flag} (flags: {})",
                    path.join(" "),
                    known.join(", ")
                ),
            }
        };
        if value.is_table() {
            refuse!("`{name}` is the flag --{}: give it a value, not a table", arg.get_long().unwrap_or(key));
        }
    }
    Ok(())
}

/// The flag whose long name is `key` (`batch-max-events` or `batch_max_events`).
fn long_arg<'a>(command: &'a clap::Command, key: &str) -> Option<&'a Arg> {
    let key = key.replace('_', "-");
    command.get_arguments().find(|a| !is_internal(a) && a.get_long() == Some(key.as_str()))
}

/// clap's own `--help` and `--version`, and `--config` itself: not settings.
fn is_internal(arg: &Arg) -> bool {
    matches!(arg.get_id().as_str(), "help" | "version" | "config")
}

/// What the command line gives: the commands it names (their place in it) and the flags it sets at each.
struct CommandLine {
    /// The command path (`["export", "billing"]`) and the index of each name in the arguments.
    path: Vec<(String, usize)>,
    /// The ids of the flags given, by the depth of the command they belong to (0: the program).
    given: Vec<Vec<String>>,
}

impl CommandLine {
    fn scan(root: &clap::Command, args: &[OsString]) -> CommandLine {
        let mut path = Vec::new();
        let mut given = vec![Vec::new()];
        let mut chain: Vec<&clap::Command> = vec![root];
        let mut index = 1;
        while index < args.len() {
            let token = args[index].to_string_lossy().to_string();
            let command = *chain.last().expect("the root at least");
            if token == "--" {
                break;
            }
            if let Some(long) = token.strip_prefix("--") {
                let (name, inline) = match long.split_once('=') {
                    Some((name, _)) => (name, true),
                    None => (long, false),
                };
                if let Some((depth, arg)) = find_in_chain(&chain, |a| a.get_long() == Some(name)) {
                    given[depth].push(arg.get_id().to_string());
                    if !inline && takes_value(arg) {
                        index += 1;
                    }
                }
            } else if token.len() > 1 && token.starts_with('-') {
                let short = token.chars().nth(1).expect("two characters");
                if let Some((depth, arg)) = find_in_chain(&chain, |a| a.get_short() == Some(short)) {
                    given[depth].push(arg.get_id().to_string());
                    if token.len() == 2 && takes_value(arg) {
                        index += 1;
                    }
                }
            } else if let Some(sub) = command.find_subcommand(&token) {
                path.push((sub.get_name().to_string(), index));
                chain.push(sub);
                given.push(Vec::new());
            }
            index += 1;
        }
        CommandLine { path, given }
    }
}

/// The flag matching `found` in the command chain, innermost first (global flags are the root's), with its depth.
fn find_in_chain<'a>(chain: &[&'a clap::Command], found: impl Fn(&Arg) -> bool) -> Option<(usize, &'a Arg)> {
    chain.iter().enumerate().rev().find_map(|(depth, c)| c.get_arguments().find(|a| found(a)).map(|a| (depth, a)))
}

fn takes_value(arg: &Arg) -> bool {
    arg.get_action().takes_values()
}

/// The arguments with each value of the file that the command line does not give added as its flag; `[kafka]` as
/// `-X` settings placed right after the command's name, so that the command line's own `-X` come later and win.
fn apply(root: &clap::Command, table: &toml::Table, used: &CommandLine, mut args: Vec<OsString>) -> Vec<OsString> {
    let mut chain: Vec<(&clap::Command, Option<&toml::Table>)> = vec![(root, Some(table))];
    for (name, _) in &used.path {
        let (command, section) = *chain.last().expect("the root at least");
        let sub = command.find_subcommand(name).expect("scanned from this tree");
        let inner = section.and_then(|t| t.get(sub.get_name())).and_then(toml::Value::as_table);
        chain.push((sub, inner));
    }
    let mut added = Vec::new();
    for (depth, (command, section)) in chain.iter().enumerate() {
        let Some(section) = section else { continue };
        for (key, value) in section.iter() {
            let Some(arg) = long_arg(command, key) else { continue };
            let id = arg.get_id().to_string();
            let given = used.given.get(depth).is_some_and(|g| g.contains(&id));
            let from_env = arg.get_env().is_some_and(|var| std::env::var_os(var).is_some_and(|v| !v.is_empty()));
            // A flag that conflicts with one given (`ledger` in the file, `--data` on the line) yields to it.
            let conflicts = chain.iter().any(|(c, _)| {
                c.get_arguments().filter(|other| used.given.iter().flatten().any(|g| g == other.get_id().as_str())).any(
                    |other| {
                        c.get_arg_conflicts_with(other).iter().any(|x| x.get_id() == arg.get_id())
                            || command.get_arg_conflicts_with(arg).iter().any(|x| x.get_id() == other.get_id())
                    },
                )
            });
            if given || from_env || conflicts {
                continue;
            }
            added.extend(flag_tokens(arg, value));
        }
    }
    let deepest = chain.last().expect("the root at least").0;
    let mut settings = Vec::new();
    if let Some(kafka) = table.get(KAFKA_TABLE).and_then(toml::Value::as_table)
        && deepest.get_arguments().any(|a| a.get_short() == Some('X'))
    {
        for (key, value) in kafka {
            settings.push(OsString::from("-X"));
            settings.push(OsString::from(format!("{key}={}", scalar(value))));
        }
    }
    let at = used.path.last().map_or(1, |(_, index)| index + 1);
    args.splice(at..at, settings);
    // Added flags go before a `--`, if any.
    let end = args.iter().position(|a| a == "--").unwrap_or(args.len());
    args.splice(end..end, added);
    args
}

/// The tokens setting `arg` to `value`: `--flag value`, `--flag` for true, nothing for false, one `--flag item` per
/// item of an array.
fn flag_tokens(arg: &Arg, value: &toml::Value) -> Vec<OsString> {
    let long = format!("--{}", arg.get_long().expect("found by its long name"));
    match value {
        toml::Value::Boolean(true) if matches!(arg.get_action(), ArgAction::SetTrue) => vec![long.into()],
        toml::Value::Boolean(false) if matches!(arg.get_action(), ArgAction::SetTrue) => Vec::new(),
        toml::Value::Array(items) => items.iter().flat_map(|item| [long.clone().into(), scalar(item).into()]).collect(),
        other => vec![long.into(), scalar(other).into()],
    }
}

/// A TOML value as the text a flag takes.
fn scalar(value: &toml::Value) -> String {
    match value {
        toml::Value::String(text) => text.clone(),
        toml::Value::Datetime(at) => at.to_string(),
        toml::Value::Integer(n) => n.to_string(),
        toml::Value::Float(x) => x.to_string(),
        toml::Value::Boolean(b) => b.to_string(),
        // Refused by `check_keys` before any value is used.
        toml::Value::Array(_) | toml::Value::Table(_) => String::new(),
    }
}

/// Whether a key names a secret, whose value `config check` never prints: librdkafka's passwords and secrets
/// (`sasl.password`, `ssl.key.password`, `sasl.oauthbearer.client.secret`), inline keys (`ssl.key.pem`) and JAAS.
pub fn is_secret(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    ["password", "secret", "jaas", "credential"].iter().any(|word| key.contains(word)) || key.ends_with(".key.pem")
}

/// Whether a flag carries a secret (a bearer token, a password), whatever it is called: its declaration says so by
/// hiding its environment variable's value from `--help` (`hide_env_values`), which every such flag must set
/// (`every_flag_named_for_a_secret_declares_it` holds the binary's flags to it); a key named for a secret counts too.
fn carries_secret(arg: &Arg, key: &str) -> bool {
    arg.is_hide_env_values_set() || is_secret(key)
}

/// A value as `config check` prints it: a secret's masked whole, and the password of a URL's credentials
/// (`registry-url = "http://user:secret@host"`) masked.
fn shown(secret: bool, value: &toml::Value, mask_url: &dyn Fn(&str, &str) -> String) -> String {
    if secret {
        return MASK.to_string();
    }
    mask_url(&scalar(value), MASK)
}

/// What a secret is shown as.
pub const MASK: &str = "********";

/// One resolved setting of a config file.
#[derive(Debug, serde::Serialize)]
pub struct Setting {
    /// Its dotted key (`serve.listen`, `kafka.sasl.password`).
    pub key: String,
    /// Its value, masked for a secret.
    pub value: String,
    /// Where it comes from when a command runs: the file, or the environment variable over it.
    pub source: String,
}

/// The config file to check: `config`, else [`CONFIG_ENV`]'s.
pub fn path_of(config: Option<&Path>) -> Option<PathBuf> {
    config.map(Path::to_path_buf).or_else(|| std::env::var_os(CONFIG_ENV).filter(|v| !v.is_empty()).map(PathBuf::from))
}

/// What the file at `path` resolves to for `command`, each key checked, secrets masked: a value of a key named for a
/// secret or of a flag that declares one whole ([`MASK`]), and in any other `mask_url(value, MASK)` (the password of
/// a URL's credentials, say).
pub fn settings(
    command: &clap::Command,
    path: &Path,
    mask_url: &dyn Fn(&str, &str) -> String,
) -> Result<Vec<Setting>, FlagFileError> {
    let table = checked(command, path)?;
    let mut settings = Vec::new();
    collect(command, &table, &mut Vec::new(), &mut settings, mask_url);
    Ok(settings)
}

/// Every setting of the file, by its dotted key, with where its value comes from when a command runs: the file, or
/// the environment variable that overrides it.
fn collect(
    command: &clap::Command,
    table: &toml::Table,
    path: &mut Vec<String>,
    out: &mut Vec<Setting>,
    mask_url: &dyn Fn(&str, &str) -> String,
) {
    for (key, value) in table {
        let dotted = path.iter().cloned().chain([key.clone()]).collect::<Vec<_>>().join(".");
        if path.is_empty() && key == KAFKA_TABLE {
            for (setting, value) in value.as_table().into_iter().flatten() {
                let shown = shown(is_secret(setting), value, mask_url);
                out.push(Setting { key: format!("{KAFKA_TABLE}.{setting}"), value: shown, source: "file (-X)".into() });
            }
            continue;
        }
        if let (Some(sub), Some(inner)) = (command.find_subcommand(key), value.as_table()) {
            path.push(key.clone());
            collect(sub, inner, path, out, mask_url);
            path.pop();
            continue;
        }
        let Some(arg) = long_arg(command, key) else { continue };
        let source = match arg.get_env().and_then(|var| std::env::var_os(var).filter(|v| !v.is_empty()).map(|_| var)) {
            Some(var) => format!("environment {} (over the file)", var.to_string_lossy()),
            None => "file".into(),
        };
        out.push(Setting { key: dotted, value: shown(carries_secret(arg, key), value, mask_url), source });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn command() -> clap::Command {
        clap::Command::new("q")
            .arg(Arg::new("ledger").long("ledger").global(true))
            .arg(Arg::new("data").long("data").global(true).conflicts_with("ledger"))
            .subcommand(
                clap::Command::new("ingest")
                    .arg(Arg::new("brokers").long("brokers"))
                    .arg(Arg::new("json").long("json").action(ArgAction::SetTrue))
                    .arg(Arg::new("topics").long("topics").action(ArgAction::Append))
                    .arg(Arg::new("settings").short('X').action(ArgAction::Append)),
            )
    }

    fn applied(file: &str, line: &[&str]) -> Vec<String> {
        let table: toml::Table = file.parse().unwrap();
        check_keys(&command(), &table, &[]).unwrap();
        let args: Vec<OsString> = line.iter().map(OsString::from).collect();
        let used = CommandLine::scan(&command(), &args);
        apply(&command(), &table, &used, args).into_iter().map(|a| a.into_string().unwrap()).collect()
    }

    #[test]
    fn the_file_fills_what_the_command_line_leaves_and_its_kafka_settings_come_first() {
        let file = "ledger = \"f.db\"\n[kafka]\n\"client.rack\" = \"file\"\n[ingest]\nbrokers = \"b:9092\"\njson = true\ntopics = [\"usage=u\", \"grants=g\"]\n";
        assert_eq!(
            applied(file, &["q", "ingest", "-X", "client.rack=line"]),
            [
                "q",
                "ingest",
                "-X",
                "client.rack=file",
                "-X",
                "client.rack=line",
                "--ledger",
                "f.db",
                "--brokers",
                "b:9092",
                "--json",
                "--topics",
                "usage=u",
                "--topics",
                "grants=g"
            ]
        );
        // Given on the line (before or after the command): the file's value is not added.
        assert_eq!(
            applied(file, &["q", "--ledger", "l.db", "ingest", "--brokers=x:1"]),
            [
                "q",
                "--ledger",
                "l.db",
                "ingest",
                "-X",
                "client.rack=file",
                "--brokers=x:1",
                "--json",
                "--topics",
                "usage=u",
                "--topics",
                "grants=g"
            ]
        );
        // A flag that conflicts with one given yields to it.
        assert!(!applied(file, &["q", "--data", "d", "ingest"]).contains(&"f.db".to_string()));
    }

    #[test]
    fn unknown_keys_are_refused_by_name() {
        for (file, named) in [
            ("[ingest]\nbrokerz = \"x\"", "`ingest.brokerz`"),
            ("[ingset]\nbrokers = \"x\"", "`ingset`"),
            ("ledgr = \"x\"", "`ledgr`"),
            ("[ingest]\nbrokers = { a = 1 }", "`ingest.brokers`"),
        ] {
            let table: toml::Table = file.parse().unwrap();
            let error = check_keys(&command(), &table, &[]).unwrap_err().to_string();
            assert!(error.contains(named), "{file:?}: {error}");
        }
    }

    #[test]
    fn secrets_are_known_by_their_names() {
        for secret in
            ["sasl.password", "ssl.key.password", "sasl.oauthbearer.client.secret", "ssl.key.pem", "sasl.jaas.config"]
        {
            assert!(is_secret(secret), "{secret}");
        }
        for plain in ["security.protocol", "sasl.username", "ssl.ca.location", "tokens"] {
            assert!(!is_secret(plain), "{plain}");
        }
    }

    #[test]
    fn a_flag_that_declares_a_secret_is_masked_whatever_its_name() {
        let bearer = Arg::new("status_token").long("status-token").env("QUOTA_LEDGER_TOKEN").hide_env_values(true);
        assert!(carries_secret(&bearer, "status-token"));
        let token = toml::Value::String("t-0123456789".into());
        assert_eq!(shown(carries_secret(&bearer, "status-token"), &token, &|v, _| v.to_string()), MASK);
        let path = Arg::new("tokens").long("tokens");
        assert!(!carries_secret(&path, "tokens"));
    }
}
