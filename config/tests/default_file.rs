//! The default configuration file that tools/install.sh puts in /etc/numatgt parses, listens
//! on 0.0.0.0:3260 and exports nothing; its commented-out lines, once uncommented, are valid
//! too (so an admin who enables them gets a working file).

const DEFAULT: &str = include_str!("../examples/default.yaml");

#[test]
fn default_file_parses_and_exports_nothing() {
    let c = config::parse(DEFAULT, "default.yaml").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(c.portals.len(), 1);
    assert_eq!(c.portals[0].addr.to_string(), "0.0.0.0:3260");
    assert_eq!(c.iser_portals, None);
    assert!(c.targets.is_empty());
}

#[test]
fn default_file_with_every_setting_uncommented_parses() {
    // uncomment settings (`#key:` and `#  - item` lines, indentation kept); prose comments
    // (`# Text`) are dropped
    let mut text = String::new();
    for line in DEFAULT.lines() {
        let prose = line.starts_with("# ") && !line.starts_with("#  ");
        if prose || line == "#" || line.trim().is_empty() {
            continue;
        }
        if let Some(rest) = line.strip_prefix('#') {
            text.push_str(rest);
        } else if line == "targets: []" {
            text.push_str("targets:");
        } else {
            text.push_str(line);
        }
        text.push('\n');
    }
    let c = config::parse(&text, "uncommented.yaml").unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert_eq!(c.portals.len(), 2);
    assert_eq!(c.iser_portals.map(|l| l.len()), Some(1));
    assert_eq!(c.targets.len(), 1);
    assert_eq!(c.targets[0].luns.len(), 1);
}
