//! envoyproxy/ratelimit's config tests (`test/config/config_test.go`), as accept or refuse:
//! every file of its `test/config/` (copied unchanged into `peer_cases/config/`) goes
//! through `rl-gateway --check-config` on the real binary, alone or with the files the
//! peer's case loads beside it. Where the peer's case loads the file, ours must accept it;
//! where the peer's case panics, ours must exit non-zero with a message naming the file.
//! (What the peer then asks of the loaded config, `GetLimit` and its stats, is replayed
//! over gRPC in the other `envoy_peer_*` files, not here.)

use testkit::gateway::envoy::*;

macro_rules! peer_file {
    ($name:literal) => {
        ($name, include_str!(concat!("peer_cases/config/", $name)))
    };
}

const BASIC_CONFIG: (&str, &str) = peer_file!("basic_config.yaml");
const MERGE_KEY1: (&str, &str) = peer_file!("merge_domain_key1.yaml");
const MERGE_KEY2: (&str, &str) = peer_file!("merge_domain_key2.yaml");

/// `files` pass `--check-config` (with more `[envoy]` lines `envoy_lines`).
fn accepted(files: &[(&str, &str)], envoy_lines: &str) {
    let out = check_descriptors(files, envoy_lines);
    let names: Vec<&str> = files.iter().map(|(name, _)| *name).collect();
    assert!(
        out.status.success(),
        "{names:?} refused:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `files` fail `--check-config` with a message naming `named` (a file of them).
fn refused(files: &[(&str, &str)], envoy_lines: &str, named: &str) {
    let out = check_descriptors(files, envoy_lines);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!out.status.success(), "{named} accepted:\n{text}");
    assert!(text.contains(named), "the message names {named}:\n{text}");
}

// TestBasicConfig, TestConfigLimitOverride: basic_config.yaml loads.
#[test]
fn basic_config_is_accepted() {
    accepted(&[BASIC_CONFIG], "");
}

// TestDomainMerge: two files of one domain load when the peer is told to merge domains
// (its MERGE_DOMAIN_CONFIG; ours `[envoy] merge_domains = true`).
#[test]
fn merge_domain_files_are_accepted_when_merging() {
    accepted(&[MERGE_KEY1, MERGE_KEY2], "merge_domains = true");
}

// TestDomainMerge's contrast (TestDuplicateDomain's rule): without merging, the same two
// files are one domain twice, refused by the peer and by us (our default is the peer's).
#[test]
fn merge_domain_files_are_refused_without_merging() {
    refused(&[MERGE_KEY1, MERGE_KEY2], "", "merge_domain_key2.yaml");
}

// TestDuplicateKeyDomainMerge: merging a file with itself defines key1_value1 twice.
#[test]
fn merging_a_domain_with_itself_is_refused() {
    let copy = ("merge_domain_key1_copy.yaml", MERGE_KEY1.1);
    refused(
        &[MERGE_KEY1, copy],
        "merge_domains = true",
        "merge_domain_key1",
    );
}

// TestShadowModeConfig: shadowmode_config.yaml loads.
#[test]
fn shadowmode_config_is_accepted() {
    accepted(&[peer_file!("shadowmode_config.yaml")], "");
}

// TestWildcardConfig: wildcard.yaml loads (wildcards at the end, in the middle, several).
#[test]
fn wildcard_config_is_accepted() {
    accepted(&[peer_file!("wildcard.yaml")], "");
}

// TestShareThreshold (and TestWildcardStatsBehavior): share_threshold.yaml loads.
#[test]
fn share_threshold_config_is_accepted() {
    accepted(&[peer_file!("share_threshold.yaml")], "");
}

// TestMetadata: metadata.yaml loads.
#[test]
fn metadata_config_is_accepted() {
    accepted(&[peer_file!("metadata.yaml")], "");
}

// TestEmptyDomain: "config file cannot have empty domain".
#[test]
fn empty_domain_is_refused() {
    refused(&[peer_file!("empty_domain.yaml")], "", "empty_domain.yaml");
}

// TestDuplicateDomain: basic_config.yaml and duplicate_domain.yaml both define
// test-domain: "duplicate domain 'test-domain' in config file".
#[test]
fn duplicate_domain_is_refused() {
    let files = [BASIC_CONFIG, peer_file!("duplicate_domain.yaml")];
    refused(&files, "", "duplicate_domain.yaml");
}

// TestEmptyKey: "descriptor has empty key".
#[test]
fn empty_key_is_refused() {
    refused(&[peer_file!("empty_key.yaml")], "", "empty_key.yaml");
}

// TestDuplicateKey: "duplicate descriptor composite key 'test-domain.key1_value1'".
#[test]
fn duplicate_key_is_refused() {
    refused(
        &[peer_file!("duplicate_key.yaml")],
        "",
        "duplicate_key.yaml",
    );
}

// TestBadLimitUnit: "invalid rate limit unit 'foo'".
#[test]
fn bad_limit_unit_is_refused() {
    refused(
        &[peer_file!("bad_limit_unit.yaml")],
        "",
        "bad_limit_unit.yaml",
    );
}

// TestReplacesSelf: "replaces should not contain name of same descriptor".
#[test]
fn replaces_self_is_refused() {
    refused(
        &[peer_file!("replaces_self.yaml")],
        "",
        "replaces_self.yaml",
    );
}

// TestReplacesEmpty: "should not have an empty replaces entry".
#[test]
fn replaces_empty_is_refused() {
    refused(
        &[peer_file!("replaces_empty.yaml")],
        "",
        "replaces_empty.yaml",
    );
}

// TestBadYaml: "error loading config file: yaml: line 2: found unexpected end of stream".
#[test]
fn bad_yaml_is_refused() {
    refused(&[peer_file!("bad_yaml.yaml")], "", "bad_yaml.yaml");
}

// TestMisspelledKey: "config error, unknown key 'ratelimit'".
#[test]
fn misspelled_key_is_refused() {
    refused(
        &[peer_file!("misspelled_key.yaml")],
        "",
        "misspelled_key.yaml",
    );
}

// TestMisspelledKey: "config error, unknown key 'requestsperunit'".
#[test]
fn misspelled_key2_is_refused() {
    refused(
        &[peer_file!("misspelled_key2.yaml")],
        "",
        "misspelled_key2.yaml",
    );
}

// TestNonStringKey: "config error, key is not of type string: 0.25".
#[test]
fn non_string_key_is_refused() {
    refused(
        &[peer_file!("non_string_key.yaml")],
        "",
        "non_string_key.yaml",
    );
}

// TestNonMapList: "config error, yaml file contains list of type other than map: a".
#[test]
fn non_map_list_is_refused() {
    refused(&[peer_file!("non_map_list.yaml")], "", "non_map_list.yaml");
}

// TestUnlimitedWithRateLimitUnit: "should not specify rate limit unit when unlimited".
#[test]
fn unlimited_with_unit_is_refused() {
    refused(
        &[peer_file!("unlimited_with_unit.yaml")],
        "",
        "unlimited_with_unit.yaml",
    );
}
