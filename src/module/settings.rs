//! The `rdmasync.*` module configs: the load arguments as Redis configs.
//! `CONFIG GET` shows the values in effect; `CONFIG SET` changes the peer's
//! address at run time (the link re-dials) and refuses changes of everything
//! else (the value in effect may be set again).

use redis_module::configuration::{
    register_string_configuration, ConfigurationContext, ConfigurationFlags, ConfigurationValue,
};
use redis_module::{Context, RedisError, RedisString};

use crate::error::Error;
use crate::ops::config::{self, ARG_NAMES, RUNTIME_ARGS};
use crate::{redis::server, runtime, shared};

/// One config: its value as text, checked on every run-time change.
pub struct Setting {
    name: &'static str,
    value: std::sync::Mutex<String>,
}

impl Setting {
    const fn new(name: &'static str) -> Self {
        Self {
            name,
            value: std::sync::Mutex::new(String::new()),
        }
    }

    fn get_text(&self) -> String {
        self.value.lock().map(|v| v.clone()).unwrap_or_default()
    }

    fn set_text(&self, text: String) {
        if let Ok(mut v) = self.value.lock() {
            *v = text;
        }
    }
}

impl ConfigurationValue<RedisString> for Setting {
    fn get(&self, _ctx: &ConfigurationContext) -> RedisString {
        RedisString::create(None, self.get_text().as_str())
    }

    fn set(&self, _ctx: &ConfigurationContext, val: RedisString) -> Result<(), RedisError> {
        let text = val.to_string_lossy();
        if shared::is_running() && !RUNTIME_ARGS.contains(&self.name) {
            // Fixed while loaded; setting the value in effect changes nothing
            // (as CONFIG SET of an unchanged value does for Redis's own).
            if text == self.get_text() {
                return Ok(());
            }
            return Err(RedisError::String(format!(
                "ERR rdmasync.{} is immutable while the module is loaded: reload the module \
                 to change it",
                self.name
            )));
        }
        if shared::is_running() {
            // A run-time change (load-time values are checked together at load).
            config::check_value(self.name, &text).map_err(|e| RedisError::String(e.to_string()))?;
            self.set_text(text);
            let peer = (SETTINGS[0].get_text(), SETTINGS[1].get_text());
            runtime::change_peer(&peer.0, peer.1.parse().unwrap_or(0));
        } else {
            self.set_text(text);
        }
        Ok(())
    }
}

/// The configs, in [`ARG_NAMES`] order.
pub static SETTINGS: [Setting; ARG_NAMES.len()] = [
    Setting::new(ARG_NAMES[0]),
    Setting::new(ARG_NAMES[1]),
    Setting::new(ARG_NAMES[2]),
    Setting::new(ARG_NAMES[3]),
    Setting::new(ARG_NAMES[4]),
    Setting::new(ARG_NAMES[5]),
    Setting::new(ARG_NAMES[6]),
    Setting::new(ARG_NAMES[7]),
    Setting::new(ARG_NAMES[8]),
    Setting::new(ARG_NAMES[9]),
    Setting::new(ARG_NAMES[10]),
    Setting::new(ARG_NAMES[11]),
    Setting::new(ARG_NAMES[12]),
    Setting::new(ARG_NAMES[13]),
    Setting::new(ARG_NAMES[14]),
    Setting::new(ARG_NAMES[15]),
    Setting::new(ARG_NAMES[16]),
    Setting::new(ARG_NAMES[17]),
    Setting::new(ARG_NAMES[18]),
    Setting::new(ARG_NAMES[19]),
    Setting::new(ARG_NAMES[20]),
];

/// Registers the configs, defaulting to the load arguments; `MODULE LOADEX
/// ... CONFIG` and redis.conf `rdmasync.*` lines override them. Returns the
/// merged arguments to parse. The secret is not a config (`CONFIG GET`
/// must never show it): it passes from the arguments straight through.
///
/// # Errors
/// [`Error::Config`] for malformed, unknown or repeated arguments.
pub fn register(ctx: &Context, args: &[String]) -> Result<Vec<String>, Error> {
    let given = config::split_args(args)?;
    for setting in &SETTINGS {
        let default = given
            .iter()
            .find(|(n, _)| n == setting.name)
            .map_or("", |(_, v)| v.as_str());
        // Mutable for Redis: `set` refuses changes of the fixed ones, and
        // setting any to its value in effect succeeds (tools that set every
        // config back to what CONFIG GET said, as Redis's own tests do, work).
        let flags = ConfigurationFlags::DEFAULT;
        register_string_configuration(ctx, setting.name, setting, default, flags, None);
    }
    if !server::load_configs(ctx) {
        ctx.log_warning("rdmasync: RedisModule_LoadConfigs failed; using the load arguments only");
    }
    let mut merged: Vec<String> = SETTINGS
        .iter()
        .filter_map(|s| {
            let v = s.get_text();
            let given_empty = given.iter().any(|(n, gv)| n == s.name && gv.is_empty());
            (!v.is_empty() || given_empty).then(|| format!("{}={v}", s.name))
        })
        .collect();
    merged.extend(
        given
            .iter()
            .filter(|(n, _)| n == config::SECRET_ARG)
            .map(|(n, v)| format!("{n}={v}")),
    );
    Ok(merged)
}

/// Shows the values in effect (defaults and the derived node id included).
pub fn show_effective(values: [String; ARG_NAMES.len()]) {
    for (setting, value) in SETTINGS.iter().zip(values) {
        setting.set_text(value);
    }
}
