//! Debian's nginx for the tests that run `deploy/nginx/otpmcp.conf` (installed by
//! `scripts/test`).

use std::path::Path;
use std::process::Command;

/// The nginx command: Debian puts it in /usr/sbin, which a user's PATH may lack.
pub fn command() -> Command {
    let nginx = ["/usr/sbin/nginx", "/usr/bin/nginx"]
        .into_iter()
        .find(|path| Path::new(path).is_file())
        .unwrap_or("nginx");
    Command::new(nginx)
}

/// A main configuration that keeps everything under `prefix` and includes `site` in its
/// `http` block; in the foreground when `foreground`.
pub fn main_conf(prefix: &Path, site: &Path, foreground: bool) -> String {
    let prefix = prefix.display();
    let daemon = if foreground { "daemon off;\n" } else { "" };
    format!(
        "{daemon}pid {prefix}/nginx.pid;\nerror_log {prefix}/error.log;\nevents {{}}\nhttp {{\n    access_log off;\n    client_body_temp_path {prefix}/body;\n    proxy_temp_path {prefix}/proxy;\n    include {};\n}}\n",
        site.display()
    )
}
