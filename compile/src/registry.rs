//! `edgescore keygen`, `publish`, `renew`, `cosign` and `verify`: the publisher's side of the
//! signed model registry (`docs/registry.md`). The formats and every check live in
//! `edgescore_core::registry`, so `verify` accepts exactly what the filter accepts.

use anyhow::{bail, Context, Result};
use crate::rows;
use ed25519_dalek::SigningKey;
use edgescore_core::registry::{
    self, check_artifact, cosign_envelope, default_golden_inputs, format_utc, golden_rows, hash_key_id, open_envelope, parse_public_key,
    parse_secret_key, public_key_file, secret_key_file, sha256_hex, sign_envelope, verify_signatures, Manifest, ManifestModel, ModelMode,
    Policy, PublicKey, Signed, DEFAULT_MAX_VALIDITY_S, MANIFEST_FILE, MANIFEST_FORMAT, MAX_GOLDEN_ROWS, VALIDITY_RANGE_S,
};
use edgescore_core::Model;
use std::ffi::OsString;
use std::fs::{self, File, OpenOptions};
use std::io::{ErrorKind, Write};
use std::path::{Path, PathBuf};

/// `NAME` + `suffix` (`NAME` may hold dots: `team.2026` → `team.2026.key`).
fn with_suffix(name: &Path, suffix: &str) -> PathBuf {
    let mut s: OsString = name.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

/// The first 12 hex digits, for one-line reports.
fn short(sha: &str) -> String {
    format!("{}…", &sha[..12.min(sha.len())])
}

/// `edgescore keygen -o NAME`: `NAME.key` (secret, mode 0600) and `NAME.pub`.
pub fn keygen(name: &Path) -> Result<()> {
    let (key_path, pub_path) = (with_suffix(name, ".key"), with_suffix(name, ".pub"));
    for p in [&key_path, &pub_path] {
        if p.exists() {
            bail!("{} already exists: refusing to overwrite a key", p.display());
        }
    }
    let mut seed = [0u8; 32];
    getrandom::fill(&mut seed).map_err(|e| anyhow::anyhow!("cannot get random bytes from the operating system: {e}"))?;
    let key = ed25519_dalek::SigningKey::from_bytes(&seed);
    seed.fill(0);
    let secret = secret_key_file(&key);
    let mut options = OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut f = options.open(&key_path).with_context(|| format!("cannot create {}", key_path.display()))?;
    // The mode above is filtered by the umask; make it exactly 0600 either way.
    #[cfg(unix)]
    f.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(0o600))
        .with_context(|| format!("cannot restrict {} to mode 0600", key_path.display()))?;
    f.write_all(secret.as_bytes()).and_then(|_| f.sync_all()).with_context(|| format!("cannot write {}", key_path.display()))?;
    let written = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&pub_path)
        .and_then(|mut p| p.write_all(public_key_file(&key.verifying_key()).as_bytes()));
    if let Err(e) = written {
        let _ = fs::remove_file(&key_path);
        return Err(e).with_context(|| format!("cannot write {}", pub_path.display()));
    }
    let id = registry::key_id(key.verifying_key().as_bytes());
    println!("generated {id} -> {} (secret, mode 0600), {}", key_path.display(), pub_path.display());
    Ok(())
}

/// How long a manifest `publish` and `renew` sign stays valid unless told otherwise.
pub const DEFAULT_VALID_FOR: &str = "7d";

/// `7d`, `12h`, `90m`, `3600s`, `2w`, or a bare number of seconds, as seconds (`--valid-for`,
/// `--max-validity`).
pub fn parse_duration(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let (digits, unit) = text.split_at(text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len()));
    let scale = match unit {
        "" | "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        "w" => 7 * 86_400,
        _ => return Err(format!("{text:?} is not a duration: a number and one of s, m, h, d, w (`7d`)")),
    };
    let n: u64 = digits.parse().map_err(|_| format!("{text:?} is not a duration: a number and one of s, m, h, d, w (`7d`)"))?;
    n.checked_mul(scale).ok_or_else(|| format!("{text:?} is too long"))
}

/// What `publish` was asked to do.
pub struct Publish {
    pub artifact: PathBuf,
    pub registry: PathBuf,
    /// One or more secret keys: each signs the new manifest.
    pub keys: Vec<PathBuf>,
    /// Seconds from now to the manifest's `expires`.
    pub valid_for_s: u64,
    pub shadow: bool,
    pub hash_key_file: Option<PathBuf>,
    pub golden_csv: Option<PathBuf>,
}

/// What `renew` was asked to do.
pub struct Renew {
    pub registry: PathBuf,
    pub keys: Vec<PathBuf>,
    pub valid_for_s: u64,
}

/// A key that signs: the secret and its public half.
struct Signer {
    key: SigningKey,
    public: PublicKey,
}

/// The secret keys at `paths`, each once (a key given twice signs once).
fn read_signers(paths: &[PathBuf]) -> Result<Vec<Signer>> {
    let mut signers: Vec<Signer> = Vec::new();
    for path in paths {
        let text = fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
        let key = parse_secret_key(&text).with_context(|| format!("{} is not an edgescore secret key", path.display()))?;
        let public = PublicKey::from_bytes(key.verifying_key().as_bytes())?;
        if !signers.iter().any(|s| s.public.key_id == public.key_id) {
            signers.push(Signer { key, public });
        }
    }
    if signers.is_empty() {
        bail!("no --key given: a manifest needs at least one signature");
    }
    Ok(signers)
}

fn key_ids(signers: &[Signer]) -> String {
    signers.iter().map(|s| s.public.key_id.as_str()).collect::<Vec<_>>().join(", ")
}

/// `valid_for_s` is a validity a reader can be configured to accept.
fn check_valid_for(valid_for_s: u64) -> Result<()> {
    if !VALIDITY_RANGE_S.contains(&valid_for_s) {
        bail!(
            "--valid-for {valid_for_s} s is not {}..={} s (a minute to 366 days, the validities a reader can be configured to accept)",
            VALIDITY_RANGE_S.start(),
            VALIDITY_RANGE_S.end()
        );
    }
    if valid_for_s > DEFAULT_MAX_VALIDITY_S {
        eprintln!(
            "edgescore: note: valid for {valid_for_s} s, longer than the {DEFAULT_MAX_VALIDITY_S} s readers accept unless their registry.max_validity_s says more"
        );
    }
    Ok(())
}

/// Seconds since the Unix epoch, now.
fn now_s() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

/// A file that is removed when dropped unless `keep` was called: the manifest's temporary
/// file, which is also the publish lock (created with `create_new`).
struct TempFile {
    path: PathBuf,
    file: Option<File>,
}

impl TempFile {
    fn create_new(path: PathBuf) -> std::io::Result<TempFile> {
        let file = OpenOptions::new().write(true).create_new(true).open(&path)?;
        Ok(TempFile { path, file: Some(file) })
    }

    /// Writes `bytes`, syncs them, and renames the file to `to` (then syncs the directory).
    fn commit(mut self, bytes: &[u8], to: &Path) -> Result<()> {
        let mut f = self.file.take().expect("not committed yet");
        f.write_all(bytes).and_then(|_| f.sync_all()).with_context(|| format!("cannot write {}", self.path.display()))?;
        drop(f);
        fs::rename(&self.path, to).with_context(|| format!("cannot rename {} to {}", self.path.display(), to.display()))?;
        self.path = PathBuf::new();
        sync_dir(to);
        Ok(())
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        if !self.path.as_os_str().is_empty() {
            let _ = fs::remove_file(&self.path);
        }
    }
}

/// Makes a rename durable: syncs the directory holding `path` (best effort).
fn sync_dir(path: &Path) {
    if let Some(dir) = path.parent() {
        let dir = if dir.as_os_str().is_empty() { Path::new(".") } else { dir };
        if let Ok(d) = File::open(dir) {
            let _ = d.sync_all();
        }
    }
}

/// Writes `bytes` to `path` through a temporary file and a rename, so a reader sees the whole
/// file or none.
fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = with_suffix(path, ".tmp");
    let _ = fs::remove_file(&tmp);
    TempFile::create_new(tmp.clone()).with_context(|| format!("cannot create {}", tmp.display()))?.commit(bytes, path)
}

/// `edgescore publish`.
pub fn publish(p: Publish) -> Result<()> {
    let signers = read_signers(&p.keys)?;
    check_valid_for(p.valid_for_s)?;

    let bytes = fs::read(&p.artifact).with_context(|| format!("cannot read {}", p.artifact.display()))?;
    let model = Model::load(&bytes).with_context(|| format!("{} is not a valid artifact", p.artifact.display()))?;
    let e = model.ensemble();
    let name = e.name().to_string();
    if name.is_empty() || name.chars().any(char::is_control) {
        bail!("{} has no usable model name ({name:?}): compile it with --name", p.artifact.display());
    }
    let hash_key = match &p.hash_key_file {
        None => None,
        Some(f) => {
            let text = fs::read_to_string(f).with_context(|| format!("cannot read {}", f.display()))?;
            let k = text.trim();
            let min = edgescore_core::features::hash::MIN_KEY_LEN;
            if k.len() < min {
                bail!("{}: the hash key is {} bytes, the filter needs at least {min}", f.display(), k.len());
            }
            Some(hash_key_id(k.as_bytes()))
        }
    };
    let inputs: Vec<Vec<Option<f32>>> = match &p.golden_csv {
        None => default_golden_inputs(&e),
        Some(csv) => {
            let rows = rows::read_rows(csv, &e)?;
            if rows.is_empty() || rows.len() > MAX_GOLDEN_ROWS {
                bail!("{}: {} rows; golden rows must be 1 to {MAX_GOLDEN_ROWS}", csv.display(), rows.len());
            }
            rows.iter().map(|r| r.iter().map(|&v| (!v.is_nan()).then_some(v)).collect()).collect()
        }
    };
    let golden = golden_rows(&e, &inputs);

    let artifacts = p.registry.join(registry::ARTIFACTS_DIR);
    fs::create_dir_all(&artifacts).with_context(|| format!("cannot create {}", artifacts.display()))?;
    let sha = sha256_hex(&bytes);
    let mode = if p.shadow { ModelMode::Shadow } else { ModelMode::Active };
    let mut version = 0;
    let (manifest, manifest_path) = resign(&p.registry, &signers, p.valid_for_s, |manifest| {
        // The artifact first, durable before any manifest names it.
        let dest = p.registry.join(registry::artifact_path(&sha));
        let present = fs::read(&dest).map(|b| sha256_hex(&b) == sha).unwrap_or(false);
        if !present {
            write_atomic(&dest, &bytes)?;
        }
        version = manifest.max_version(&name) + 1;
        manifest.models.retain(|m| {
            let same_slot = m.name == name && m.mode == mode;
            // Publishing active what the shadow runs is a promotion: the shadow entry goes.
            let promoted = mode == ModelMode::Active && m.name == name && m.mode == ModelMode::Shadow && m.sha256 == sha;
            !(same_slot || promoted)
        });
        manifest.models.push(ManifestModel::of_artifact(&bytes, &e, version, mode, hash_key, golden));
        manifest.models.sort_by(|a, b| (&a.name, a.mode).cmp(&(&b.name, b.mode)));
        Ok(())
    })?;
    println!(
        "published {name} v{version} ({}) sha256 {} seq {} -> {}",
        mode.as_str(),
        short(&sha),
        manifest.sequence,
        manifest_path.display()
    );
    Ok(())
}

/// `edgescore renew`: the same models, re-signed with a new `published_at` and `expires` and
/// the next sequence, so a registry stays fresh without a publish (from cron).
pub fn renew(r: Renew) -> Result<()> {
    let signers = read_signers(&r.keys)?;
    check_valid_for(r.valid_for_s)?;
    if !r.registry.join(MANIFEST_FILE).is_file() {
        bail!("{}: no manifest to renew (publish a model first)", r.registry.join(MANIFEST_FILE).display());
    }
    let (manifest, path) = resign(&r.registry, &signers, r.valid_for_s, |_| Ok(()))?;
    println!(
        "renewed seq {} ({} model(s)), expires {}, signed by {} -> {}",
        manifest.sequence,
        manifest.models.len(),
        manifest.expires.as_deref().unwrap_or_default(),
        key_ids(&signers),
        path.display()
    );
    Ok(())
}

/// `edgescore cosign`: adds a signature by each key to the current manifest, its payload
/// unchanged, for readers that require k of n signatures. Refuses a manifest that does not parse
/// or has expired (renew it first).
pub fn cosign(dir: &Path, keys: &[PathBuf]) -> Result<()> {
    let signers = read_signers(keys)?;
    let path = dir.join(MANIFEST_FILE);
    if !path.is_file() {
        bail!("{}: no manifest to co-sign", path.display());
    }
    let lock = take_lock(&path)?;
    let mut bytes = fs::read(&path).with_context(|| format!("cannot read {}", path.display()))?;
    let refuse = |r: registry::Refusal| anyhow::anyhow!("{}: {r}: refusing to co-sign it", path.display());
    let m = Manifest::parse(&open_envelope(&bytes).map_err(refuse)?.payload).map_err(refuse)?;
    let now = now_s();
    if m.expires_s().is_some_and(|at| now >= at) {
        bail!("{}: the manifest expired at {}: renew it (`edgescore renew`), then co-sign the renewed one", path.display(), m.expires.as_deref().unwrap_or_default());
    }
    for s in &signers {
        bytes = cosign_envelope(&bytes, &s.key).map_err(refuse)?;
    }
    let signed = open_envelope(&bytes).context("the co-signed envelope does not open (bug)")?;
    for s in &signers {
        verify_signatures(&signed, std::slice::from_ref(&s.public), 1).context("a new co-signature does not verify (bug)")?;
    }
    lock.commit(&bytes, &path)?;
    let models: Vec<String> = m.models.iter().map(|e| format!("{}{}", e.label(), if e.mode == ModelMode::Shadow { " (shadow)" } else { "" })).collect();
    println!(
        "co-signed seq {} [{}], expires {}, by {}: {} signature(s) -> {}",
        m.sequence,
        models.join(", "),
        m.expires.as_deref().unwrap_or("never"),
        key_ids(&signers),
        signed.signatures.len(),
        path.display()
    );
    Ok(())
}

/// The publish lock: `manifest.json.tmp`, created exclusively; committing it replaces the
/// manifest atomically.
fn take_lock(manifest_path: &Path) -> Result<TempFile> {
    let tmp_path = with_suffix(manifest_path, ".tmp");
    TempFile::create_new(tmp_path.clone()).map_err(|err| match err.kind() {
        ErrorKind::AlreadyExists => anyhow::anyhow!(
            "{} exists: another publish is running (remove the file if a previous publish was interrupted)",
            tmp_path.display()
        ),
        _ => anyhow::Error::new(err).context(format!("cannot create {}", tmp_path.display())),
    })
}

/// Under the lock: reads the current manifest (or starts an empty one), lets `edit` change its
/// models, then gives it the next sequence, `published_at` now and `expires` `valid_for_s`
/// later, signs it with every signer and replaces the manifest atomically. Returns the new
/// manifest and its path.
fn resign(dir: &Path, signers: &[Signer], valid_for_s: u64, edit: impl FnOnce(&mut Manifest) -> Result<()>) -> Result<(Manifest, PathBuf)> {
    let manifest_path = dir.join(MANIFEST_FILE);
    let lock = take_lock(&manifest_path)?;
    let mut manifest = read_existing(&manifest_path, signers)?;
    edit(&mut manifest)?;
    let now = now_s();
    manifest.format = MANIFEST_FORMAT;
    manifest.sequence += 1;
    manifest.published_at = format_utc(now);
    manifest.expires = Some(format_utc(now + valid_for_s));
    manifest.check().context("the new manifest does not check (bug)")?;
    let mut envelope = sign_envelope(&manifest.to_json(), &signers[0].key);
    for s in &signers[1..] {
        envelope = cosign_envelope(&envelope, &s.key).context("cannot add a signature (bug)")?;
    }
    let policy = Policy {
        threshold: signers.len(),
        max_validity_s: valid_for_s,
        ..Policy::new(signers.iter().map(|s| s.public.clone()).collect())
    };
    policy.verify(&envelope, now).context("the new manifest does not verify (bug)")?;
    lock.commit(&envelope, &manifest_path)?;
    Ok((manifest, manifest_path))
}

/// The registry's current manifest, or an empty one. Each signature by one of `signers` must
/// verify (else someone altered it: refuse to sign over it). One signed by other keys only (a
/// key rotation) is read for its sequence and versions and re-signed, with a note; other keys'
/// co-signatures are not carried over (they covered the old payload), with a note too.
fn read_existing(path: &Path, signers: &[Signer]) -> Result<Manifest> {
    let bytes = match fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == ErrorKind::NotFound => {
            return Ok(Manifest { format: MANIFEST_FORMAT, sequence: 0, published_at: String::new(), expires: None, models: Vec::new() })
        }
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
    };
    let refuse = |r: registry::Refusal| anyhow::anyhow!("{}: {r}: refusing to publish over it", path.display());
    let signed: Signed = open_envelope(&bytes).map_err(refuse)?;
    let signed_by = |s: &Signer| signed.signatures.iter().any(|g| g.key_id == s.public.key_id);
    for s in signers.iter().filter(|s| signed_by(s)) {
        verify_signatures(&signed, std::slice::from_ref(&s.public), 1).map_err(refuse)?;
    }
    let m = Manifest::parse(&signed.payload).map_err(refuse)?;
    let mut others: Vec<&str> = Vec::new();
    for g in &signed.signatures {
        if !signers.iter().any(|s| s.public.key_id == g.key_id) && !others.contains(&g.key_id.as_str()) {
            others.push(&g.key_id);
        }
    }
    if !signers.iter().any(signed_by) {
        eprintln!(
            "edgescore: note: {} was signed by {} (not by {}); its entries are kept and re-signed",
            path.display(),
            if others.is_empty() { "no key".to_string() } else { others.join(", ") },
            key_ids(signers)
        );
    } else if !others.is_empty() {
        eprintln!(
            "edgescore: note: {} was also signed by {}: those signatures covered the old manifest and are dropped; have them co-sign the new one (`edgescore cosign`)",
            path.display(),
            others.join(", ")
        );
    }
    Ok(m)
}

/// What `verify` requires of the manifest, as a reader's `registry` configuration would.
pub struct VerifyPolicy {
    /// Distinct keys of `--pub` that must sign.
    pub threshold: usize,
    pub max_validity_s: u64,
}

/// `edgescore verify`: every check a poller makes, offline, at the current time. Prints one
/// line per model; each problem is one `edgescore: error:` line, and the command fails when
/// there is any.
pub fn verify(dir: &Path, pubs: &[PathBuf], hash_key_file: Option<&Path>, max_bytes: Option<u64>, wants: VerifyPolicy) -> Result<()> {
    let mut keys = Vec::new();
    for p in pubs {
        let text = fs::read_to_string(p).with_context(|| format!("cannot read {}", p.display()))?;
        keys.push(parse_public_key(&text).with_context(|| format!("{} is not an edgescore public key", p.display()))?);
    }
    let policy = Policy { threshold: wants.threshold, max_validity_s: wants.max_validity_s, ..Policy::new(keys) };
    policy.validate().map_err(|e| match e {
        registry::PolicyError::Validity(_) => anyhow::anyhow!("--max-validity: {e}"),
        _ => anyhow::anyhow!("--threshold: {e}"),
    })?;
    let hash_key = match hash_key_file {
        Some(f) => Some(hash_key_id(fs::read_to_string(f).with_context(|| format!("cannot read {}", f.display()))?.trim().as_bytes())),
        None => None,
    };
    let path = dir.join(MANIFEST_FILE);
    let bytes = fs::read(&path).with_context(|| format!("cannot read {}", path.display()))?;
    let mut problems: Vec<String> = Vec::new();
    let (manifest, trusted) = match open_envelope(&bytes) {
        Err(r) => {
            problems.push(format!("{}: {r}", path.display()));
            (None, false)
        }
        Ok(signed) => {
            let by = policy.signatures(&signed).map_err(|r| problems.push(format!("{}: {r}", path.display()))).ok();
            match Manifest::parse(&signed.payload) {
                Ok(m) => {
                    if let Some(key_ids) = &by {
                        println!(
                            "manifest: signed by {}, sequence {}, published {}, expires {}, {} model(s)",
                            key_ids.join(", "),
                            m.sequence,
                            m.published_at,
                            m.expires.as_deref().unwrap_or("never"),
                            m.models.len()
                        );
                    }
                    if let Err(r) = policy.check_manifest(&m, now_s()) {
                        problems.push(format!("{}: {r}", path.display()));
                    }
                    (Some(m), by.is_some())
                }
                Err(r) => {
                    problems.push(format!("{}: {r}", path.display()));
                    (None, false)
                }
            }
        }
    };
    if let Some(m) = &manifest {
        if !trusted {
            println!("manifest: NOT TRUSTED (see below); checking its artifacts anyway");
        }
        for entry in &m.models {
            let label = format!("{} ({})", entry.label(), entry.mode.as_str());
            let file = dir.join(&entry.artifact);
            let outcome = fs::read(&file)
                .map_err(|e| format!("{}: cannot read {}: {e}", entry.label(), file.display()))
                .and_then(|b| check_artifact(entry, &b, max_bytes.unwrap_or(u64::MAX), hash_key.as_deref()).map_err(|r| r.to_string()));
            match outcome {
                Ok(_) => println!(
                    "{label}: ok, sha256 {}, {} bytes, {} golden row(s)",
                    short(&entry.sha256),
                    entry.size,
                    entry.golden.len()
                ),
                Err(problem) => {
                    println!("{label}: FAILED");
                    problems.push(problem);
                }
            }
        }
    }
    if problems.is_empty() {
        return Ok(());
    }
    std::io::stdout().flush().ok();
    for p in &problems {
        eprintln!("edgescore: error: {p}");
    }
    bail!("{}: {} problem(s)", dir.display(), problems.len())
}

#[cfg(test)]
mod tests {
    use super::parse_duration;

    #[test]
    fn durations() {
        for (text, secs) in [("7d", 7 * 86_400), ("36h", 36 * 3600), ("90m", 5400), ("3600s", 3600), ("3600", 3600), ("2w", 14 * 86_400), (" 1d ", 86_400)] {
            assert_eq!(parse_duration(text), Ok(secs), "{text}");
        }
        for bad in ["", "d", "7 d", "7days", "1.5d", "-1d", "7D", "99999999999999999999s"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
        assert_eq!(parse_duration("18446744073709551615w"), Err("\"18446744073709551615w\" is too long".into()));
    }
}
