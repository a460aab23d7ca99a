//! The input: what `kubectl get configmaps,secrets -o json` prints, a `v1`
//! `List` whose `items` are ConfigMaps (`data` strings, `binaryData`
//! base64) and Secrets (`data` base64).
//!
//! The whole input is checked before anything is written: a malformed
//! List is one clear error and the run writes nothing.

use std::collections::BTreeMap;
use std::fmt;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde::Deserialize;

/// The two kinds of object certsync reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    /// A `v1` ConfigMap.
    ConfigMap,
    /// A `v1` Secret.
    Secret,
}

impl Kind {
    /// The folder of the root that holds objects of this kind.
    pub fn folder(self) -> &'static str {
        match self {
            Kind::ConfigMap => "configmaps",
            Kind::Secret => "secrets",
        }
    }

    /// The mode of the files written for this kind: certificates are
    /// public, keys are not.
    pub fn mode(self) -> u32 {
        match self {
            Kind::ConfigMap => 0o644,
            Kind::Secret => 0o600,
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Kind::ConfigMap => "configmap",
            Kind::Secret => "secret",
        })
    }
}

/// The objects of a List, by kind and name, each as its decoded keys.
pub type Objects = BTreeMap<(Kind, String), BTreeMap<String, Vec<u8>>>;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawList {
    kind: String,
    items: Vec<RawItem>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawItem {
    kind: String,
    metadata: Metadata,
    #[serde(default)]
    data: Option<BTreeMap<String, String>>,
    #[serde(default)]
    binary_data: Option<BTreeMap<String, String>>,
}

#[derive(Deserialize)]
struct Metadata {
    name: String,
}

/// Parse and decode the whole List. Items of other kinds are ignored.
pub fn parse(input: &[u8]) -> Result<Objects, String> {
    if input.iter().all(u8::is_ascii_whitespace) {
        return Err(
            "the input is empty: give it the output of `kubectl get configmaps,secrets -o json`".into()
        );
    }
    let list: RawList =
        serde_json::from_slice(input).map_err(|e| format!("the input is not a Kubernetes List: {e}"))?;
    if list.kind != "List" && !list.kind.ends_with("List") {
        return Err(format!("the input is a {:?}, not a List", list.kind));
    }
    let mut objects = Objects::new();
    for (i, item) in list.items.into_iter().enumerate() {
        let kind = match item.kind.as_str() {
            "ConfigMap" => Kind::ConfigMap,
            "Secret" => Kind::Secret,
            _ => continue,
        };
        let name = item.metadata.name;
        let at = format!("items[{i}] ({kind} {name:?})");
        let mut keys = BTreeMap::new();
        match kind {
            Kind::ConfigMap => {
                for (key, value) in item.data.unwrap_or_default() {
                    keys.insert(key, value.into_bytes());
                }
                for (key, value) in item.binary_data.unwrap_or_default() {
                    let bytes = decode(&value).map_err(|e| format!("{at}: binaryData {key:?}: {e}"))?;
                    if keys.insert(key.clone(), bytes).is_some() {
                        return Err(format!("{at}: key {key:?} is in both data and binaryData"));
                    }
                }
            }
            Kind::Secret => {
                for (key, value) in item.data.unwrap_or_default() {
                    let bytes = decode(&value).map_err(|e| format!("{at}: data {key:?}: {e}"))?;
                    keys.insert(key, bytes);
                }
            }
        }
        if objects.insert((kind, name), keys).is_some() {
            return Err(format!("{at}: the List holds this object twice"));
        }
    }
    Ok(objects)
}

fn decode(value: &str) -> Result<Vec<u8>, String> {
    STANDARD.decode(value).map_err(|e| format!("not valid base64: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_decodes_configmap_strings_binary_data_and_secret_base64() {
        let input = br#"{"apiVersion":"v1","kind":"List","items":[
            {"kind":"ConfigMap","metadata":{"name":"ca"},"data":{"ca.crt":"PEM"},"binaryData":{"b":"AAE="}},
            {"kind":"Secret","metadata":{"name":"tls"},"data":{"tls.key":"a2V5"}},
            {"kind":"Pod","metadata":{"name":"ignored"}}]}"#;
        let objects = parse(input).unwrap();
        assert_eq!(objects.len(), 2);
        let ca = &objects[&(Kind::ConfigMap, "ca".to_owned())];
        assert_eq!(ca["ca.crt"], b"PEM");
        assert_eq!(ca["b"], [0, 1]);
        assert_eq!(objects[&(Kind::Secret, "tls".to_owned())]["tls.key"], b"key");
    }

    #[test]
    fn parse_rejects_bad_base64_naming_the_item_and_key() {
        let input =
            br#"{"kind":"List","items":[{"kind":"Secret","metadata":{"name":"tls"},"data":{"k":"!!"}}]}"#;
        let err = parse(input).unwrap_err();
        assert!(err.contains("items[0] (secret \"tls\"): data \"k\": not valid base64"), "{err}");
    }

    #[test]
    fn parse_rejects_empty_input_non_lists_and_duplicates() {
        assert!(parse(b" \n").unwrap_err().contains("the input is empty"));
        assert!(parse(b"{\"kind\":\"Secret\",\"items\":[]}").unwrap_err().contains("not a List"));
        assert!(parse(b"[1,2]").unwrap_err().contains("not a Kubernetes List"));
        let dup = br#"{"kind":"List","items":[{"kind":"Secret","metadata":{"name":"a"}},
            {"kind":"Secret","metadata":{"name":"a"}}]}"#;
        assert!(parse(dup).unwrap_err().contains("twice"));
    }

    #[test]
    fn parse_rejects_a_key_in_both_data_and_binary_data() {
        let input = br#"{"kind":"List","items":[{"kind":"ConfigMap","metadata":{"name":"c"},
            "data":{"k":"x"},"binaryData":{"k":"eA=="}}]}"#;
        assert!(parse(input).unwrap_err().contains("both data and binaryData"));
    }
}
