//! (a) discovery + REPORT LUNS through `iscsi-ls -s`; (b) standard INQUIRY and VPD pages
//! through `iscsi-inq`, and READ CAPACITY(16) through `iscsi-readcapacity16`, for 512- and
//! 4096-byte logical blocks.

use tests::tools::{self, iscsi_ls_size};
use tests::{Daemon, LunSpec, MIB, TEST_IQN};

const VENDOR: &str = "NUMATGT";
const PRODUCT: &str = "TESTDISK";
const REVISION: &str = "0042";
const SERIAL: &str = "SNTEST0001";

fn check_iscsi_ls(d: &Daemon) {
    let r = tools::run(30, "iscsi-ls", ["-s", &d.portal_url()]);
    r.check("iscsi-ls -s");
    let want_target = format!("Target:{TEST_IQN} Portal:127.0.0.1:{}", d.port);
    assert!(
        r.stdout.lines().any(|l| l.starts_with(&want_target)),
        "iscsi-ls does not list `{want_target}`\n{r}"
    );
    for (spec, _) in &d.luns {
        let size = iscsi_ls_size(u64::from(spec.block_size), spec.num_blocks());
        let line = r
            .stdout
            .lines()
            .find(|l| {
                l.strip_prefix("Lun:")
                    .and_then(|rest| rest.split_whitespace().next())
                    .is_some_and(|n| n == spec.lun.to_string())
            })
            .unwrap_or_else(|| panic!("iscsi-ls does not list LUN {}\n{r}", spec.lun));
        assert!(
            line.contains("Type:DIRECT_ACCESS") && line.contains(&format!("(Size:{size})")),
            "LUN {} line `{line}`: want DIRECT_ACCESS with Size:{size}\n{r}",
            spec.lun
        );
    }
}

fn check_readcapacity16(d: &Daemon, spec: &LunSpec) {
    let r = tools::run(30, "iscsi-readcapacity16", [d.url(spec.lun)]);
    r.check("iscsi-readcapacity16");
    for want in [
        format!("RETURNED LOGICAL BLOCK ADDRESS:{}", spec.num_blocks() - 1),
        format!("LOGICAL BLOCK LENGTH IN BYTES:{}", spec.block_size),
        format!("Total size:{}", spec.size),
    ] {
        assert!(
            r.stdout.lines().any(|l| l.trim() == want),
            "READ CAPACITY(16) of LUN {}: missing `{want}`\n{r}",
            spec.lun
        );
    }
}

#[test]
fn iscsi_ls_lists_target_and_lun_512() {
    let d = Daemon::start(&[LunSpec::new(1, 512, 256 * MIB)]);
    check_iscsi_ls(&d);
}

#[test]
fn lun_with_4096_byte_blocks() {
    let spec = LunSpec::new(1, 4096, 128 * MIB);
    let d = Daemon::start(std::slice::from_ref(&spec));
    check_iscsi_ls(&d);
    check_readcapacity16(&d, &spec);
}

#[test]
fn two_luns_512_and_4096() {
    let a = LunSpec::new(1, 512, 256 * MIB);
    let b = LunSpec::new(2, 4096, 64 * MIB);
    let d = Daemon::start(&[a.clone(), b.clone()]);
    check_iscsi_ls(&d);
    check_readcapacity16(&d, &a);
    check_readcapacity16(&d, &b);
}

#[test]
fn readcapacity16_512() {
    let spec = LunSpec::new(1, 512, 256 * MIB);
    let d = Daemon::start(std::slice::from_ref(&spec));
    check_readcapacity16(&d, &spec);
}

fn field<'a>(out: &'a str, key: &str) -> Option<&'a str> {
    out.lines().find_map(|l| l.strip_prefix(key))
}

#[test]
fn inquiry_standard_and_vpd_pages() {
    let spec = LunSpec::new(1, 512, 256 * MIB).with_identity(VENDOR, PRODUCT, REVISION, SERIAL);
    let d = Daemon::start(&[spec]);
    let url = d.url(1);

    // standard INQUIRY
    let r = tools::run(30, "iscsi-inq", [url.as_str()]);
    r.check("iscsi-inq (standard)");
    assert_eq!(
        field(&r.stdout, "Peripheral Device Type:"),
        Some("DIRECT_ACCESS"),
        "{r}"
    );
    assert_eq!(
        field(&r.stdout, "Peripheral Qualifier:"),
        Some("CONNECTED"),
        "{r}"
    );
    assert_eq!(
        field(&r.stdout, "Vendor:").map(str::trim),
        Some(VENDOR),
        "{r}"
    );
    assert_eq!(
        field(&r.stdout, "Product:").map(str::trim),
        Some(PRODUCT),
        "{r}"
    );
    assert_eq!(
        field(&r.stdout, "Revision:").map(str::trim),
        Some(REVISION),
        "{r}"
    );

    // VPD 0x00: supported pages must include 0x00, 0x80, 0x83
    let r = tools::run(30, "iscsi-inq", ["-e", "1", "-c", "0", url.as_str()]);
    r.check("iscsi-inq -e 1 -c 0");
    for page in ["Page:0x00", "Page:0x80", "Page:0x83"] {
        assert!(
            r.stdout.lines().any(|l| l.trim_start().starts_with(page)),
            "supported VPD pages lack {page}\n{r}"
        );
    }

    // VPD 0x80: unit serial number (may be space-padded on the left)
    let r = tools::run(30, "iscsi-inq", ["-e", "1", "-c", "128", url.as_str()]);
    r.check("iscsi-inq -e 1 -c 128");
    let sn = field(&r.stdout, "Unit Serial Number:")
        .unwrap_or_else(|| panic!("no Unit Serial Number line\n{r}"));
    assert_eq!(
        sn.trim_matches(|c| c == '[' || c == ']').trim(),
        SERIAL,
        "unit serial number\n{r}"
    );

    // VPD 0x83: at least one designator, and an NAA designator for the logical unit
    let r = tools::run(30, "iscsi-inq", ["-e", "1", "-c", "131", url.as_str()]);
    r.check("iscsi-inq -e 1 -c 131");
    assert!(
        r.stdout.contains("DEVICE_IDENTIFICATION"),
        "page 0x83 not decoded\n{r}"
    );
    let blocks: Vec<&str> = r.stdout.split("DEVICE DESIGNATOR #").skip(1).collect();
    assert!(!blocks.is_empty(), "no designators in VPD 0x83\n{r}");
    assert!(
        blocks
            .iter()
            .any(|b| b.contains("Designator Type:(3) NAA")
                && b.contains("Association:(0) LOGICAL_UNIT")),
        "no NAA designator with LOGICAL_UNIT association in VPD 0x83\n{r}"
    );
}
