//! `edgescore keygen`, `publish` and `verify`: the publisher's side of the signed model registry
//! (`docs/registry.md`). The formats and every check live in `edgescore_core::registry`, so
//! `verify` accepts exactly what the filter accepts.

use anyhow::{bail, Context, Result};
use crate::rows;
use edgescore_core::registry::{
    self, check_artifact, default_golden_inputs, golden_rows, hash_key_id, open_envelope, parse_public_key, parse_secret_key,
    public_key_file, secret_key_file, sha256_hex, sign_envelope, verify_envelope, verify_signatures, Manifest, ManifestModel, ModelMode,
    PublicKey, MANIFEST_FILE, MANIFEST_FORMAT, MAX_GOLDEN_ROWS,
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

/// What `publish` was asked to do.
pub struct Publish {
    pub artifact: PathBuf,
    pub registry: PathBuf,
    pub key: PathBuf,
    pub shadow: bool,
    pub hash_key_file: Option<PathBuf>,
    pub golden_csv: Option<PathBuf>,
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
    let key_text = fs::read_to_string(&p.key).with_context(|| format!("cannot read {}", p.key.display()))?;
    let key = parse_secret_key(&key_text).with_context(|| format!("{} is not an edgescore secret key", p.key.display()))?;
    let ours = PublicKey::from_bytes(key.verifying_key().as_bytes())?;

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
    let manifest_path = p.registry.join(MANIFEST_FILE);
    let tmp_path = with_suffix(&manifest_path, ".tmp");
    let lock = TempFile::create_new(tmp_path.clone()).map_err(|err| match err.kind() {
        ErrorKind::AlreadyExists => anyhow::anyhow!(
            "{} exists: another publish is running (remove the file if a previous publish was interrupted)",
            tmp_path.display()
        ),
        _ => anyhow::Error::new(err).context(format!("cannot create {}", tmp_path.display())),
    })?;

    let mut manifest = read_existing(&manifest_path, &ours)?;

    // The artifact first, durable before any manifest names it.
    let sha = sha256_hex(&bytes);
    let dest = p.registry.join(registry::artifact_path(&sha));
    let present = fs::read(&dest).map(|b| sha256_hex(&b) == sha).unwrap_or(false);
    if !present {
        write_atomic(&dest, &bytes)?;
    }

    let mode = if p.shadow { ModelMode::Shadow } else { ModelMode::Active };
    let version = manifest.max_version(&name) + 1;
    manifest.models.retain(|m| {
        let same_slot = m.name == name && m.mode == mode;
        // Publishing active what the shadow runs is a promotion: the shadow entry goes.
        let promoted = mode == ModelMode::Active && m.name == name && m.mode == ModelMode::Shadow && m.sha256 == sha;
        !(same_slot || promoted)
    });
    manifest.models.push(ManifestModel {
        name: name.clone(),
        version,
        mode,
        artifact: registry::artifact_path(&sha),
        size: bytes.len() as u64,
        sha256: sha.clone(),
        schema_hash: registry::schema_hash(&e),
        hash_key_id: hash_key,
        golden,
    });
    manifest.models.sort_by(|a, b| (&a.name, a.mode).cmp(&(&b.name, b.mode)));
    manifest.format = MANIFEST_FORMAT;
    manifest.sequence += 1;
    manifest.published_at = now_rfc3339();
    manifest.check().context("the new manifest does not check (bug)")?;
    let envelope = sign_envelope(&manifest.to_json(), &key);
    verify_envelope(&envelope, std::slice::from_ref(&ours)).context("the new manifest does not verify (bug)")?;
    lock.commit(&envelope, &manifest_path)?;
    println!(
        "published {name} v{version} ({}) sha256 {} seq {} -> {}",
        mode.as_str(),
        short(&sha),
        manifest.sequence,
        manifest_path.display()
    );
    Ok(())
}

/// The registry's current manifest, or an empty one. A manifest this key signed must verify
/// (else someone altered it: refuse to sign over it); one signed by other keys only (before a
/// key rotation) is read for its sequence and versions and re-signed with a note.
fn read_existing(path: &Path, ours: &PublicKey) -> Result<Manifest> {
    let bytes = match fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == ErrorKind::NotFound => {
            return Ok(Manifest { format: MANIFEST_FORMAT, sequence: 0, published_at: String::new(), models: Vec::new() })
        }
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
    };
    let refuse = |r: registry::Refusal| anyhow::anyhow!("{}: {r}: refusing to publish over it", path.display());
    let signed = open_envelope(&bytes).map_err(refuse)?;
    if signed.signatures.iter().any(|s| s.key_id == ours.key_id) {
        verify_signatures(&signed, std::slice::from_ref(ours)).map_err(refuse)?;
        Manifest::parse(&signed.payload).map_err(refuse)
    } else {
        let m = Manifest::parse(&signed.payload).map_err(refuse)?;
        let by: Vec<&str> = signed.signatures.iter().map(|s| s.key_id.as_str()).collect();
        eprintln!(
            "edgescore: note: {} was signed by {} (not by this key, {}); its entries are kept and re-signed",
            path.display(),
            if by.is_empty() { "no key".to_string() } else { by.join(", ") },
            ours.key_id
        );
        Ok(m)
    }
}

/// `edgescore verify`: every check a poller makes, offline. Prints one line per model; each
/// problem is one `edgescore: error:` line, and the command fails when there is any.
pub fn verify(dir: &Path, pubs: &[PathBuf], hash_key_file: Option<&Path>, max_bytes: Option<u64>) -> Result<()> {
    let mut keys = Vec::new();
    for p in pubs {
        let text = fs::read_to_string(p).with_context(|| format!("cannot read {}", p.display()))?;
        keys.push(parse_public_key(&text).with_context(|| format!("{} is not an edgescore public key", p.display()))?);
    }
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
            let by = verify_signatures(&signed, &keys).map_err(|r| problems.push(format!("{}: {r}", path.display()))).ok();
            match Manifest::parse(&signed.payload) {
                Ok(m) => {
                    if let Some(key_id) = &by {
                        println!(
                            "manifest: signed by {key_id}, sequence {}, published {}, {} model(s)",
                            m.sequence,
                            m.published_at,
                            m.models.len()
                        );
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

/// The current UTC time as RFC 3339, to the second.
fn now_rfc3339() -> String {
    let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Howard Hinnant's civil_from_days.
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z", rem / 3600, rem % 3600 / 60, rem % 60)
}
