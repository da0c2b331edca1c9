//! `--ca-file FILE`, shared by the commands that speak HTTPS to a server of their own deployment (a cluster's nodes,
//! the schema registry): the certificate authorities trusted instead of the system's roots (the `trust` crate).

use std::path::PathBuf;

use clap::Args;

#[derive(Debug, Clone, Default, Args)]
pub struct CaFileArg {
    /// PEM file of the certificate authorities to trust for `https://` servers (the cluster's nodes, the schema
    /// registry) instead of the system's roots: a private authority that signed the nodes' certificates.
    #[arg(long, value_name = "FILE", env = trust::CA_FILE_ENV)]
    pub ca_file: Option<PathBuf>,
}

impl CaFileArg {
    /// The roots trusted: the file's authorities when given, else the system's.
    pub fn trust(&self) -> anyhow::Result<trust::Trust> {
        Ok(trust::Trust::of(self.ca_file.as_deref())?)
    }
}
