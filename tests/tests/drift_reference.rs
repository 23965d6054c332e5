//! The drift reference (format 6, `compile --reference`): written and read back as built,
//! refused when damaged, counted by the Wasm filter on the proxy-wasm host into the metrics
//! `docs/metrics.md` names, without an allocation per request.

use edgescore_compile::drift::DriftReference;
use edgescore_compile::write::{write, write_for, write_with_reference};
use edgescore_core::artifact::layout::{flags, SectionKind, FORMAT_VERSION, HEADER_LEN};
use edgescore_core::drift::bin;
use edgescore_core::{ArtifactError, Model};
use edgescore_proxy_host::{Host, Vm};
use edgescore_tests::artifact_edit::{resealed, section};
use edgescore_tests::filter_models::{base64, step_model};
use edgescore_tests::ir_build::format_version;
use edgescore_proxy_host::cargo::filter_wasm;

/// Rows of the step model's two inputs (header_count, ua_family bucket), some missing.
fn rows(n: usize, shift: f32) -> Vec<Vec<f32>> {
    (0..n).map(|i| vec![if i % 10 == 0 { f32::NAN } else { (i % 17) as f32 + shift }, (i * 7 % 64) as f32]).collect()
}

fn with_reference() -> (Vec<u8>, DriftReference) {
    let ir = step_model("bot", "header_count", 4.0, 4.0);
    let plain = Model::load(&write(&ir).unwrap()).unwrap();
    let reference = DriftReference::build(&plain.ensemble(), &rows(1000, 0.0), 10).unwrap();
    (write_with_reference(&ir, FORMAT_VERSION, Some(&reference)).unwrap(), reference)
}

#[test]
fn written_as_built_and_scored_as_without() {
    let ir = step_model("bot", "header_count", 4.0, 4.0);
    let plain = write(&ir).unwrap();
    assert!(format_version(&plain) < 6, "a model without a reference keeps its format");
    let (bytes, reference) = with_reference();
    assert_eq!(format_version(&bytes), 6);
    let model = Model::load(&bytes).unwrap();
    let e = model.ensemble();
    assert_ne!(e.header_flags() & flags::HAS_DRIFT_REFERENCE, 0);
    let r = e.drift_reference().expect("a reference");
    let mut first = 0;
    for (i, s) in reference.series.iter().enumerate() {
        let b = if i < e.n_features() { r.feature(i) } else { r.output(i - e.n_features()) };
        let n = s.n_edges as usize;
        assert_eq!(b.edges, &reference.edges[s.first_edge as usize..s.first_edge as usize + n]);
        assert_eq!(b.shares, &reference.shares[first..first + n + 2]);
        first += n + 2;
    }
    // header_count: 17 values (0..16), one in ten missing; ten bins at most.
    let hc = r.feature(0);
    assert!(hc.edges.len() >= 8 && hc.edges.len() <= 9, "{:?}", hc.edges);
    assert!((hc.shares[hc.edges.len() + 1] - 0.1).abs() < 1e-6, "missing share {:?}", hc.shares);
    // The score's bins: the model's own scores of the rows, none missing.
    let score = r.output(0);
    assert_eq!(score.shares[score.edges.len() + 1], 0.0);
    let plain = Model::load(&plain).unwrap();
    let (mut a, mut b) = ([0f32; 1], [0f32; 1]);
    for row in rows(200, 0.5) {
        plain.ensemble().score(&row, &mut a).unwrap();
        e.score(&row, &mut b).unwrap();
        assert_eq!(a[0].to_bits(), b[0].to_bits());
    }
    // A fleet on format 5 cannot take it.
    let err = write_with_reference(&ir, 5, Some(&reference)).unwrap_err();
    assert!(err.to_string().contains("drift reference"), "{err}");
    assert_eq!(write_for(&ir, 5).unwrap(), write(&ir).unwrap());
}

fn refused(bytes: Vec<u8>) -> ArtifactError {
    match Model::load(&resealed(bytes)) {
        Ok(_) => panic!("a damaged reference was accepted"),
        Err(e) => e,
    }
}

#[test]
fn a_damaged_reference_is_refused() {
    let (good, _) = with_reference();
    let (edges_at, edges_len) = section(&good, SectionKind::DriftEdges);
    let (shares_at, _) = section(&good, SectionKind::DriftShares);
    let n_series = 3; // two inputs and one output
    let first_edge = edges_at + 8 * n_series;
    let f32_at = |b: &[u8], at: usize| f32::from_le_bytes(b[at..at + 4].try_into().unwrap());
    let put = |b: &mut Vec<u8>, at: usize, v: f32| b[at..at + 4].copy_from_slice(&v.to_le_bytes());

    // The flag cleared while the sections stay.
    let mut b = good.clone();
    let f = u32::from_le_bytes(b[12..16].try_into().unwrap()) & !flags::HAS_DRIFT_REFERENCE;
    b[12..16].copy_from_slice(&f.to_le_bytes());
    assert!(matches!(refused(b), ArtifactError::SectionLength { section: "DRIFT_EDGES", .. }));
    // Edges out of order, not finite.
    let mut b = good.clone();
    let second = f32_at(&good, first_edge + 4);
    put(&mut b, first_edge, second);
    assert!(matches!(refused(b), ArtifactError::Drift { series: 0, reason: "edges not strictly ascending" }));
    let mut b = good.clone();
    put(&mut b, first_edge, f32::NAN);
    assert!(matches!(refused(b), ArtifactError::Drift { series: 0, reason: "an edge is not finite" }));
    // A series claiming more edges than there are, or more than allowed.
    let mut b = good.clone();
    b[edges_at + 4..edges_at + 8].copy_from_slice(&1000u32.to_le_bytes());
    assert!(matches!(refused(b), ArtifactError::Drift { series: 0, .. }));
    // Shares that do not sum to 1, or out of [0, 1].
    let mut b = good.clone();
    put(&mut b, shares_at, f32_at(&good, shares_at) + 0.5);
    assert!(matches!(refused(b), ArtifactError::Drift { series: 0, reason: "shares do not sum to 1" }));
    let mut b = good.clone();
    put(&mut b, shares_at, -0.25);
    assert!(matches!(refused(b), ArtifactError::Drift { series: 0, reason: "a share is not in [0, 1]" }));
    // An edges section that is not a whole number of f32 after its table.
    let mut b = good.clone();
    let entry = HEADER_LEN + 24 * (SectionKind::DriftEdges as usize - 1) + 16;
    b[entry..entry + 8].copy_from_slice(&(edges_len as u64 - 2).to_le_bytes());
    assert!(Model::load(&resealed(b)).is_err());
    // NODE_VALUES is empty in this build.
    let mut b = good.clone();
    let entry = HEADER_LEN + 24 * (SectionKind::NodeValues as usize - 1) + 16;
    b[entry..entry + 8].copy_from_slice(&4u64.to_le_bytes());
    assert!(Model::load(&resealed(b)).is_err());
}

fn request(i: usize) -> Vec<(String, String)> {
    let mut h = vec![
        (":method".to_string(), "GET".to_string()),
        (":path".to_string(), format!("/p/{i}")),
        (":authority".to_string(), "shop.example.com".to_string()),
        ("user-agent".to_string(), if i % 2 == 0 { "curl/8.5.0".to_string() } else { format!("Mozilla/5.0 Firefox/{i}") }),
    ];
    for j in 0..(i % 9) {
        h.push((format!("x-extra-{j}"), format!("v{j}")));
    }
    h
}

fn drift_counts(host: &Host) -> Vec<(String, u64)> {
    host.metrics().into_iter().filter(|(k, _)| k.starts_with("edgescore.drift.")).map(|(k, v)| (k, v.1)).collect()
}

/// The filter counts each request's header_count, ua_family and score into the reference's
/// bins, hands them to the host on the tick under `edgescore.drift.bin.<model>.<feature>.<bin>`,
/// exports the reference shares as gauges, and allocates nothing per request doing so.
#[test]
fn the_filter_counts_each_bin_without_allocating() {
    let (bytes, _) = with_reference();
    let model = Model::load(&bytes).unwrap();
    let r = model.ensemble().drift_reference().unwrap();
    let config = format!(r#"{{"hash_key":"test-key-0123456789","models":[{{"artifact":"{}","threshold":0.9,"action":"tag"}}]}}"#, base64(&bytes));
    let host = Host::new(filter_wasm().unwrap()).unwrap();
    let mut vm = host.vm(b"").unwrap();
    assert!(vm.configure(config.as_bytes()).unwrap());
    let refs = drift_counts(&host);
    let hc = r.feature(0);
    for (b, share) in hc.shares.iter().enumerate() {
        let label = if b == hc.edges.len() + 1 { "missing".to_string() } else { b.to_string() };
        let name = format!("edgescore.drift.reference_ppm.bot.header_count.{label}");
        assert!(refs.contains(&(name.clone(), (*share as f64 * 1e6).round() as u64)), "{name} in {refs:?}");
    }
    let heap = |vm: &mut Vm| vm.call_u64_export("edgescore_heap_allocations").unwrap().expect("exported");
    for i in 0..40 {
        let s = vm.stream();
        vm.request_headers(&s, request(i), true).unwrap();
        vm.done(&s).unwrap();
    }
    vm.tick().unwrap();
    let label = |b: usize| if b == hc.edges.len() + 1 { "missing".to_string() } else { b.to_string() };
    let counts = |vm: &Vm| -> Vec<u64> { (0..hc.shares.len()).map(|b| vm.metric(&format!("edgescore.drift.bin.bot.header_count.{}", label(b))).unwrap_or(0)).collect() };
    let counted = counts(&vm);
    assert_eq!(counted.iter().sum::<u64>(), 40, "the warm-up's requests, each in one bin");
    let before = heap(&mut vm);
    let mut want = counted.clone();
    let n = 200;
    for i in 40..40 + n {
        let s = vm.stream();
        let headers = request(i);
        // header_count counts every header but the pseudo-headers.
        want[bin(hc.edges, (headers.len() - 3) as f32)] += 1;
        vm.request_headers(&s, headers, true).unwrap();
        vm.done(&s).unwrap();
    }
    assert_eq!(heap(&mut vm), before, "drift counting reached the system allocator");
    vm.tick().unwrap();
    assert_eq!(counts(&vm), want);
    let scored: u64 = (0..r.output(0).shares.len())
        .map(|b| {
            let label = if b == r.output(0).edges.len() + 1 { "missing".to_string() } else { b.to_string() };
            vm.metric(&format!("edgescore.drift.score_bin.bot.{label}")).unwrap_or(0)
        })
        .sum();
    assert_eq!(scored, 40 + n as u64, "every request's score in one bin");
}

/// `inspect --html` charts each series' reference shares; a model without a reference says how
/// to get them.
#[test]
fn the_report_shows_the_reference_distributions() {
    use edgescore_compile::report::{build, render_html, Origin};
    let (bytes, reference) = with_reference();
    let model = Model::load(&bytes).unwrap();
    let page = render_html(&build(&model.ensemble(), Origin::Artifact, None).unwrap());
    let drift = &page[page.find("<section id=\"drift\">").expect("a drift section")..];
    for name in ["header_count", "ua_family", "output 0"] {
        assert!(drift.contains(&format!("data-series=\"{name}\"")), "{name}");
    }
    // One column per bin, its share as the value.
    let bars = drift.matches("<rect class=\"bar\"").count();
    assert_eq!(bars, reference.shares.len());
    let plain = Model::load(&write(&step_model("bot", "header_count", 4.0, 4.0)).unwrap()).unwrap();
    let page = render_html(&build(&plain.ensemble(), Origin::Artifact, None).unwrap());
    assert!(page.contains("No drift reference: compile with --reference"));
}

fn config(artifact: &[u8], metrics: &str) -> String {
    format!(r#"{{"hash_key":"test-key-0123456789"{metrics},"models":[{{"artifact":"{}","threshold":0.9,"action":"tag"}}]}}"#, base64(artifact))
}

/// A model replaced by one with fewer bins leaves no stale reference share behind (its old
/// bins' gauges go to 0), and `metrics.drift: false` defines and counts nothing.
#[test]
fn a_swap_retires_old_bins_and_the_switch_turns_counting_off() {
    let (ten, _) = with_reference();
    let ir = step_model("bot", "header_count", 4.0, 4.0);
    let plain = Model::load(&write(&ir).unwrap()).unwrap();
    let two = write_with_reference(&ir, FORMAT_VERSION, Some(&DriftReference::build(&plain.ensemble(), &rows(1000, 0.0), 2).unwrap())).unwrap();
    let host = Host::new(filter_wasm().unwrap()).unwrap();
    let mut vm = host.vm(b"").unwrap();
    assert!(vm.configure(config(&ten, "").as_bytes()).unwrap());
    let gauge = |b: &str| host.metric(&format!("edgescore.drift.reference_ppm.bot.header_count.{b}"));
    assert!(gauge("5").unwrap() > 0);
    assert!(vm.configure(config(&two, "").as_bytes()).unwrap());
    let shares: u64 = (0..=2).map(|b| gauge(&b.to_string()).unwrap()).sum::<u64>() + gauge("missing").unwrap();
    assert!((999_000..=1_001_000).contains(&shares), "{shares}");
    assert_eq!(gauge("5"), Some(0), "a bin the new reference does not have");

    let host = Host::new(filter_wasm().unwrap()).unwrap();
    let mut vm = host.vm(b"").unwrap();
    assert!(vm.configure(config(&ten, r#","metrics":{"drift":false}"#).as_bytes()).unwrap());
    for i in 0..20 {
        let s = vm.stream();
        vm.request_headers(&s, request(i), true).unwrap();
        vm.done(&s).unwrap();
    }
    vm.tick().unwrap();
    assert!(host.metric("edgescore.requests_scored").unwrap() >= 20);
    assert_eq!(drift_counts(&host), vec![]);
}
