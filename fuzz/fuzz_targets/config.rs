//! The plugin configuration (the JSON in the Wasm filter's `configuration`) → parse/refuse.
//! Arbitrary bytes never panic; an accepted configuration satisfies every invariant `check`
//! promises (the filter relies on them) and builds a `Scorer` (base64 artifacts decoded and
//! validated) without panicking, and a registry policy that can be met. The first byte picks what the VM's environment holds, so
//! `"hash_key": {"env": …}` meets present, absent and too-short variables.
#![no_main]

use edgescore_core::config::{PluginConfig, SecretSource};
use edgescore_core::scorer::Scorer;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&env_kind, json)) = data.split_first() else { return };
    let env = |name: &str| match env_kind % 3 {
        0 => None,
        1 => Some(format!("key-for-{name}-0123456789")),
        _ => Some("short".to_string()),
    };
    let Ok(cfg) = PluginConfig::parse_with_env(json, &env) else { return };
    assert!(cfg.hash_key.len() >= 16, "accepted a hash key of {} bytes", cfg.hash_key.len());
    if let SecretSource::Env(name) = &cfg.hash_key_source {
        assert_eq!(Some(&cfg.hash_key), env(name).as_ref(), "the key is not the environment's");
    }
    assert!(!cfg.models.is_empty());
    assert!(cfg.models.iter().all(|m| m.threshold.is_finite()));
    assert!((0.0..=1.0).contains(&cfg.feature_log.sample_rate));
    assert_ne!(Some(&cfg.headers.scores), cfg.headers.decision.as_ref());
    assert!((10..=60_000).contains(&cfg.metrics.flush_ms));
    for h in std::iter::once(&cfg.headers.scores).chain(cfg.headers.decision.as_ref()) {
        assert!(!h.is_empty() && h.bytes().all(|b| !b.is_ascii_uppercase() && b.is_ascii_graphic()), "header name {h:?}");
    }
    if let Some(r) = &cfg.registry {
        // The poller's policy can be met, and every floor names a configured model.
        assert_eq!(r.policy().validate(), Ok(()));
        assert!(r.min_versions.keys().all(|n| cfg.models.iter().any(|m| m.name.as_ref() == Some(n))), "{:?}", r.min_versions);
    }
    let _ = Scorer::new(&cfg, 1);
});
