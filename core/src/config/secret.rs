//! A secret in the plugin configuration, written inline or named as an environment variable of
//! the Wasm VM, so that it can stay out of the configuration Envoy serves on its admin
//! endpoint (`/config_dump`) and out of the files that carry it.
//!
//! Envoy hands a VM the variables its `vm_config.environment_variables` lists: `key_values`
//! (literal values, e.g. filled in by the deployment's secret tooling) and `host_env_keys`
//! (names of Envoy's own environment variables to pass through). The module reads them with
//! WASI's `environ_get`, i.e. `std::env::var` on wasm32-wasip1. Each VM has its own list:
//! the registry's service VM needs the variable as well as the filter's VMs.

use super::error::ConfigError;
use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::Deserialize;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SecretSource {
    /// The secret itself.
    Inline(String),
    /// `{"env": "NAME"}`: the VM's environment variable NAME.
    Env(String),
}

impl SecretSource {
    /// The secret, looking environment variables up with `env` (`std::env::var` in the filter).
    pub fn resolve(&self, field: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<String, ConfigError> {
        match self {
            SecretSource::Inline(s) => Ok(s.clone()),
            SecretSource::Env(name) => env(name).ok_or_else(|| {
                ConfigError::new(
                    format!("{field}.env"),
                    format!("the Wasm VM has no environment variable `{name}` (list it in vm_config.environment_variables: key_values, or host_env_keys to pass Envoy's own)"),
                )
            }),
        }
    }
}

impl<'de> Deserialize<'de> for SecretSource {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = SecretSource;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str(r#"the secret as a string, or {"env": "NAME"} to read the VM's environment variable NAME"#)
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<SecretSource, E> {
                Ok(SecretSource::Inline(v.to_string()))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<SecretSource, A::Error> {
                let mut name: Option<String> = None;
                while let Some(key) = map.next_key::<String>()? {
                    if key != "env" {
                        return Err(de::Error::unknown_field(&key, &["env"]));
                    }
                    if name.replace(map.next_value()?).is_some() {
                        return Err(de::Error::duplicate_field("env"));
                    }
                }
                match name {
                    Some(n) if !n.is_empty() => Ok(SecretSource::Env(n)),
                    Some(_) => Err(de::Error::invalid_value(de::Unexpected::Str(""), &"an environment variable name")),
                    None => Err(de::Error::missing_field("env")),
                }
            }
        }
        d.deserialize_any(V)
    }
}
