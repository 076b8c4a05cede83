//! The Debian package (issue 28): `tools/build-deb.sh` builds
//! `target/debian/numatgt_<version>_<arch>.deb` (once for all the tests here; a release
//! build, incremental after the first), and the package is checked as an admin and as
//! Debian's tools would: every file at its place with its mode, the conffile, Depends
//! computed by dpkg-shlibdeps (libc6, never the libraries numatgtd opens at run time),
//! the unit's paths and `systemd-analyze verify` with the package's own man pages, the man
//! pages rendered by `man` without a warning and listing every option `--help` shows (and
//! every section of docs/configuration.md), the completions loaded by bash and offering
//! the parser's values, zsh's parsed, and lintian: no error, and no warning but those
//! explained in tools/deb/README.md.
//!
//! Heavy (the release build: minutes on a cold target directory), so `#[ignore]`d in
//! `cargo test --workspace`; `tools/test-all.sh` runs it as its own stage, `deb`:
//! `cargo test -p tests --test deb_package -- --ignored`.

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use tests::tools;

/// lintian warnings the package keeps, each explained in tools/deb/README.md.
const LINTIAN_WARNINGS_EXPLAINED: &[&str] = &["initial-upload-closes-no-bugs"];

/// Libraries numatgtd opens with dlopen: optional, never in Depends.
const DLOPENED: &[&str] = &["librbd", "librados", "libibverbs", "librdmacm"];

/// The package, built once by tools/build-deb.sh, and its contents unpacked.
struct Built {
    deb: PathBuf,
    /// `dpkg-deb -x` of it
    root: PathBuf,
    _dir: tempfile::TempDir,
}

fn built() -> &'static Built {
    static BUILT: OnceLock<Built> = OnceLock::new();
    BUILT.get_or_init(|| {
        let script = tests::workspace_root().join("tools/build-deb.sh");
        let run = tools::run(3600, &script.display().to_string(), [] as [&str; 0]);
        run.check("tools/build-deb.sh");
        let deb = run
            .stdout
            .lines()
            .find_map(|l| l.strip_prefix("build-deb: "))
            .map(PathBuf::from)
            .unwrap_or_else(|| panic!("build-deb.sh named no package:\n{run}"));
        assert!(deb.is_file(), "{} missing", deb.display());
        let name = deb.file_name().and_then(OsStr::to_str).unwrap_or_default();
        assert!(
            name.starts_with(&format!("numatgt_{}-", env!("CARGO_PKG_VERSION")))
                && name.ends_with(".deb"),
            "{name}: not numatgt_<version>-<revision>_<arch>.deb"
        );
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().join("root");
        dpkg_deb(&[
            "-x",
            &deb.display().to_string(),
            &root.display().to_string(),
        ]);
        Built {
            deb,
            root,
            _dir: dir,
        }
    })
}

fn dpkg_deb(args: &[&str]) -> String {
    let run = tools::run(120, "dpkg-deb", args);
    run.check("dpkg-deb");
    run.stdout
}

fn field(name: &str) -> String {
    dpkg_deb(&["--field", &built().deb.display().to_string(), name])
        .trim()
        .to_string()
}

/// `dpkg-deb --contents`: path (without the leading `.`) -> (mode string, owner/group).
fn contents() -> Vec<(String, String, String)> {
    dpkg_deb(&["--contents", &built().deb.display().to_string()])
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            // -rwxr-xr-x root/root 123 2026-11-29 12:00 ./usr/sbin/numatgtd
            let path = f.get(5)?.strip_prefix('.')?;
            Some((
                path.trim_end_matches('/').to_string(),
                f[0].to_string(),
                f[1].to_string(),
            ))
        })
        .collect()
}

#[test]
#[ignore = "release build: tools/test-all.sh stage deb"]
fn files_are_in_place_with_their_modes() {
    let files = contents();
    let mode_of = |p: &str| {
        files
            .iter()
            .find(|(path, _, _)| path == p)
            .map(|(_, mode, owner)| (mode.as_str(), owner.as_str()))
            .unwrap_or_else(|| panic!("{p} not in the package"))
    };
    let exe = "-rwxr-xr-x";
    let file = "-rw-r--r--";
    let mut want = vec![
        ("/usr/sbin/numatgtd", exe),
        ("/usr/sbin/numatgtadm", exe),
        ("/lib/systemd/system/numatgtd.service", file),
        ("/usr/lib/sysusers.d/numatgt.conf", file),
        ("/usr/lib/tmpfiles.d/numatgt.conf", file),
        ("/etc/numatgt/numatgt.yaml", file),
        ("/usr/share/man/man8/numatgtd.8.gz", file),
        ("/usr/share/man/man8/numatgtadm.8.gz", file),
        ("/usr/share/man/man5/numatgt.yaml.5.gz", file),
        ("/usr/share/bash-completion/completions/numatgtd", file),
        ("/usr/share/bash-completion/completions/numatgtadm", file),
        ("/usr/share/zsh/vendor-completions/_numatgtd", file),
        ("/usr/share/zsh/vendor-completions/_numatgtadm", file),
        ("/usr/share/doc/numatgt/copyright", file),
        ("/usr/share/doc/numatgt/changelog.Debian.gz", file),
    ];
    // every dashboard and Prometheus file tools/ holds now
    let mut monitoring = Vec::new();
    for (dir, ext) in [("grafana", "json"), ("prometheus", "yml")] {
        let src = tests::workspace_root().join("tools").join(dir);
        for e in std::fs::read_dir(&src).expect("read tools dir").flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            // promtool's tests of the alert rules stay in the tree
            if name.ends_with(&format!(".{ext}")) && !name.ends_with(".test.yml") {
                monitoring.push(format!("/usr/share/numatgt/{dir}/{name}"));
            }
        }
    }
    assert!(monitoring.len() >= 2, "{monitoring:?}");
    want.extend(monitoring.iter().map(|p| (p.as_str(), file)));
    for (path, mode) in want {
        assert_eq!(mode_of(path), (mode, "root/root"), "{path}");
    }
    for (path, mode, owner) in &files {
        assert_eq!(owner, "root/root", "{path}");
        assert!(!path.starts_with("/usr/local"), "{path}");
        assert!(
            mode.starts_with('d') || mode.starts_with('-'),
            "{path}: {mode}"
        );
        assert!(!mode[4..].contains('w'), "{path}: {mode}");
    }
    let conffiles = dpkg_deb(&["--info", &built().deb.display().to_string(), "conffiles"]);
    assert_eq!(conffiles.trim(), "/etc/numatgt/numatgt.yaml");
    // the example configuration the package installs is the one tools/install.sh installs
    let shipped = std::fs::read(built().root.join("etc/numatgt/numatgt.yaml")).expect("conf");
    let example = std::fs::read(tests::workspace_root().join("config/examples/default.yaml"))
        .expect("example");
    assert_eq!(shipped, example);
    // and it is a valid configuration
    config::load(&built().root.join("etc/numatgt/numatgt.yaml")).expect("numatgt.yaml loads");
}

#[test]
#[ignore = "release build: tools/test-all.sh stage deb"]
fn control_fields_and_computed_depends() {
    assert_eq!(field("Package"), "numatgt");
    let version = field("Version");
    assert!(
        version.starts_with(&format!("{}-", env!("CARGO_PKG_VERSION"))),
        "{version}"
    );
    let arch = tools::run(10, "dpkg", ["--print-architecture"]);
    assert_eq!(field("Architecture"), arch.check("dpkg").stdout.trim());
    let depends = field("Depends");
    let names: Vec<&str> = depends
        .split([',', '|'])
        .map(|d| d.split_whitespace().next().unwrap_or(""))
        .collect();
    // from dpkg-shlibdeps: versioned, for the libraries the binaries link
    for lib in ["libc6", "libgcc-s1", "libhwloc15"] {
        assert!(names.contains(&lib), "Depends lacks {lib}: {depends}");
    }
    assert!(depends.contains("libc6 (>= "), "{depends}");
    assert!(names.contains(&"systemd-sysusers"), "{depends}");
    let suggests = field("Suggests");
    for lib in DLOPENED {
        assert!(!depends.contains(lib), "Depends names {lib}: {depends}");
    }
    for pkg in ["librbd1", "libibverbs1", "librdmacm1", "tgt"] {
        assert!(
            suggests.split(", ").any(|s| s == pkg),
            "Suggests lacks {pkg}: {suggests}"
        );
    }
    assert!(!field("Recommends").contains("tgt"), "tgt recommended");
    // the binaries really do not link what is only suggested
    for b in ["numatgtd", "numatgtadm"] {
        let path = built().root.join("usr/sbin").join(b);
        let run = tools::run(30, "readelf", ["-d".as_ref(), path.as_os_str()]);
        let dynamic = &run.check("readelf").stdout;
        for lib in DLOPENED {
            assert!(!dynamic.contains(lib), "{b} links {lib}:\n{dynamic}");
        }
        // stripped, as dh_strip would
        let run = tools::run(30, "readelf", ["-S".as_ref(), path.as_os_str()]);
        let sections = &run.check("readelf").stdout;
        assert!(
            !sections.contains(".debug_info") && !sections.contains(".symtab"),
            "{b} not stripped:\n{sections}"
        );
    }
    let copyright = std::fs::read_to_string(built().root.join("usr/share/doc/numatgt/copyright"))
        .expect("copyright");
    assert!(
        copyright.starts_with(
            "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/"
        )
    );
    assert!(
        copyright.contains("License: MIT or Apache-2.0"),
        "{copyright}"
    );
    assert!(
        copyright.contains(" clap 4."),
        "statically linked crates:\n{copyright}"
    );
}

#[test]
#[ignore = "release build: tools/test-all.sh stage deb"]
fn unit_uses_the_package_paths_and_verifies() {
    let root = &built().root;
    let unit =
        std::fs::read_to_string(root.join("lib/systemd/system/numatgtd.service")).expect("unit");
    assert!(!unit.contains("/usr/local/"), "{unit}");
    assert!(
        unit.contains("ExecStart=/usr/sbin/numatgtd -f --config /etc/numatgt/numatgt.yaml"),
        "{unit}"
    );
    assert!(unit.contains("Conflicts=tgt.service"), "{unit}");
    // every program the unit runs from /usr/sbin is in the package
    for line in unit.lines().filter(|l| l.starts_with("Exec")) {
        for word in line
            .split(['=', ' '])
            .filter(|w| w.starts_with("/usr/sbin/"))
        {
            assert!(
                root.join(&word[1..]).is_file(),
                "{line}: {word} not packaged"
            );
        }
    }
    // Documentation= names the package's own man pages: verify with them on MANPATH and
    // the packaged binaries in place of /usr/sbin
    let docs: Vec<&str> = unit
        .lines()
        .filter_map(|l| l.strip_prefix("Documentation="))
        .flat_map(str::split_whitespace)
        .collect();
    assert!(docs.contains(&"man:numatgtd(8)"), "{docs:?}");
    let analyze = tools::require_tool("systemd-analyze");
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("numatgtd.service");
    let sbin = root.join("usr/sbin");
    std::fs::write(
        &path,
        unit.replace("/usr/sbin", &sbin.display().to_string()),
    )
    .expect("write unit");
    let manpath = root.join("usr/share/man");
    let run = tools::run_env(
        30,
        &analyze.display().to_string(),
        ["verify", &path.display().to_string()],
        &[("MANPATH", manpath.as_os_str())],
    );
    assert!(
        run.status.success() && !run.stderr.contains("numatgtd.service"),
        "systemd-analyze verify complained:\n{run}"
    );
    let sysusers =
        std::fs::read_to_string(root.join("usr/lib/sysusers.d/numatgt.conf")).expect("sysusers");
    assert!(
        sysusers.lines().any(|l| l.starts_with("u numatgt ")),
        "{sysusers}"
    );
    let tmpfiles =
        std::fs::read_to_string(root.join("usr/lib/tmpfiles.d/numatgt.conf")).expect("tmpfiles");
    assert!(
        tmpfiles.contains("d /var/lib/numatgt 0750 numatgt numatgt"),
        "{tmpfiles}"
    );
    // maintainer scripts: POSIX sh that parses, and the tgt rule in postinst
    let ctl = dir.path().join("control");
    dpkg_deb(&[
        "--control",
        &built().deb.display().to_string(),
        &ctl.display().to_string(),
    ]);
    for s in ["postinst", "prerm", "postrm"] {
        let p = ctl.join(s);
        tools::run(10, "sh", ["-n".as_ref(), p.as_os_str()]).check(s);
    }
    let postinst = std::fs::read_to_string(ctl.join("postinst")).expect("postinst");
    assert!(postinst.contains("tgt_in_use"), "{postinst}");
    assert!(postinst.contains("systemd-sysusers"), "{postinst}");
}

/// `man --warnings` as lintian runs it: the rendered text, panicking on any warning.
fn render_man(page: &Path) -> String {
    let run = tools::run_env(
        30,
        "man",
        [
            "--warnings".as_ref(),
            "-E".as_ref(),
            "UTF-8".as_ref(),
            "-l".as_ref(),
            "-Tutf8".as_ref(),
            page.as_os_str(),
        ],
        &[
            ("LC_ALL", OsStr::new("C.UTF-8")),
            ("MANROFFSEQ", OsStr::new("")),
            ("MANWIDTH", OsStr::new("80")),
        ],
    );
    run.check("man");
    assert!(
        run.stderr.trim().is_empty(),
        "{}: warnings\n{run}",
        page.display()
    );
    // drop groff's overstrike/escape formatting
    let raw = run.stdout;
    let mut out = String::with_capacity(raw.len());
    let mut chars = raw.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{8}' {
            out.pop();
        } else if c == '\u{1b}' {
            for d in chars.by_ref() {
                if d.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    // lines joined and hyphenation undone, so an option broken over two lines is found
    let mut text = String::with_capacity(out.len());
    for line in out.lines().map(str::trim).filter(|l| !l.is_empty()) {
        if text.ends_with('\u{2010}') {
            text.pop();
        } else if !text.is_empty() && !text.ends_with('-') {
            text.push(' ');
        }
        text.push_str(&line.split_whitespace().collect::<Vec<_>>().join(" "));
    }
    text
}

/// The long options `BIN --help` lists.
fn help_options(bin: &Path) -> BTreeSet<String> {
    let run = tools::run(10, &bin.display().to_string(), ["--help"]);
    run.check("--help");
    run.stdout
        .split(|c: char| c.is_whitespace() || c == ',' || c == '[' || c == ']')
        .filter(|w| w.starts_with("--") && w.len() > 2)
        .map(|w| {
            w.trim_end_matches(|c: char| !c.is_ascii_alphanumeric())
                .split('=')
                .next()
                .unwrap_or(w)
                .to_string()
        })
        .filter(|w| {
            w[2..]
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        })
        .collect()
}

#[test]
#[ignore = "release build: tools/test-all.sh stage deb"]
fn man_pages_render_and_match_help_and_docs() {
    let root = &built().root;
    for b in ["numatgtd", "numatgtadm"] {
        let text = render_man(&root.join(format!("usr/share/man/man8/{b}.8.gz")));
        assert!(text.contains(&format!("{b} - ")), "NAME of {b}(8):\n{text}");
        let options = help_options(&root.join("usr/sbin").join(b));
        assert!(options.len() >= 10, "{b} --help: {options:?}");
        for opt in &options {
            assert!(text.contains(opt.as_str()), "{b}(8) lacks {opt}:\n{text}");
        }
        assert!(!text.contains("--generate"), "{b}(8) offers --generate");
    }
    let yaml = render_man(&root.join("usr/share/man/man5/numatgt.yaml.5.gz"));
    assert!(yaml.contains("numatgt.yaml - "), "{yaml}");
    // every section of the reference, by its title
    let reference = std::fs::read_to_string(tests::workspace_root().join("docs/configuration.md"))
        .expect("docs/configuration.md");
    let mut sections = 0;
    for title in reference.lines().filter_map(|l| l.strip_prefix("## ")) {
        let title = title.replace('`', "");
        assert!(yaml.contains(&title), "numatgt.yaml(5) lacks \"{title}\"");
        sections += 1;
    }
    assert!(sections >= 10, "{sections} sections");
}

#[test]
#[ignore = "release build: tools/test-all.sh stage deb"]
fn completions_load_in_bash_and_zsh() {
    let root = &built().root;
    for b in ["numatgtd", "numatgtadm"] {
        let bash = root.join("usr/share/bash-completion/completions").join(b);
        let script = format!("source {} && complete -p {b}", bash.display());
        let run = tools::run(30, "bash", ["-c", script.as_str()]);
        assert!(
            run.check("bash").stdout.contains(&format!("-F _{b} ")),
            "{run}"
        );
        let zsh = root
            .join("usr/share/zsh/vendor-completions")
            .join(format!("_{b}"));
        tools::run(30, "zsh", ["-n".as_ref(), zsh.as_os_str()]).check("zsh -n");
        let text = std::fs::read_to_string(&zsh).expect("zsh completion");
        assert!(text.starts_with(&format!("#compdef {b}")), "{text}");
    }
    // what bash offers after `numatgtadm --mode l<TAB>`: the parser's modes
    let bash = root.join("usr/share/bash-completion/completions/numatgtadm");
    let script = format!(
        "source {} && COMP_WORDS=(numatgtadm --mode l) && COMP_CWORD=2 && \
         _numatgtadm numatgtadm l --mode && printf '%s\\n' \"${{COMPREPLY[@]}}\"",
        bash.display()
    );
    let run = tools::run(30, "bash", ["-c", script.as_str()]);
    let offered: BTreeSet<&str> = run.check("complete --mode").stdout.lines().collect();
    assert_eq!(
        offered,
        BTreeSet::from(["logicalunit", "lu", "lld"]),
        "{run}"
    );
}

#[test]
#[ignore = "release build: tools/test-all.sh stage deb"]
fn lintian_reports_no_error() {
    let run = tools::run(
        600,
        "lintian",
        [
            "--display-info".as_ref(),
            "--pedantic".as_ref(),
            built().deb.as_os_str(),
        ],
    );
    let report = format!("{run}");
    // exit status 1 means tags were emitted at the fail-on level (error)
    assert!(!run.timed_out(), "{report}");
    let mut unexplained = Vec::new();
    for line in run.stdout.lines() {
        let Some((level, rest)) = line.split_once(": numatgt") else {
            continue;
        };
        let tag = rest
            .trim_start_matches([':', ' '])
            .split_whitespace()
            .next()
            .unwrap_or("");
        match level {
            "E" => panic!("lintian error {tag}:\n{report}"),
            "W" if !LINTIAN_WARNINGS_EXPLAINED.contains(&tag) => unexplained.push(tag),
            _ => {}
        }
    }
    assert!(
        unexplained.is_empty(),
        "lintian warnings not explained in tools/deb/README.md: {unexplained:?}\n{report}"
    );
    assert!(run.status.success(), "{report}");
}
