//! numatgtadm: the tgtadm-compatible management CLI (issue 4 fills it in).
fn main() {
    eprintln!("numatgtadm: the management socket is not implemented yet (issue 4)");
    std::process::exit(22);
}
