//! The registry poller's decisions, without I/O: which manifest to accept, which artifacts to
//! fetch, which to refuse and what set to serve. The glue (the Wasm service VM, the native
//! module's main-thread poller) does the HTTP requests, hands each answer to [`Poll`] and
//! publishes what [`Next::Publish`] names to its workers; logs and metrics are the glue's too,
//! from the [`Refused`] list each step returns.

use crate::registry::{check_artifact, hash_key_id, Manifest, ManifestModel, ModelMode, Policy, Refusal};
use crate::config::PluginConfig;
use crate::features::FeatureSchema;
use crate::Model;
use std::collections::{BTreeMap, VecDeque};

/// One refusal: the manifest entry it concerns (`None` for the manifest itself) and why.
pub type Refused = (Option<ManifestModel>, Refusal);

/// A served (name, mode) with the bytes that passed every check.
pub type ServedSet = BTreeMap<(String, ModelMode), (ManifestModel, Vec<u8>)>;

/// What the glue does next.
pub enum Next {
    /// Nothing more this poll: the manifest was refused (see the [`Refused`] list).
    Idle,
    /// The manifest verified and the served set stays as it is; `new` when its sequence is
    /// newer than the last one accepted (a good poll either way).
    Current { sequence: u64, new: bool },
    /// GET this path on the registry cluster and hand the answer to [`Poll::artifact`].
    Fetch(String),
    /// Serve this set: publish it to the workers, then call [`Poll::commit`] (or drop it if
    /// publishing failed: the served set stays).
    Publish(Box<Plan>),
}

/// A manifest being applied: the artifacts still to fetch and the set accepted so far.
pub struct Plan {
    sequence: u64,
    queue: VecDeque<ManifestModel>,
    /// Starts from the served entries the manifest still lists.
    set: ServedSet,
    fetching: Option<ManifestModel>,
}

impl Plan {
    pub fn sequence(&self) -> u64 {
        self.sequence
    }
    pub fn set(&self) -> &ServedSet {
        &self.set
    }
}

/// The poller's state: what it serves and the high-water marks it will not go below (in memory;
/// the configured floors in its [`Policy`] hold across restarts).
pub struct Poll {
    policy: Policy,
    hash_key: Vec<u8>,
    hash_key_id: String,
    configured: Vec<String>,
    max_artifact_bytes: u64,
    artifact_base: String,
    served: ServedSet,
    last_sequence: Option<u64>,
    /// Highest version accepted per model name: versions never go backwards.
    high_water: BTreeMap<String, u64>,
    plan: Option<Plan>,
}

impl Poll {
    /// `None` when the configuration has no `registry`.
    pub fn new(cfg: &PluginConfig) -> Option<Poll> {
        let reg = cfg.registry.as_ref()?;
        Some(Poll {
            policy: reg.policy(),
            hash_key: cfg.hash_key.as_bytes().to_vec(),
            hash_key_id: hash_key_id(cfg.hash_key.as_bytes()),
            configured: cfg.models.iter().filter_map(|m| m.name.clone()).collect(),
            max_artifact_bytes: reg.max_artifact_bytes,
            artifact_base: reg.artifact_path(""),
            served: ServedSet::new(),
            last_sequence: None,
            high_water: BTreeMap::new(),
            plan: None,
        })
    }

    /// The set served now.
    pub fn served(&self) -> &ServedSet {
        &self.served
    }

    /// Whether a fetch is outstanding (the glue polls again only when this is false).
    pub fn busy(&self) -> bool {
        self.plan.is_some()
    }

    /// The manifest's answer: its bytes, or why there are none (unreachable, HTTP status).
    /// `now_s` is the host's wall clock, seconds since the Unix epoch: the manifest's expiry is
    /// checked against it on every poll, an unchanged manifest included.
    pub fn manifest(&mut self, answer: Result<Vec<u8>, String>, now_s: u64, refused: &mut Vec<Refused>) -> Next {
        self.plan = None;
        let body = match answer {
            Ok(b) => b,
            Err(why) => {
                refused.push((None, Refusal::Unreachable(format!("manifest: {why}"))));
                return Next::Idle;
            }
        };
        let manifest = match self.policy.verify(&body, now_s) {
            Ok(m) => m,
            Err(r) => {
                refused.push((None, r));
                return Next::Idle;
            }
        };
        match self.last_sequence {
            Some(last) if manifest.sequence < last => {
                refused.push((None, Refusal::Rollback { name: "manifest sequence".into(), have: last, got: manifest.sequence }));
                return Next::Idle;
            }
            Some(last) if manifest.sequence == last => return Next::Current { sequence: last, new: false },
            _ => {}
        }
        let queue = self.queue(&manifest, refused);
        // The manifest lists the whole set: a served (name, mode) it no longer lists stops
        // being served (the shadow a promotion drops; an active name falls back to its
        // bootstrap artifact, if any). One it lists keeps its version until the new one passes.
        let set = self
            .served
            .iter()
            .filter(|((name, mode), _)| manifest.models.iter().any(|e| e.name == *name && e.mode == *mode))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        self.next(Plan { sequence: manifest.sequence, queue, set, fetching: None })
    }

    /// The entries of `manifest` to fetch: configured, new, and not below a configured minimum
    /// or a high-water mark.
    fn queue(&self, manifest: &Manifest, refused: &mut Vec<Refused>) -> VecDeque<ManifestModel> {
        let mut queue = VecDeque::new();
        for entry in &manifest.models {
            if !self.configured.contains(&entry.name) {
                let why = format!("no model named `{}` in the filter's configuration (models[].name)", entry.name);
                refused.push((Some(entry.clone()), Refusal::SchemaMismatch(why)));
                continue;
            }
            let current = self.served.get(&(entry.name.clone(), entry.mode));
            if current.is_some_and(|(c, _)| c.version == entry.version && c.sha256 == entry.sha256) {
                continue;
            }
            if let Err(r) = self.policy.check_entry(entry) {
                refused.push((Some(entry.clone()), r));
                continue;
            }
            let high = self.high_water.get(&entry.name).copied().unwrap_or(0);
            // A version equal to the high-water mark is allowed once more in the other mode
            // (a shadow promoted by re-publishing is a new, higher version anyway).
            if entry.version < high || current.is_some_and(|(c, _)| entry.version <= c.version) {
                refused.push((Some(entry.clone()), Refusal::Rollback { name: entry.name.clone(), have: high, got: entry.version }));
                continue;
            }
            queue.push_back(entry.clone());
        }
        queue
    }

    /// The answer to the last [`Next::Fetch`] (an error when the request could not be sent
    /// or failed: the entry is refused as unreachable and the plan goes on).
    pub fn artifact(&mut self, answer: Result<Vec<u8>, String>, refused: &mut Vec<Refused>) -> Next {
        let Some(mut plan) = self.plan.take() else { return Next::Idle };
        let Some(entry) = plan.fetching.take() else { return Next::Idle };
        match answer.map_err(|why| Refusal::Unreachable(format!("{}: {why}", entry.artifact))).and_then(|bytes| self.check(&entry, bytes)) {
            Ok(bytes) => {
                plan.set.insert((entry.name.clone(), entry.mode), (entry, bytes));
            }
            Err(r) => refused.push((Some(entry), r)),
        }
        self.next(plan)
    }

    fn next(&mut self, mut plan: Plan) -> Next {
        if let Some(entry) = plan.queue.pop_front() {
            let path = format!("{}{}", self.artifact_base, entry.artifact);
            plan.fetching = Some(entry);
            self.plan = Some(plan);
            return Next::Fetch(path);
        }
        let unchanged = plan.set.len() == self.served.len()
            && plan.set.iter().all(|(k, (e, _))| self.served.get(k).is_some_and(|(c, _)| c.version == e.version && c.sha256 == e.sha256));
        if unchanged {
            self.last_sequence = Some(plan.sequence);
            return Next::Current { sequence: plan.sequence, new: true };
        }
        Next::Publish(Box::new(plan))
    }

    /// `plan` was published to the workers: it is the served set now. Returns how many of its
    /// models are new versions.
    pub fn commit(&mut self, plan: Plan) -> usize {
        let fresh = plan.set.iter().filter(|(k, (e, _))| self.served.get(k).is_none_or(|(c, _)| c.version != e.version)).count();
        for (e, _) in plan.set.values() {
            let high = self.high_water.entry(e.name.clone()).or_insert(0);
            *high = (*high).max(e.version);
        }
        self.served = plan.set;
        self.last_sequence = Some(plan.sequence);
        fresh
    }

    /// Everything but the signature, which covered the entry: size, SHA-256, validation, name,
    /// schema hash, hash key, golden rows (`check_artifact`), then whether this filter's
    /// feature catalogue computes every feature the model reads.
    fn check(&self, entry: &ManifestModel, bytes: Vec<u8>) -> Result<Vec<u8>, Refusal> {
        let model: Model = check_artifact(entry, &bytes, self.max_artifact_bytes, Some(&self.hash_key_id))?;
        FeatureSchema::new(&self.hash_key)
            .admit(model.ensemble())
            .map_err(|err| Refusal::SchemaMismatch(format!("{} v{}: {err}", entry.name, entry.version)))?;
        Ok(bytes)
    }
}

/// `entry` as log lines name it: `bot v7 (shadow)`; `manifest` for the manifest itself.
pub fn refused_what(entry: Option<&ManifestModel>) -> String {
    entry.map_or_else(|| "manifest".to_string(), |e| format!("{} v{} ({})", e.name, e.version, if e.mode == ModelMode::Shadow { "shadow" } else { "active" }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::tests::{entry, manifest, signed_manifest, signing, EXPIRES, PUBLISHED, XGB};
    use crate::registry::public_key_file;

    /// A poller for the seed model's name, trusting `signing(1)`, with `extra` registry settings.
    fn poller(extra: &str) -> Poll {
        let public = public_key_file(&signing(1).verifying_key());
        let name = Model::load(XGB).unwrap().ensemble().name().to_string();
        let json = format!(
            r#"{{"hash_key":"0123456789abcdef","models":[{{"name":"{name}","threshold":0.5}}],
                "registry":{{"cluster":"registry","public_keys":[{public}]{extra}}}}}"#
        );
        Poll::new(&PluginConfig::parse(json.as_bytes()).unwrap()).unwrap()
    }

    fn reasons(refused: &[Refused]) -> Vec<&'static str> {
        refused.iter().map(|(_, r)| r.reason()).collect()
    }

    #[test]
    fn an_unchanged_manifest_is_refused_once_it_expires() {
        let mut poll = poller("");
        let env = signed_manifest(&manifest(vec![]), &signing(1));
        let mut refused = Vec::new();
        assert!(matches!(poll.manifest(Ok(env.clone()), PUBLISHED, &mut refused), Next::Current { sequence: 3, new: true }));
        assert!(matches!(poll.manifest(Ok(env.clone()), EXPIRES - 1, &mut refused), Next::Current { sequence: 3, new: false }));
        assert!(refused.is_empty());
        // The same bytes a second later: a frozen registry shows up as a refusal every poll.
        assert!(matches!(poll.manifest(Ok(env.clone()), EXPIRES, &mut refused), Next::Idle));
        assert!(matches!(poll.manifest(Ok(env), EXPIRES + 10, &mut refused), Next::Idle));
        assert_eq!(reasons(&refused), ["expired", "expired"]);
        assert!(refused.iter().all(|(entry, _)| entry.is_none()));
    }

    #[test]
    fn a_restarted_poller_holds_the_configured_floors() {
        let name = Model::load(XGB).unwrap().ensemble().name().to_string();
        let at = |version: u64| signed_manifest(&manifest(vec![entry(XGB, ModelMode::Active, version)]), &signing(1));
        // A fresh poller (nothing accepted, no high-water mark) below min_sequence.
        let mut refused = Vec::new();
        let mut poll = poller(r#","min_sequence":4"#);
        assert!(matches!(poll.manifest(Ok(at(1)), PUBLISHED, &mut refused), Next::Idle));
        assert_eq!(reasons(&refused), ["below_minimum"]);
        // Below min_versions: the entry is refused before any fetch, the served set stays.
        let mut refused = Vec::new();
        let mut poll = poller(&format!(r#","min_sequence":3,"min_versions":{{"{name}":2}}"#));
        assert!(matches!(poll.manifest(Ok(at(1)), PUBLISHED, &mut refused), Next::Current { sequence: 3, new: true }));
        assert_eq!(reasons(&refused), ["below_minimum"]);
        assert_eq!(refused[0].0.as_ref().map(|e| e.version), Some(1));
        assert!(poll.served().is_empty());
        // At the floor: fetched.
        let mut refused = Vec::new();
        let mut poll = poller(&format!(r#","min_versions":{{"{name}":2}}"#));
        assert!(matches!(poll.manifest(Ok(at(2)), PUBLISHED, &mut refused), Next::Fetch(_)));
        assert!(refused.is_empty());
    }
}
