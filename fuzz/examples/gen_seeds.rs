//! Writes the seed corpora of the fuzz targets into `fuzz/seeds/<target>/`:
//!
//! ```text
//! cargo run --manifest-path fuzz/Cargo.toml --example gen_seeds
//! ```
//!
//! Seeds are valid inputs in each target's format (see the target's doc comment): an
//! open-iscsi login, a READ(10), SendTargets, the example configuration, ...

use iscsi_proto::pdu::{
    Bhs, DataOut, Digests, NopOut, RESERVED_TAG, ScsiCommandHdr, TaskMgmtRequest, TextRequest,
    fields,
};
use numatgt_fuzz::{
    TARGET, TARGET_ACL, TARGET_SMALL, encode, kv, login_record, login_req,
    open_iscsi_operational_text, open_iscsi_security_text,
};
use std::path::{Path, PathBuf};
use tgtadm_wire::{GLOBAL_TID, Mode, NO_LUN, Op, ReqHeader};

fn write(dir: &Path, target: &str, name: &str, bytes: &[u8]) {
    let d = dir.join(target);
    std::fs::create_dir_all(&d).expect("create seed dir");
    std::fs::write(d.join(name), bytes).expect("write seed");
}

fn be32(v: u32) -> [u8; 4] {
    v.to_be_bytes()
}

fn read10(lba: u32, blocks: u16) -> [u8; 16] {
    let mut c = [0u8; 16];
    c[0] = 0x28;
    c[2..6].copy_from_slice(&lba.to_be_bytes());
    c[7..9].copy_from_slice(&blocks.to_be_bytes());
    c
}

fn write10(lba: u32, blocks: u16) -> [u8; 16] {
    let mut c = read10(lba, blocks);
    c[0] = 0x2a;
    c
}

fn main() {
    let dir: PathBuf = std::env::args()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("seeds"));
    let none = Digests::default();
    let both = Digests {
        header: true,
        data: true,
    };

    // ---- pdu_decode: [digests][max u32][wire bytes]
    let login1 = encode(
        login_req(0, 1, true, 1, 0),
        &open_iscsi_security_text(TARGET),
        none,
    );
    let login2 = encode(
        login_req(1, 3, true, 1, 1),
        &open_iscsi_operational_text("None", "None"),
        none,
    );
    let scsi_read = Bhs::ScsiCommand(ScsiCommandHdr {
        immediate: false,
        final_: true,
        read: true,
        write: false,
        attr: 1,
        lun: fields::lun_encode(1),
        itt: 1,
        edtl: 4096,
        cmd_sn: 1,
        exp_stat_sn: 2,
        cdb: read10(0, 8),
    });
    let pdu_seed = |dg: Digests, wire: &[u8]| {
        let mut v = vec![u8::from(dg.header) | (u8::from(dg.data) << 1)];
        v.extend_from_slice(&be32(262_144));
        v.extend_from_slice(wire);
        v
    };
    write(
        &dir,
        "pdu_decode",
        "login-security",
        &pdu_seed(none, &login1),
    );
    write(
        &dir,
        "pdu_decode",
        "login-operational",
        &pdu_seed(none, &login2),
    );
    write(
        &dir,
        "pdu_decode",
        "read10-digests",
        &pdu_seed(both, &encode(scsi_read, &[], both)),
    );
    let mut two = encode(scsi_read, &[], none);
    two.extend_from_slice(&encode(
        Bhs::DataOut(DataOut {
            final_: true,
            lun: 0,
            itt: 1,
            ttt: RESERVED_TAG,
            exp_stat_sn: 2,
            data_sn: 0,
            buffer_offset: 0,
        }),
        &[7u8; 13],
        none,
    ));
    write(&dir, "pdu_decode", "cmd-and-dataout", &pdu_seed(none, &two));
    let ext = iscsi_proto::pdu::Pdu {
        bhs: scsi_read,
        ahs: vec![
            iscsi_proto::pdu::Ahs::extended_cdb(&[1u8; 16]),
            iscsi_proto::pdu::Ahs::bidi_read_len(512),
        ],
        data: vec![],
    }
    .encode(both)
    .expect("encode");
    write(&dir, "pdu_decode", "ahs-digests", &pdu_seed(both, &ext));

    // ---- text_kv: [flags][mrdsl][mbl][fbl][chunk][text]
    let text_seed = |flags: u8, text: &[u8]| {
        let mut v = vec![flags];
        v.extend_from_slice(&be32(262_144));
        v.extend_from_slice(&be32(262_144));
        v.extend_from_slice(&be32(65_536));
        v.push(7);
        v.extend_from_slice(text);
        v
    };
    write(
        &dir,
        "text_kv",
        "operational",
        &text_seed(1, &open_iscsi_operational_text("None,CRC32C", "None")),
    );
    write(
        &dir,
        "text_kv",
        "security",
        &text_seed(0, &open_iscsi_security_text(TARGET)),
    );
    write(
        &dir,
        "text_kv",
        "fullfeature",
        &text_seed(
            2,
            &kv(&[
                ("SendTargets", "All"),
                ("MaxRecvDataSegmentLength", "0x1000"),
                ("X-com.example.foo", "bar"),
                ("TaskReporting", "RFC3720"),
                ("iSCSIProtocolLevel", "1"),
            ]),
        ),
    );
    write(
        &dir,
        "text_kv",
        "discovery",
        &text_seed(
            4 | 1,
            &kv(&[
                ("SessionType", "Discovery"),
                ("MaxBurstLength", "512"),
                ("FirstBurstLength", "16777215"),
                ("AuthMethod", "CHAP,None"),
            ]),
        ),
    );

    // ---- login: [chunk][records: 48-byte header, u16 len, data]
    let login_seed = |chunk: u8, recs: &[(Bhs, Vec<u8>)]| {
        let mut v = vec![chunk];
        for (b, d) in recs {
            v.extend_from_slice(&login_record(*b, d));
        }
        v
    };
    write(
        &dir,
        "login",
        "open-iscsi",
        &login_seed(
            0,
            &[
                (
                    login_req(0, 1, true, 1, 0),
                    open_iscsi_security_text(TARGET),
                ),
                (
                    login_req(1, 3, true, 1, 1),
                    open_iscsi_operational_text("None,CRC32C", "None,CRC32C"),
                ),
            ],
        ),
    );
    write(
        &dir,
        "login",
        "small-target-chunked",
        &login_seed(
            13,
            &[
                (
                    login_req(0, 1, true, 1, 0),
                    open_iscsi_security_text(TARGET_SMALL),
                ),
                (
                    login_req(1, 3, true, 1, 1),
                    open_iscsi_operational_text("CRC32C", "CRC32C"),
                ),
            ],
        ),
    );
    write(
        &dir,
        "login",
        "acl-refused",
        &login_seed(
            0,
            &[(
                login_req(0, 1, true, 1, 0),
                open_iscsi_security_text(TARGET_ACL),
            )],
        ),
    );
    write(
        &dir,
        "login",
        "discovery-one-pdu",
        &login_seed(
            0,
            &[(
                login_req(0, 3, true, 5, 0),
                kv(&[
                    ("InitiatorName", "iqn.1993-08.org.debian:01:x"),
                    ("SessionType", "Discovery"),
                    ("AuthMethod", "None"),
                    ("MaxRecvDataSegmentLength", "32768"),
                ]),
            )],
        ),
    );
    let mut cont1 = login_req(0, 1, false, 1, 0);
    if let Bhs::LoginRequest(r) = &mut cont1 {
        r.cont = true;
    }
    let sec = open_iscsi_security_text(TARGET);
    let (a, b) = sec.split_at(20);
    write(
        &dir,
        "login",
        "continued-text",
        &login_seed(
            0,
            &[
                (cont1, a.to_vec()),
                (login_req(0, 1, true, 1, 0), b.to_vec()),
                (
                    login_req(1, 3, true, 1, 1),
                    open_iscsi_operational_text("None", "None"),
                ),
            ],
        ),
    );

    // ---- connection: [setup][actions]
    // action 2: SCSI command: flags, itt, edtl kind, edtl..., cdb[16], imm len u16, attr, lun
    let mut read = vec![0u8]; // setup: no digests, normal target
    read.extend_from_slice(&[2, 0x01, 1, 1, 0x10, 0x00]); // READ, itt 1, edtl 0x1000
    read.extend_from_slice(&read10(0, 8));
    read.extend_from_slice(&[0, 0, 1, 1]); // imm len, attr, lun 1
    // complete: idx 0, GOOD, no sense, all the data, write length as expected
    read.extend_from_slice(&[4, 0, 0, 0, 1, 1]);
    write(&dir, "connection", "read10", &read);

    let mut wr = vec![0x03 | 0x80]; // digests, small bursts
    wr.extend_from_slice(&[2, 0x02 | 0x20 | 0x10, 2, 1, 0x20, 0x00]); // WRITE, imm, not final
    wr.extend_from_slice(&write10(0, 16));
    wr.extend_from_slice(&[0x04, 0x00, 1, 1]); // 1024 bytes immediate
    wr.extend_from_slice(&[3, 0x00, 1]); // Data-Out for the first R2T, in two pieces
    wr.extend_from_slice(&[3, 0x01, 0]); // the second R2T, one piece
    wr.extend_from_slice(&[4, 0, 0, 0, 1, 1]);
    wr.extend_from_slice(&[7, 0x80, 0]); // slow socket from here on
    wr.extend_from_slice(&[2, 0x01, 3, 1, 0x40, 0x00]); // READ 16 KiB
    wr.extend_from_slice(&read10(0, 32));
    wr.extend_from_slice(&[0, 0, 1, 1]);
    wr.extend_from_slice(&[4, 0, 0, 0, 1, 1]);
    wr.extend_from_slice(&[7, 0x01, 0x00]); // write 256 bytes of it
    write(&dir, "connection", "write10-r2t-digests", &wr);

    let mut ctl = vec![0x04]; // small target (NOP-In pings)
    ctl.extend_from_slice(&[10, 0]); // SendTargets=All
    ctl.extend_from_slice(&[6, 0x04, 0x00]); // tick 4 s
    ctl.extend_from_slice(&[6, 0x04, 0x00]);
    ctl.extend_from_slice(&[9, 1, 0, 0]); // answer the ping
    ctl.extend_from_slice(&[9, 0, 7, 0, 4, 1, 2, 3, 4]); // NOP-Out ping with data
    ctl.extend_from_slice(&[11, 0x45, 1, 1, 0]); // TMF LU reset
    ctl.extend_from_slice(&[8, 0, 0]);
    ctl.extend_from_slice(&[11, 0x80]); // logout
    write(&dir, "connection", "control", &ctl);

    let mut disc = vec![0x08]; // discovery session
    disc.extend_from_slice(&[10, 1]);
    disc.extend_from_slice(&[10, 0x40 | 0x20]); // SendTargets=All, C bit
    write(&dir, "connection", "discovery", &disc);

    // raw framed PDUs: a TMF abort task and a text with continuation via framed header
    let tmf = Bhs::TaskMgmtRequest(TaskMgmtRequest {
        immediate: true,
        function: 1,
        lun: fields::lun_encode(1),
        itt: 77,
        rtt: 1,
        cmd_sn: 2,
        exp_stat_sn: 3,
        ref_cmd_sn: 1,
        exp_data_sn: 0,
    });
    let mut raw = vec![0u8];
    raw.extend_from_slice(&[2, 0x01, 1, 1, 0x10, 0x00]);
    raw.extend_from_slice(&read10(8, 8));
    raw.extend_from_slice(&[0, 0, 1, 1]);
    raw.push(1);
    raw.extend_from_slice(&tmf.encode(0, 0));
    raw.extend_from_slice(&[0, 0, 0, 0]); // no AHS, no data, unchunked
    let nop = Bhs::NopOut(NopOut {
        immediate: true,
        lun: 0,
        itt: 9,
        ttt: RESERVED_TAG,
        cmd_sn: 2,
        exp_stat_sn: 3,
    });
    let wire = encode(nop, b"ping", none);
    raw.push(0);
    raw.extend_from_slice(&(wire.len() as u16).to_be_bytes());
    raw.push(5);
    raw.extend_from_slice(&wire);
    let text = Bhs::TextRequest(TextRequest {
        immediate: true,
        final_: true,
        cont: false,
        lun: 0,
        itt: 5,
        ttt: RESERVED_TAG,
        cmd_sn: 2,
        exp_stat_sn: 3,
    });
    raw.push(1);
    raw.extend_from_slice(&text.encode(0, 0));
    let st = kv(&[("SendTargets", "All")]);
    raw.push(0);
    raw.extend_from_slice(&(st.len() as u16).to_be_bytes());
    raw.extend_from_slice(&st);
    raw.push(3);
    raw.extend_from_slice(&[8, 0, 0, 4, 0, 0]);
    write(&dir, "connection", "raw-framed", &raw);

    // ---- cdb: [shape][cdb len][cdb][u16 data len][data]...
    let cmd = |cdb: &[u8], data: &[u8]| {
        let mut v = vec![cdb.len() as u8];
        v.extend_from_slice(cdb);
        v.extend_from_slice(&(data.len() as u16).to_be_bytes());
        v.extend_from_slice(data);
        v
    };
    let mut s = vec![0x04];
    s.extend(cmd(&read10(0, 8), &[]));
    write(&dir, "cdb", "read10-512", &s);
    let mut s = vec![0x01 | 0x04];
    s.extend(cmd(&write10(1, 1), &[0xabu8; 4096]));
    write(&dir, "cdb", "write10-4096", &s);
    let mut s = vec![0x00];
    s.extend(cmd(&[0x12, 0, 0, 0, 0xff, 0], &[])); // INQUIRY
    s.extend(cmd(&[0x12, 1, 0x83, 0, 0xff, 0], &[])); // VPD 83h
    s.extend(cmd(&[0x12, 1, 0xb0, 0, 0xff, 0], &[])); // Block Limits
    s.extend(cmd(&[0x25, 0, 0, 0, 0, 0, 0, 0, 0, 0], &[])); // READ CAPACITY(10)
    let mut rc16 = [0u8; 16];
    rc16[0] = 0x9e;
    rc16[1] = 0x10;
    rc16[13] = 32;
    s.extend(cmd(&rc16, &[]));
    s.extend(cmd(&[0xa0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0], &[])); // REPORT LUNS
    s.extend(cmd(&[0x1a, 0, 0x3f, 0, 0xff, 0], &[])); // MODE SENSE(6) all pages
    s.extend(cmd(&[0x03, 0, 0, 0, 252, 0], &[])); // REQUEST SENSE
    s.extend(cmd(&[0x00, 0, 0, 0, 0, 0], &[])); // TEST UNIT READY
    write(&dir, "cdb", "spc-mix", &s);
    let mut s = vec![0x04];
    // MODE SELECT(6) of the control page with D_SENSE=1, then a bad READ for the sense
    let ms = [0u8, 0, 0, 0, 0x0a, 10, 0x04, 0, 0, 0, 0, 0, 0, 0, 0, 0];
    s.extend(cmd(&[0x15, 0x10, 0, 0, ms.len() as u8, 0], &ms));
    s.extend(cmd(&read10(0xffff_fff0, 0x20), &[]));
    write(&dir, "cdb", "mode-select-dsense", &s);
    let mut s = vec![0x00];
    s.extend(cmd(&[0x2f, 0x02, 0, 0, 0, 0, 0, 0, 1, 0], &[0u8; 512])); // VERIFY(10) BYTCHK=1
    s.extend(cmd(&[0x35, 0, 0, 0, 0, 0, 0, 0, 0, 0], &[])); // SYNCHRONIZE CACHE(10)
    let mut w16 = [0u8; 16];
    w16[0] = 0x8a;
    w16[13] = 2;
    s.extend(cmd(&w16, &[1u8; 1024])); // WRITE(16)
    s.extend(cmd(&[0xa3, 0x0c, 1, 0, 0, 0, 0, 0, 1, 0, 0, 0], &[])); // REPORT SUPPORTED OPCODES
    write(&dir, "cdb", "sbc-mix", &s);

    // ---- config_yaml: the example configuration and a minimal one
    let example = include_str!("../../config/examples/numatgt.yaml");
    write(&dir, "config_yaml", "example", example.as_bytes());
    write(
        &dir,
        "config_yaml",
        "minimal",
        b"targets:\n  - iqn: iqn.2026-11.org.numatgt:disk1\n    luns:\n      - lun: 0\n        path: /tmp/disk.img\n        size: 64M\n",
    );
    write(&dir, "config_yaml", "empty", b"");
    // ---- iser_rx: [CM private data][setup][records]; logged in (setup bit 0), then a READ
    // announcing a read buffer, its completion (a Put), a WRITE with 8 KiB immediate data
    // announcing a write buffer (a Get for the rest), the data, its completion
    let iser_cmd = |flags: u8, bhs: Bhs, data: &[u8]| {
        let mut r = vec![1u8, flags];
        let mut stags = [0u8; 24];
        stags[0..4].copy_from_slice(&be32(0x1111)); // write STag
        stags[4..12].copy_from_slice(&0x10_0000u64.to_be_bytes());
        stags[12..16].copy_from_slice(&be32(0x2222)); // read STag
        stags[16..24].copy_from_slice(&0x20_0000u64.to_be_bytes());
        r.extend_from_slice(&stags);
        r.extend_from_slice(&encode(bhs, &[], none)[..48]);
        r.extend_from_slice(&(data.len() as u16).to_be_bytes());
        r.extend_from_slice(data);
        r
    };
    let mut s = vec![0xc0, 0, 0, 0, 0x01];
    s.extend(iser_cmd(0x04, scsi_read, &[]));
    s.extend([2u8, 1, 0]); // complete: full READ data, no sense
    let scsi_write = Bhs::ScsiCommand(ScsiCommandHdr {
        immediate: false,
        final_: false,
        read: false,
        write: true,
        attr: 1,
        lun: fields::lun_encode(1),
        itt: 2,
        edtl: 65536,
        cmd_sn: 2,
        exp_stat_sn: 3,
        cdb: write10(0, 128),
    });
    s.extend(iser_cmd(0x08, scsi_write, &[0x77u8; 8192]));
    s.extend([3u8, 1, 1]); // all the solicited data at once
    s.extend([2u8, 1, 0]);
    write(&dir, "iser_rx", "linux-read-write", &s);
    write(
        &dir,
        "iser_rx",
        "discovery",
        &[0xc0, 0, 0, 0, 0x03, 4, 0, 0, 0, 0],
    );

    // ---- tgtadm: [flags][u16 len][request]... (request = tgtadm's header + payload)
    let req = |mode: Mode, op: Op, tid: i32, lun: u64, payload: &str| {
        let h = ReqHeader {
            mode: mode.as_u32(),
            op: op.as_u32(),
            lld: "iscsi".into(),
            tid,
            lun,
            ..ReqHeader::default()
        };
        let bytes = h.encode(payload);
        let mut r = vec![1u8];
        r.extend_from_slice(&(bytes.len() as u16).to_be_bytes());
        r.extend_from_slice(&bytes);
        r
    };
    let seq = |reqs: &[Vec<u8>]| reqs.concat();
    let t2 = "targetname=iqn.2026-11.org.numatgt:t2";
    write(
        &dir,
        "tgtadm",
        "target-lifecycle",
        &seq(&[
            req(Mode::Target, Op::New, 2, NO_LUN, t2),
            req(Mode::Target, Op::Bind, 2, NO_LUN, "initiator-address=ALL"),
            req(
                Mode::Target,
                Op::Bind,
                2,
                NO_LUN,
                "initiator-name=iqn.1993-08.org.debian:01:x",
            ),
            req(
                Mode::Target,
                Op::Update,
                2,
                NO_LUN,
                "targetOps MaxRecvDataSegmentLength=65536,HeaderDigest=CRC32C,",
            ),
            req(Mode::Target, Op::Update, 2, NO_LUN, "State=offline"),
            req(Mode::Target, Op::Show, -1, NO_LUN, ""),
            req(Mode::Target, Op::Show, 2, NO_LUN, ""),
            req(Mode::Target, Op::Stats, 2, NO_LUN, ""),
            req(Mode::Target, Op::Unbind, 2, NO_LUN, "initiator-address=ALL"),
            req(Mode::Target, Op::Delete, 2, NO_LUN, ""),
        ]),
    );
    write(
        &dir,
        "tgtadm",
        "lun-lifecycle",
        &seq(&[
            req(
                Mode::Device,
                Op::New,
                1,
                1,
                "bstype=rdwr,bsopts=cache=page,path=/srv/a.img",
            ),
            req(
                Mode::Device,
                Op::New,
                1,
                2,
                "bstype=aio,bsopts=cache=off,bsoflags=sync,blocksize=4096,path=/srv/b.img",
            ),
            req(
                Mode::Device,
                Op::Update,
                1,
                1,
                "targetOps vendor_id=ACME,product_id=DISK,scsi_sn=0001,readonly=1,",
            ),
            req(
                Mode::Device,
                Op::Update,
                1,
                1,
                "targetOps size=2M,sense_format=1,thin_provisioning=1,removable=1,online=0,",
            ),
            req(Mode::Device, Op::Stats, 1, 1, ""),
            req(Mode::Target, Op::Show, -1, NO_LUN, ""),
            req(Mode::Device, Op::Delete, 1, 1, ""),
        ]),
    );
    write(
        &dir,
        "tgtadm",
        "accounts",
        &seq(&[
            req(
                Mode::Account,
                Op::New,
                -1,
                NO_LUN,
                "user=alice,password=alice-secret-1234",
            ),
            req(
                Mode::Account,
                Op::New,
                -1,
                NO_LUN,
                "user=tgt,password=target-secret-5678",
            ),
            req(Mode::Account, Op::Bind, 1, NO_LUN, "user=alice"),
            req(Mode::Account, Op::Bind, GLOBAL_TID, NO_LUN, "user=alice"),
            req(Mode::Account, Op::Show, -1, NO_LUN, ""),
            req(Mode::Account, Op::Unbind, 1, NO_LUN, "user=alice"),
            req(Mode::Account, Op::Delete, -1, NO_LUN, "user=alice"),
        ]),
    );
    write(
        &dir,
        "tgtadm",
        "system",
        &seq(&[
            req(Mode::System, Op::Show, -1, NO_LUN, ""),
            req(Mode::System, Op::Show, -1, NO_LUN, "dump=yaml"),
            req(
                Mode::System,
                Op::Update,
                -1,
                NO_LUN,
                "State=offline,debug=on",
            ),
            req(Mode::System, Op::Stats, -1, NO_LUN, ""),
            req(Mode::Lld, Op::Show, -1, NO_LUN, ""),
            req(Mode::Lld, Op::Stop, -1, NO_LUN, ""),
            req(Mode::Portal, Op::Show, -1, NO_LUN, ""),
            req(
                Mode::Portal,
                Op::New,
                -1,
                NO_LUN,
                "portalOps portal=127.0.0.1:3261,",
            ),
            req(Mode::Session, Op::Show, 1, NO_LUN, ""),
            req(Mode::Connection, Op::Show, 1, NO_LUN, ""),
            req(Mode::Connection, Op::Delete, 1, NO_LUN, ""),
        ]),
    );

    // ---- targets_conf: the example targets.conf, includes, a small one
    let example = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../config/examples/targets.conf"),
    )
    .expect("config/examples/targets.conf");
    write(&dir, "targets_conf", "example", example.as_bytes());
    write(
        &dir,
        "targets_conf",
        "includes",
        b"default-driver iscsi\nignore-errors yes\ninclude inc.conf\n<<include bad.conf>>\ninclude *.conf\n",
    );
    write(
        &dir,
        "targets_conf",
        "small",
        b"<target iqn.2026-11.org.numatgt:a>\n  <backing-store /dev/null>\n    lun 1\n    params readonly=1\n  </backing-store>\n  direct-store /dev/null\n  initiator-address ALL\n  incominguser u secret-secret-1\n  MaxBurstLength 65536\n</target>\noutgoingdiscoveryuser d discovery-secret\n",
    );

    // ---- multi_conn: [flags][steps]
    let rec = |sel: u8, bhs: Bhs, data: &[u8]| {
        let mut v = vec![sel];
        v.extend_from_slice(&login_record(bhs, data));
        v
    };
    let sec = kv(&[
        ("InitiatorName", numatgt_fuzz::INITIATOR),
        ("SessionType", "Normal"),
        ("TargetName", target_server::fuzzing::TARGET),
        ("AuthMethod", "None"),
    ]);
    let op_text = open_iscsi_operational_text("None", "None");
    // two connections with the same ISID: reinstatement; a third joins with the TSIH
    let mut m = vec![0u8];
    m.extend([0x40, 0x00, 0x41, 0x00, 0x42, 0x01]);
    m.extend([0x81, 0x01, 0x80, 0x00, 0xc0, 0x00, 0x10]);
    write(&dir, "multi_conn", "reinstate-join-logout", &m);
    // the same with raw login records (ISID, TSIH and CID set by the selector)
    let mut m = vec![0u8];
    for k in 0..3u8 {
        m.extend(rec(
            0x04 | 0x10 | k | if k == 2 { 0x08 } else { 0 },
            login_req(0, 1, true, 1, 0),
            &sec,
        ));
        m.extend(rec(
            0x04 | 0x10 | k | if k == 2 { 0x08 } else { 0 },
            login_req(1, 3, true, 1, 1),
            &op_text,
        ));
    }
    m.extend([0x82, 0x02, 0xc4, 0xc0, 0x01, 0x00]);
    write(&dir, "multi_conn", "raw-records", &m);
    // the test Directory, byte-at-a-time reads, close and logout by CID
    let mut m = vec![0x03u8];
    m.extend([0x40, 0x08, 0x41, 0x04, 0x80, 0x09, 0xc5, 0x41, 0x00]);
    write(&dir, "multi_conn", "test-dir", &m);

    eprintln!("seeds written to {}", dir.display());
}
