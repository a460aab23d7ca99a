//! The artifact layouts a plugin may come in, and the checks on them.
//!
//! An OCI image manifest (or Docker's schema 2, the same shape) whose
//! layers hold exactly one WebAssembly component:
//! - the CNCF TAG Runtime layout (`wkg oci push`, Spin): config
//!   `application/vnd.wasm.config.v0+json`, one `application/wasm` layer;
//! - the older wasm-to-oci layout (Istio, Envoy): one
//!   `application/vnd.wasm.content.layer.v1+wasm` layer.
//!
//! "Exactly one wasm layer" is checked, not assumed, and any other layer or
//! config media type is refused by name: a container image or an index is
//! not a plugin.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::Error;
use super::reference::check_digest;

/// An OCI image manifest.
pub const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
/// Docker's schema 2 manifest (cosign's signatures use it on some registries).
pub const DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";
/// The CNCF wasm layer.
pub const WASM_LAYER: &str = "application/wasm";
/// wasm-to-oci's layer.
pub const WASM_LAYER_V1: &str = "application/vnd.wasm.content.layer.v1+wasm";
/// The CNCF wasm config.
pub const WASM_CONFIG: &str = "application/vnd.wasm.config.v0+json";
/// Config media types accepted beside [`WASM_CONFIG`]: wasm-to-oci's, the
/// OCI image config and the OCI 1.1 empty descriptor (the config is never
/// read: nothing in it is trusted or needed).
const OTHER_CONFIGS: &[&str] = &[
    "application/vnd.wasm.config.v1+json",
    "application/vnd.oci.image.config.v1+json",
    "application/vnd.oci.empty.v1+json",
];
/// An OCI image index (a referrers list).
pub const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
/// The most entries a referrers index may list (an artifact with a few
/// signatures, attestations and SBOMs has tens; 1024 entries are ~200 KiB).
pub const MAX_INDEX_ENTRIES: usize = 1024;
/// The `Accept` header of a manifest request.
pub const ACCEPT: &str = "application/vnd.oci.image.manifest.v1+json, \
                          application/vnd.docker.distribution.manifest.v2+json";

/// A content descriptor.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Descriptor {
    /// What the blob is.
    pub media_type: String,
    /// `sha256:…` (checked by [`ImageManifest::parse`]).
    pub digest: String,
    /// Its length in bytes.
    pub size: u64,
    /// Annotations (cosign's signature lives here).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// An image manifest, as far as durasync reads it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ImageManifest {
    /// Always 2.
    pub schema_version: u32,
    /// The manifest's own media type (may be absent in OCI manifests).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub media_type: Option<String>,
    /// The config blob.
    pub config: Descriptor,
    /// The layers.
    pub layers: Vec<Descriptor>,
    /// Manifest annotations.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// The most layers a manifest may list (a plugin has one; a signature
/// manifest one per signature).
pub const MAX_LAYERS: usize = 64;

impl ImageManifest {
    /// Parse a manifest; `digest` names it in errors. Refuses an index, a
    /// schema other than 2, a digest this host cannot check, too many layers.
    pub fn parse(bytes: &[u8], digest: &str) -> Result<ImageManifest, Error> {
        let bad = |reason: String| Error::BadManifest { digest: digest.to_owned(), reason };
        let value: serde_json::Value =
            serde_json::from_slice(bytes).map_err(|e| bad(format!("not JSON: {e}")))?;
        if let Some(mt) = value.get("mediaType").and_then(|v| v.as_str())
            && mt != OCI_MANIFEST
            && mt != DOCKER_MANIFEST
        {
            return Err(Error::MediaType {
                digest: digest.to_owned(),
                media_type: mt.to_owned(),
                reason: "is not an image manifest (an index or a list names several artifacts; \
                         reference one by its digest)"
                    .into(),
            });
        }
        let m: ImageManifest =
            serde_json::from_value(value).map_err(|e| bad(format!("not an image manifest: {e}")))?;
        if m.schema_version != 2 {
            return Err(bad(format!("schemaVersion is {}, not 2", m.schema_version)));
        }
        if m.layers.len() > MAX_LAYERS {
            return Err(bad(format!("{} layers, over the limit of {MAX_LAYERS}", m.layers.len())));
        }
        for d in std::iter::once(&m.config).chain(&m.layers) {
            check_digest(&d.digest).map_err(bad)?;
        }
        Ok(m)
    }

    /// The one WebAssembly layer of a plugin artifact. Refuses a config or
    /// layer of any other media type, and more (or fewer) than one wasm layer.
    pub fn wasm_layer(&self, digest: &str) -> Result<&Descriptor, Error> {
        let media = |mt: &str, reason: &str| Error::MediaType {
            digest: digest.to_owned(),
            media_type: mt.to_owned(),
            reason: reason.to_owned(),
        };
        let config = self.config.media_type.as_str();
        if config != WASM_CONFIG && !OTHER_CONFIGS.contains(&config) {
            return Err(media(config, "is not a wasm artifact's config (a container image is not a plugin)"));
        }
        let mut wasm = Vec::new();
        for layer in &self.layers {
            match layer.media_type.as_str() {
                WASM_LAYER | WASM_LAYER_V1 => wasm.push(layer),
                other => return Err(media(other, "is not a wasm layer; a plugin artifact holds only one")),
            }
        }
        match wasm.as_slice() {
            [one] => Ok(one),
            _ => Err(Error::WasmLayers { digest: digest.to_owned(), count: wasm.len() }),
        }
    }
}

/// An index entry, as far as referrers need it.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct IndexEntry {
    /// The manifest's media type.
    pub media_type: String,
    /// Its digest (checked).
    pub digest: String,
    /// Its size.
    pub size: u64,
    /// The artifact type it declares.
    #[serde(default)]
    pub artifact_type: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Index {
    schema_version: u32,
    #[serde(default)]
    media_type: Option<String>,
    #[serde(default)]
    manifests: Vec<IndexEntry>,
}

/// The entries of a referrers index (`bytes`, named `digest` in errors)
/// whose `artifactType` is `artifact_type`, in the index's order. Refuses
/// what is not an image index, an index of more than
/// [`MAX_INDEX_ENTRIES`], an entry whose digest this host cannot check.
pub fn referrers(bytes: &[u8], digest: &str, artifact_types: &[&str]) -> Result<Vec<IndexEntry>, Error> {
    let bad = |reason: String| Error::BadManifest { digest: digest.to_owned(), reason };
    let index: Index = serde_json::from_slice(bytes).map_err(|e| bad(format!("not an image index: {e}")))?;
    if index.schema_version != 2 {
        return Err(bad(format!("schemaVersion is {}, not 2", index.schema_version)));
    }
    if let Some(mt) = index.media_type.as_deref()
        && mt != OCI_INDEX
    {
        return Err(Error::MediaType {
            digest: digest.to_owned(),
            media_type: mt.to_owned(),
            reason: "is not an OCI image index (a referrers list is one)".into(),
        });
    }
    if index.manifests.len() > MAX_INDEX_ENTRIES {
        return Err(bad(format!(
            "the referrers index lists {} manifests, over the limit of {MAX_INDEX_ENTRIES}",
            index.manifests.len()
        )));
    }
    let mut found = Vec::new();
    for e in index.manifests {
        if e.artifact_type.as_deref().is_some_and(|t| artifact_types.contains(&t))
            && e.media_type == OCI_MANIFEST
        {
            check_digest(&e.digest).map_err(bad)?;
            found.push(e);
        }
    }
    Ok(found)
}

/// Check that a descriptor's digest is one this host can verify (and use
/// as a file name).
pub fn check_descriptor(d: &Descriptor) -> Result<(), Error> {
    check_digest(&d.digest).map_err(|reason| Error::BadManifest { digest: d.digest.clone(), reason })
}

#[cfg(test)]
mod tests {
    use super::*;

    const D: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    fn manifest(config: &str, layers: &[&str]) -> Vec<u8> {
        let layers: Vec<_> =
            layers.iter().map(|mt| serde_json::json!({"mediaType": mt, "digest": D, "size": 1})).collect();
        serde_json::json!({
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "config": {"mediaType": config, "digest": D, "size": 2},
            "layers": layers,
        })
        .to_string()
        .into_bytes()
    }

    #[test]
    fn both_layouts_give_their_one_wasm_layer() {
        for (config, layer) in
            [(WASM_CONFIG, WASM_LAYER), ("application/vnd.wasm.config.v1+json", WASM_LAYER_V1)]
        {
            let m = ImageManifest::parse(&manifest(config, &[layer]), D).unwrap();
            assert_eq!(m.wasm_layer(D).unwrap().media_type, layer);
        }
    }

    #[test]
    fn other_media_types_and_layer_counts_are_refused_by_name() {
        let two = ImageManifest::parse(&manifest(WASM_CONFIG, &[WASM_LAYER, WASM_LAYER]), D).unwrap();
        assert!(two.wasm_layer(D).unwrap_err().to_string().contains("2 wasm layers"));
        let none = ImageManifest::parse(&manifest(WASM_CONFIG, &[]), D).unwrap();
        assert!(none.wasm_layer(D).unwrap_err().to_string().contains("0 wasm layers"));
        let tar = "application/vnd.oci.image.layer.v1.tar+gzip";
        let image = ImageManifest::parse(&manifest(WASM_CONFIG, &[WASM_LAYER, tar]), D).unwrap();
        assert!(image.wasm_layer(D).unwrap_err().to_string().contains(tar));
        let cfg = "application/vnd.docker.container.image.v1+json";
        let image = ImageManifest::parse(&manifest(cfg, &[WASM_LAYER]), D).unwrap();
        assert!(image.wasm_layer(D).unwrap_err().to_string().contains(cfg));
        let index =
            br#"{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[]}"#;
        assert!(ImageManifest::parse(index, D).unwrap_err().to_string().contains("index"));
        assert!(ImageManifest::parse(b"<html>", D).unwrap_err().to_string().contains("not JSON"));
    }

    fn index(entries: &[(&str, &str)]) -> Vec<u8> {
        let m: Vec<_> = entries
            .iter()
            .map(|(mt, at)| serde_json::json!({"mediaType": mt, "digest": D, "size": 1, "artifactType": at}))
            .collect();
        serde_json::json!({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": m})
            .to_string()
            .into_bytes()
    }

    #[test]
    fn a_referrers_index_is_filtered_by_artifact_type_and_bounded_in_entries() {
        const BUNDLE: &str = "application/vnd.dev.sigstore.bundle.v0.3+json";
        const V02: &str = "application/vnd.dev.sigstore.bundle+json;version=0.2";
        let mixed = index(&[
            (OCI_MANIFEST, BUNDLE),
            (OCI_MANIFEST, "application/spdx+json"),
            (OCI_INDEX, BUNDLE),
            (OCI_MANIFEST, V02),
        ]);
        assert_eq!(referrers(&mixed, D, &[BUNDLE]).unwrap().len(), 1);
        assert_eq!(referrers(&mixed, D, &[BUNDLE, V02]).unwrap().len(), 2);
        let many: Vec<_> = (0..10_000).map(|_| (OCI_MANIFEST, BUNDLE)).collect();
        let err = referrers(&index(&many), D, &[BUNDLE]).unwrap_err().to_string();
        assert!(err.contains("10000 manifests, over the limit of 1024"), "{err}");
        let not_index = manifest(WASM_CONFIG, &[WASM_LAYER]);
        assert!(
            referrers(&not_index, D, &[BUNDLE]).unwrap_err().to_string().contains("not an OCI image index")
        );
    }
}
