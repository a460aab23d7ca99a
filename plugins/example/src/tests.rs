use durasync_guest::testing::Host;

use super::EnvDir;

#[test]
fn writes_one_file_per_key_and_nothing_when_unchanged() {
    let host = Host::new().root("out");
    assert_eq!(
        host.run::<EnvDir>("{}", b"A=1\n# note\nB = two\n").ok(),
        "env: created (2 written, 0 removed)"
    );
    assert_eq!(host.files("out")["env/B"], (0o644, b"two\n".to_vec()));
    assert_eq!(host.run::<EnvDir>("{}", b"B=two\nA=1").ok(), "env: unchanged (0 written, 0 removed)");
    assert_eq!(host.run::<EnvDir>("{}", b"A=3").ok(), "env: replaced (1 written, 1 removed)");
}

#[test]
fn refuses_a_line_without_an_equals_sign_or_a_key_with_a_dotdot() {
    let host = Host::new().root("out");
    assert!(host.run::<EnvDir>("{}", b"oops").err().contains("not KEY=value"));
    assert!(host.run::<EnvDir>("{}", b"..=1").err().contains("invalid-path"));
    assert!(host.files("out").is_empty());
}
